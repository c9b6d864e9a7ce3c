"""OpenAI's Batch API (and Azure OpenAI's global batch, the same API under ``/openai`` with a deployment).

A batch is a JSON-lines file of chat completion requests (``custom_id``, ``method``, ``url``, ``body``)
uploaded with ``purpose=batch``, then ``POST /batches`` over it with the 24 h window. Status is
``validating``, ``in_progress``, ``finalizing``, then ``completed``, ``failed``, ``expired`` or ``cancelled``;
answers are in the output file, failures in the error file, and a request in neither (an expired or cancelled
batch) is reported failed with the batch's state. Limits: 50,000 requests and 200 MB per file.

A batch carries the run's tag in its ``metadata`` (``cp_observe_batch``) and names its uploaded file, so a run
killed between the create and writing its id finds it again by listing ``GET /batches`` (newest first) for
either, back to the intent's time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from cp_observe._batch._api import SKEW_S, BatchStatus, Endpoint, Found, Intent, Result
from cp_observe._batch._http import LIST_PAGES, get_lines, get_object, named, post_json, post_multipart, seconds_of
from cp_observe._batch._requests import BatchRequest

__all__ = ["OpenAIBatches"]

_ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
_MAX_REQUESTS = 50_000
_MAX_BYTES = 200 * 1024 * 1024
# A tier means nothing inside a batch (it is billed at the batch price): the live flex tier's parameter stays out.
_NOT_IN_BATCH = frozenset({"service_tier"})


class OpenAIBatches:
    """The Batch API of OpenAI (``azure=False``) or of an Azure OpenAI resource (``azure=True``)."""

    max_requests = _MAX_REQUESTS
    max_bytes = _MAX_BYTES

    def __init__(self, endpoint: Endpoint, model: str, *, azure: bool = False, sync_model: str | None = None) -> None:
        self.name = "azure" if azure else "openai"
        self._endpoint = endpoint
        self._model = model  # the wire model: the model name, or Azure's global-batch deployment
        self._sync_model = sync_model or model  # Azure: the judge's standard deployment takes synchronous calls
        self._azure = azure
        self._url = "/chat/completions" if azure else "/v1/chat/completions"
        self._ids: dict[str, list[str]] = {}  # batch id -> its custom ids, for the requests no file answers

    def _at(self, path: str) -> str:
        base = self._endpoint.base.rstrip("/")
        if self._azure:
            return f"{base}/openai{path}?api-version={self._endpoint.extra['api_version']}"
        return f"{base}{path}"

    def _headers(self) -> dict[str, str]:
        if self._azure:
            return {"api-key": self._endpoint.key}
        return {"authorization": f"Bearer {self._endpoint.key}"}

    def _line(self, request: BatchRequest) -> bytes:
        params = {k: v for k, v in request.params.items() if k not in _NOT_IN_BATCH}
        body = {"model": self._model, "messages": request.messages, **params}
        return orjson.dumps({"custom_id": request.custom_id, "method": "POST", "url": self._url, "body": body})

    def size_of(self, request: BatchRequest) -> int:
        return len(self._line(request)) + 1

    def upload(self, requests: Sequence[BatchRequest]) -> str:
        content = b"\n".join(self._line(r) for r in requests) + b"\n"
        uploaded = post_multipart(self._at("/files"), self._headers(), {"purpose": "batch"}, "judge.jsonl", content)
        return named(uploaded, "id", "the file upload")

    def create(self, requests: Sequence[BatchRequest], intent: Intent) -> str:
        created = post_json(self._at("/batches"), self._headers(), {
            "input_file_id": intent.file_id, "endpoint": self._url, "completion_window": "24h",
            "metadata": {"source": "cp-observe", "cp_observe_batch": intent.tag},
        })
        return named(created, "id", "the batch create")

    def find(self, intent: Intent, known: set[str]) -> Found:
        """The batch whose metadata carries the intent's tag or whose input is its file (listed newest first)."""
        after = ""
        for _ in range(LIST_PAGES):
            url = self._at("/batches")
            url += ("&" if "?" in url else "?") + "limit=100" + (f"&after={after}" if after else "")
            page = get_object(url, self._headers(), "the batch list")
            batches = [b for b in page.get("data") or [] if isinstance(b, dict)]
            for batch in batches:
                metadata = batch.get("metadata") or {}
                ours = (isinstance(metadata, dict) and metadata.get("cp_observe_batch") == intent.tag) or (
                    bool(intent.file_id) and batch.get("input_file_id") == intent.file_id)
                if ours and batch.get("id") not in known:
                    return Found((str(batch["id"]),))
            created = [seconds_of(b.get("created_at")) for b in batches]
            oldest = min((c for c in created if c is not None), default=None)
            if not page.get("has_more") or not batches or (oldest is not None and oldest < intent.at - SKEW_S):
                return Found()
            after = str(batches[-1].get("id") or "")
        return Found()

    def complete(self, request: BatchRequest) -> Result:
        """One synchronous chat completion of ``request`` (a corrective call), read like a batch result."""
        path = f"/deployments/{self._sync_model}/chat/completions" if self._azure else "/chat/completions"
        url = self._at(path) if self._azure else f"{self._endpoint.base.rstrip('/')}{path}"
        body = post_json(url, self._headers(), {"model": self._sync_model, "messages": request.messages,
                                                 **request.params})
        return _result({"custom_id": request.custom_id, "response": {"status_code": 200, "body": body}})

    def _batch(self, batch_id: str) -> dict[str, Any]:
        return get_object(self._at(f"/batches/{batch_id}"), self._headers(), f"batch {batch_id}")

    def status(self, batch_id: str) -> BatchStatus:
        batch = self._batch(batch_id)
        counts = batch.get("request_counts") or {}
        state = str(batch.get("status") or "unknown")
        return BatchStatus(state, state in _ENDED, int(counts.get("total") or 0), int(counts.get("completed") or 0),
                           int(counts.get("failed") or 0))

    def results(self, batch_id: str) -> Iterator[Result]:
        batch = self._batch(batch_id)
        for key in ("output_file_id", "error_file_id"):
            file_id = batch.get(key)
            if not isinstance(file_id, str) or not file_id:
                continue
            yield from map(_result, get_lines(self._at(f"/files/{file_id}/content"), self._headers()))


def _result(line: dict[str, Any]) -> Result:
    custom_id = str(line.get("custom_id") or "")
    response = line.get("response") or {}
    error = line.get("error")
    status = int(response.get("status_code") or 0) if isinstance(response, dict) else 0
    body = response.get("body") if isinstance(response, dict) else None
    if error or status != 200 or not isinstance(body, dict):
        detail = error if error else (body.get("error") if isinstance(body, dict) else body)
        prefix = f"HTTP {status}: " if status else ""
        return Result(custom_id, error=(prefix + str(detail))[:300] or "no answer")
    try:
        text = body["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        text = ""
    usage = body.get("usage") or {}
    return Result(custom_id, str(text), int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
