"""A loopback server speaking the batch APIs of OpenAI, Azure OpenAI, Anthropic and the Gemini API.

The batch tests and ``benchmarks/judging/bench_batch_replay.py`` point ``cp-observe replay --batch`` at
``BatchServer().url`` and get real HTTP on every step: the file upload, the batch create, the status polls, the
results download. Each request in a batch is answered as ``JudgeServer``'s ``good()`` answers a synchronous call
(same policy, same token counts), so a batch run and a synchronous run against the two servers must score alike.
A batch ends after ``polls_to_end`` status polls; ``expire`` ends it expired with only the first half answered;
``fail`` names requests (by their user message, a predicate) that come back as per-request errors; ``misalign``
names requests answered with a reply that fails alignment; ``creates_allowed`` answers that many batch creates
and refuses the rest with a 500; ``stall_creates`` creates a batch and then holds the create's answer until
``release()`` (a client killed meanwhile has made a batch it never learnt the id of). Each provider's batch list
is served (OpenAI's and Azure's with ``metadata`` and ``input_file_id``, Anthropic's with ``created_at`` and
counts only, the Gemini API's with the display name), newest first, paged. ``POST /v1/chat/completions`` is
served too (as the providers serve their synchronous API beside the batch one), for the corrective calls.
Standard library only.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cp_observe.testing._behaviours import _answer_good, _Call, word_overlap_policy

__all__ = ["BatchServer"]

Predicate = Callable[[str], bool]
_GEMINI_CREATE = re.compile(r"^/v1beta/models/(?P<model>[^/:]+):batchGenerateContent$")
_GEMINI_SYNC = re.compile(r"^/v1beta/models/(?P<model>[^/:]+):generateContent$")
_AZURE_CHAT = re.compile(r"^/v1/deployments/[^/]+/chat/completions$")


@dataclass
class _Batch:
    kind: str  # openai | anthropic | gemini
    id: str
    items: list[tuple[str, list[dict[str, Any]]]]  # (custom_id, chat messages)
    created_at: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)  # OpenAI's metadata and input file, Gemini's display name
    polls: int = 0
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)  # custom_id -> {"text", "prompt", "completion"} | {"error"}
    state: str = "in_progress"


class BatchServer:
    """Batch APIs on loopback. ``url`` is the base: OpenAI's API at ``url + "/v1"``, Azure's at ``url``
    (``/openai/...?api-version=``), Anthropic's and the Gemini API's at ``url``."""

    def __init__(self, *, polls_to_end: int = 1, expire: bool = False, fail: Predicate | None = None,
                 misalign: Predicate | None = None, creates_allowed: int | None = None,
                 stall_creates: bool = False) -> None:
        self.polls_to_end = polls_to_end
        self.stall_creates = stall_creates
        self._released = threading.Event()
        self.creates_allowed = creates_allowed  # batch creates answered before every further one gets a 500
        self.expire = expire
        self.fail = fail
        self.misalign = misalign
        self.batches: dict[str, _Batch] = {}
        self.files: dict[str, bytes] = {}
        self.paths: list[tuple[str, str]] = []
        self.sync_calls = 0  # synchronous chat completions (the corrective calls)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> BatchServer:
        handler = type("_BoundHandler", (_Handler,), {"owner": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="batch-server", daemon=True)
        self._thread.start()
        return self

    def release(self) -> None:
        """Answer the creates ``stall_creates`` holds (and every later one at once)."""
        self.stall_creates = False
        self._released.set()

    def __exit__(self, *exc: object) -> None:
        self._released.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "use BatchServer as a context manager"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def created(self) -> int:
        """Batches created so far."""
        return len(self.batches)

    # --- answering -------------------------------------------------------------------------------------
    def _answer(self, messages: list[dict[str, Any]], *, sync: bool = False) -> dict[str, Any]:
        user = " ".join(str(m.get("content")) for m in messages if m.get("role") == "user")
        if self.fail is not None and self.fail(user) and not sync:
            return {"error": "server_error: the loopback batch server fails this request"}
        reply = _answer_good(_Call({"messages": messages}, word_overlap_policy, threading.Event(), "batch"))
        body = json.loads(reply.payload)
        usage = body["usage"]
        answer = {"text": body["choices"][0]["message"]["content"], "prompt": usage["prompt_tokens"],
                  "completion": usage["completion_tokens"]}
        if self.misalign is not None and not sync and self.misalign(user) and len(messages) == 2:
            # The same tokens billed, the indices shifted: a reply the judge's alignment refuses.
            entries = json.loads(answer["text"])["verdicts"]
            for entry in entries:
                entry["context_index"] += 1
            answer["text"] = json.dumps({"verdicts": entries})
        return answer

    def _advance(self, batch: _Batch) -> None:
        """One status poll: the batch ends on the ``polls_to_end``-th."""
        batch.polls += 1
        if batch.state != "in_progress" or batch.polls < self.polls_to_end:
            return
        items = batch.items[: len(batch.items) // 2] if self.expire else batch.items
        for custom_id, messages in items:
            batch.answers[custom_id] = self._answer(messages)
        batch.state = "expired" if self.expire else "ended"

    def _new(self, kind: str, items: list[tuple[str, list[dict[str, Any]]]], prefix: str,
             **meta: Any) -> _Batch:
        with self._lock:
            batch = _Batch(kind, f"{prefix}{next(self._ids)}", items, time.time(), meta)
            self.batches[batch.id] = batch
        if self.stall_creates:  # the batch exists; its creator waits for an answer that comes late
            self._released.wait(120)
        return batch

    def _listed(self, kind: str, query: dict[str, str], cursor: str) -> tuple[list[_Batch], bool]:
        """One page of ``kind``'s batches, newest first, after the batch id ``query[cursor]``."""
        with self._lock:
            ordered = sorted((b for b in self.batches.values() if b.kind == kind), key=lambda b: -b.created_at)
        after = query.get(cursor)
        if after:
            ids = [b.id for b in ordered]
            ordered = ordered[ids.index(after) + 1:] if after in ids else []
        limit = int(query.get("limit") or query.get("pageSize") or 20)
        return ordered[:limit], len(ordered) > limit

    # --- routes ----------------------------------------------------------------------------------------
    def respond(self, method: str, target: str, headers: Any, body: bytes) -> tuple[int, bytes, str]:
        path, _, text = target.partition("?")
        query = dict(part.partition("=")[::2] for part in text.split("&") if part)
        self.paths.append((method, path))
        if not (headers.get("authorization") or headers.get("api-key") or headers.get("x-api-key")
                or headers.get("x-goog-api-key")):
            return 401, b'{"error": {"message": "no key"}}', "application/json"
        if path.startswith("/openai/"):
            path = "/v1" + path[len("/openai"):]  # Azure: the same API under /openai, with ?api-version=
        if method == "POST" and (path == "/v1/chat/completions" or _AZURE_CHAT.match(path)):
            self.sync_calls += 1  # the synchronous APIs beside the batch ones, for the corrective calls
            reply = _answer_good(_Call(json.loads(body), word_overlap_policy, threading.Event(), "sync"))
            return reply.status, reply.payload, "application/json"
        if method == "POST" and path == "/v1/messages":
            self.sync_calls += 1
            a = self._answer(_from_anthropic(json.loads(body)), sync=True)
            return _json(200, {"id": "msg", "type": "message", "role": "assistant",
                               "content": [{"type": "text", "text": a["text"]}],
                               "usage": {"input_tokens": a["prompt"], "output_tokens": a["completion"]}})
        if method == "POST" and _GEMINI_SYNC.match(path):
            self.sync_calls += 1
            a = self._answer(_from_gemini(json.loads(body)), sync=True)
            return _json(200, {"candidates": [{"content": {"role": "model", "parts": [{"text": a["text"]}]}}],
                               "usageMetadata": {"promptTokenCount": a["prompt"], "candidatesTokenCount": a["completion"]}})
        if path == "/v1/files" and method == "POST":
            return self._upload(headers, body)
        creating = method == "POST" and (path in ("/v1/batches", "/v1/messages/batches")
                                          or _GEMINI_CREATE.match(path) is not None)
        if creating and self.creates_allowed is not None and len(self.batches) >= self.creates_allowed:
            return 500, b'{"error": {"message": "the loopback batch server refuses this create"}}', "application/json"
        if path == "/v1/batches" and method == "POST":
            request = json.loads(body)
            lines = [json.loads(line) for line in self.files[request["input_file_id"]].splitlines() if line.strip()]
            batch = self._new("openai", [(line["custom_id"], line["body"]["messages"]) for line in lines], "batch_",
                              metadata=request.get("metadata") or {}, input_file_id=request["input_file_id"])
            return _json(200, self._openai_status(batch))
        if method == "GET" and path in ("/v1/batches", "/v1/messages/batches", "/v1beta/batches"):
            return self._list(path, query)
        if path.startswith("/v1/batches/") and method == "GET":
            batch = self.batches[path.rsplit("/", 1)[1]]
            self._advance(batch)
            return _json(200, self._openai_status(batch))
        if path.startswith("/v1/files/") and path.endswith("/content"):
            return 200, self.files[path.split("/")[3]], "application/jsonl"
        if path == "/v1/messages/batches" and method == "POST":
            request = json.loads(body)
            items = [(r["custom_id"], _from_anthropic(r["params"])) for r in request["requests"]]
            return _json(200, self._anthropic_status(self._new("anthropic", items, "msgbatch_")))
        if path.startswith("/v1/messages/batches/") and path.endswith("/results"):
            return 200, self._anthropic_results(self.batches[path.split("/")[4]]), "application/x-jsonl"
        if path.startswith("/v1/messages/batches/") and method == "GET":
            batch = self.batches[path.rsplit("/", 1)[1]]
            self._advance(batch)
            return _json(200, self._anthropic_status(batch))
        match = _GEMINI_CREATE.match(path)
        if match and method == "POST":
            requests = json.loads(body)["batch"]["input_config"]["requests"]["requests"]
            items = [(r["metadata"]["key"], _from_gemini(r["request"])) for r in requests]
            batch = self._new("gemini", items, "", display_name=json.loads(body)["batch"].get("display_name"))
            return _json(200, {"name": f"batches/{batch.id}", "metadata": {"state": "BATCH_STATE_PENDING"}})
        if path.startswith("/v1beta/batches/") and method == "GET":
            batch = self.batches[path.rsplit("/", 1)[1]]
            self._advance(batch)
            return _json(200, self._gemini_status(batch))
        return 404, b'{"error": {"message": "not found"}}', "application/json"

    def _list(self, path: str, query: dict[str, str]) -> tuple[int, bytes, str]:
        """One page of a provider's batch list, newest first, in that provider's shape."""
        if path == "/v1beta/batches":
            page, more = self._listed("gemini", query, "pageToken")
            answer: dict[str, Any] = {"operations": [self._gemini_status(b, listed=True) for b in page]}
            if more:
                answer["nextPageToken"] = page[-1].id
            return _json(200, answer)
        if path == "/v1/batches":
            page, more = self._listed("openai", query, "after")
            data = [self._openai_status(b) for b in page]
            answer = {"object": "list", "data": data, "has_more": more}
        else:
            page, more = self._listed("anthropic", query, "after_id")
            data = [self._anthropic_status(b) for b in page]
            answer = {"data": data, "has_more": more}
        answer.update(first_id=data[0]["id"] if data else None, last_id=data[-1]["id"] if data else None)
        return _json(200, answer)

    def _upload(self, headers: Any, body: bytes) -> tuple[int, bytes, str]:
        boundary = headers.get("content-type", "").split("boundary=", 1)[-1].encode()
        content = b""
        for part in body.split(b"--" + boundary):
            if b'name="file"' in part:
                content = part.split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n", 1)[0]
        file_id = f"file-{next(self._ids)}"
        self.files[file_id] = content
        return _json(200, {"id": file_id, "object": "file", "purpose": "batch", "bytes": len(content)})

    def _openai_status(self, batch: _Batch) -> dict[str, Any]:
        status = {"in_progress": "in_progress", "ended": "completed", "expired": "expired"}[batch.state]
        done = [k for k, a in batch.answers.items() if "error" not in a]
        failed = [k for k, a in batch.answers.items() if "error" in a]
        answer: dict[str, Any] = {"id": batch.id, "object": "batch", "status": status,
                                  "created_at": int(batch.created_at),
                                  "input_file_id": batch.meta.get("input_file_id"),
                                  "metadata": batch.meta.get("metadata") or {},
                                  "request_counts": {"total": len(batch.items), "completed": len(done),
                                                     "failed": len(failed)}}
        if batch.state != "in_progress" and f"{batch.id}-out" not in self.files:
            out, errors = [], []
            for custom_id, a in batch.answers.items():
                if "error" in a:
                    errors.append({"id": "r", "custom_id": custom_id, "response": {"status_code": 500, "body": {
                        "error": {"message": a["error"]}}}, "error": None})
                else:
                    out.append({"id": "r", "custom_id": custom_id, "response": {"status_code": 200, "body": {
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": a["text"]}}],
                        "usage": {"prompt_tokens": a["prompt"], "completion_tokens": a["completion"]}}},
                        "error": None})
            self.files[f"{batch.id}-out"] = "\n".join(json.dumps(x) for x in out).encode()
            self.files[f"{batch.id}-err"] = "\n".join(json.dumps(x) for x in errors).encode()
        if batch.state != "in_progress":
            answer["output_file_id"] = f"{batch.id}-out"
            answer["error_file_id"] = f"{batch.id}-err"
        return answer

    def _anthropic_status(self, batch: _Batch) -> dict[str, Any]:
        succeeded = sum("error" not in a for a in batch.answers.values())
        errored = len(batch.answers) - succeeded
        expired = len(batch.items) - len(batch.answers) if batch.state == "expired" else 0
        processing = len(batch.items) - len(batch.answers) - expired
        answer: dict[str, Any] = {
            "id": batch.id, "type": "message_batch", "created_at": _rfc3339(batch.created_at),
            "processing_status": "in_progress" if batch.state == "in_progress" else "ended",
            "request_counts": {"processing": processing, "succeeded": succeeded, "errored": errored,
                               "canceled": 0, "expired": expired},
            "results_url": None,
        }
        if batch.state != "in_progress":
            answer["results_url"] = f"{self.url}/v1/messages/batches/{batch.id}/results"
        return answer

    def _anthropic_results(self, batch: _Batch) -> bytes:
        lines = []
        for custom_id, _ in batch.items:
            a = batch.answers.get(custom_id)
            if a is None:
                result: dict[str, Any] = {"type": "expired"}
            elif "error" in a:
                result = {"type": "errored", "error": {"type": "api_error", "message": a["error"]}}
            else:
                result = {"type": "succeeded", "message": {
                    "id": "msg", "type": "message", "role": "assistant", "content": [{"type": "text", "text": a["text"]}],
                    "usage": {"input_tokens": a["prompt"], "output_tokens": a["completion"]}}}
            lines.append(json.dumps({"custom_id": custom_id, "result": result}))
        return "\n".join(lines).encode()

    def _gemini_status(self, batch: _Batch, *, listed: bool = False) -> dict[str, Any]:
        state = {"in_progress": "BATCH_STATE_RUNNING", "ended": "BATCH_STATE_SUCCEEDED",
                 "expired": "BATCH_STATE_EXPIRED"}[batch.state]
        failed = sum("error" in a for a in batch.answers.values())
        answer: dict[str, Any] = {"name": f"batches/{batch.id}", "done": batch.state != "in_progress", "metadata": {
            "state": state, "displayName": batch.meta.get("display_name"), "createTime": _rfc3339(batch.created_at),
            "batchStats": {"requestCount": len(batch.items), "successfulRequestCount": len(batch.answers) - failed,
                           "failedRequestCount": failed}}}
        if batch.state != "in_progress" and not listed:
            responses = []
            for custom_id, a in batch.answers.items():
                if "error" in a:
                    responses.append({"metadata": {"key": custom_id}, "error": {"code": 500, "message": a["error"]}})
                else:
                    responses.append({"metadata": {"key": custom_id}, "response": {
                        "candidates": [{"content": {"role": "model", "parts": [{"text": a["text"]}]}}],
                        "usageMetadata": {"promptTokenCount": a["prompt"], "candidatesTokenCount": a["completion"]}}})
            answer["response"] = {"inlinedResponses": {"inlinedResponses": responses}}
        return answer


def _from_anthropic(params: dict[str, Any]) -> list[dict[str, Any]]:
    system = [{"role": "system", "content": params["system"]}] if params.get("system") else []
    return system + [{"role": m["role"], "content": m["content"]} for m in params["messages"]]


def _from_gemini(request: dict[str, Any]) -> list[dict[str, Any]]:
    system = request.get("system_instruction")
    messages = [{"role": "system", "content": system["parts"][0]["text"]}] if system else []
    for content in request["contents"]:
        role = "assistant" if content["role"] == "model" else "user"
        messages.append({"role": role, "content": "".join(p["text"] for p in content["parts"])})
    return messages


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat().replace("+00:00", "Z")


def _json(status: int, body: Any) -> tuple[int, bytes, str]:
    return status, json.dumps(body).encode(), "application/json"


class _Handler(BaseHTTPRequestHandler):
    owner: BatchServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            status, payload, kind = self.owner.respond(self.command, self.path, headers, body)
        except Exception as exc:  # noqa: BLE001 - a test server answers 500 and lives on
            status, payload, kind = 500, json.dumps({"error": {"message": repr(exc)}}).encode(), "application/json"
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client went away (killed while a stalled create was held)
            self.close_connection = True

    do_GET = do_POST = _handle
