"""The Gemini API's batch mode with inline requests (``models/{model}:batchGenerateContent``; not Vertex).

The batch is one ``POST`` whose ``batch.input_config.requests.requests`` holds each ``GenerateContentRequest``
with ``metadata.key`` = the ``custom_id``; inline batches stay under 20 MB. The answer is a long-running
operation named ``batches/{id}``; ``GET /v1beta/batches/{id}`` gives ``metadata.state`` (``BATCH_STATE_PENDING``,
``_RUNNING``, ``_SUCCEEDED``, ``_FAILED``, ``_CANCELLED``, ``_EXPIRED``; older answers say ``JOB_STATE_``) and,
once ``done``, ``response.inlinedResponses.inlinedResponses``: a ``response`` or an ``error`` per request.

The messages are the synchronous call's: the system message becomes ``system_instruction``, assistant turns
``model`` turns; ``response_format`` becomes ``response_mime_type: application/json`` (the reply is read by
the same parser and alignment).

A batch's display name carries the run's tag (``cp-observe <tag>``), so a run killed between the create and
writing its id finds it again by listing ``GET /v1beta/batches``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from cp_observe._batch._api import BatchStatus, Found, Intent, JsonEntries, Result
from cp_observe._batch._http import LIST_PAGES, get_object, named, post_json
from cp_observe._batch._requests import BatchRequest

__all__ = ["GeminiBatches", "generate_content_request"]

_ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"})


def generate_content_request(messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """The ``GenerateContentRequest`` of one chat completion request."""
    system = "\n\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    contents = [{"role": "model" if m.get("role") == "assistant" else "user",
                 "parts": [{"text": str(m.get("content"))}]}
                for m in messages if m.get("role") != "system"]
    config: dict[str, Any] = {}
    if "temperature" in params:
        config["temperature"] = params["temperature"]
    if "max_tokens" in params:
        config["max_output_tokens"] = params["max_tokens"]
    if isinstance(params.get("response_format"), Mapping):
        config["response_mime_type"] = "application/json"
    body: dict[str, Any] = {"contents": contents, "generation_config": config}
    if system:
        body["system_instruction"] = {"parts": [{"text": system}]}
    return body


class GeminiBatches(JsonEntries):
    """The Gemini API's batch mode, inline requests."""

    name = "gemini"
    max_requests = 100_000
    max_bytes = 20 * 1024 * 1024

    def _headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self._endpoint.key}

    def _entry(self, request: BatchRequest) -> dict[str, Any]:
        return {"request": generate_content_request(request.messages, request.params),
                "metadata": {"key": request.custom_id}}

    def upload(self, requests: Sequence[BatchRequest]) -> str:
        return ""  # the requests go inline in the create

    def create(self, requests: Sequence[BatchRequest], intent: Intent) -> str:
        body = {"batch": {"display_name": _display_name(intent),
                          "input_config": {"requests": {"requests": [self._entry(r) for r in requests]}}}}
        url = f"{self._endpoint.base.rstrip('/')}/v1beta/models/{self._model}:batchGenerateContent"
        return named(post_json(url, self._headers(), body), "name", "the batch create", prefix="batches/")

    def find(self, intent: Intent, known: set[str]) -> Found:
        """The batch whose display name carries the intent's tag (the listing's order is not relied on)."""
        wanted = _display_name(intent)
        token = ""
        for _ in range(LIST_PAGES):
            url = f"{self._endpoint.base.rstrip('/')}/v1beta/batches?pageSize=100" + (
                f"&pageToken={token}" if token else "")
            page = get_object(url, self._headers(), "the batch list")
            for batch in page.get("operations") or page.get("batches") or []:
                if not isinstance(batch, dict):
                    continue
                metadata = batch.get("metadata") or {}
                name = metadata.get("displayName") or metadata.get("display_name") or batch.get("displayName")
                if name == wanted and batch.get("name") not in known:
                    return Found((str(batch["name"]),))
            token = str(page.get("nextPageToken") or "")
            if not token:
                break
        return Found()

    def complete(self, request: BatchRequest) -> Result:
        """One synchronous ``generateContent`` with the batch entry's request (a corrective call)."""
        url = f"{self._endpoint.base.rstrip('/')}/v1beta/models/{self._model}:generateContent"
        response = post_json(url, self._headers(), generate_content_request(request.messages, request.params))
        return _result({"metadata": {"key": request.custom_id}, "response": response})

    def _batch(self, batch_id: str) -> dict[str, Any]:
        return get_object(f"{self._endpoint.base.rstrip('/')}/v1beta/{batch_id}", self._headers(), batch_id)

    def status(self, batch_id: str) -> BatchStatus:
        batch = self._batch(batch_id)
        metadata = batch.get("metadata") or {}
        state = str(metadata.get("state") or "unknown")
        stats = metadata.get("batchStats") or {}
        ended = bool(batch.get("done")) or state.rsplit("_", 1)[-1] in _ENDED
        return BatchStatus(state, ended, int(stats.get("requestCount") or 0),
                           int(stats.get("successfulRequestCount") or 0), int(stats.get("failedRequestCount") or 0))

    def results(self, batch_id: str) -> Iterator[Result]:
        batch = self._batch(batch_id)
        output = batch.get("response") or (batch.get("metadata") or {}).get("output") or {}
        inlined = (output.get("inlinedResponses") or {}).get("inlinedResponses") or []
        for item in inlined:
            if isinstance(item, dict):
                yield _result(item)


def _result(item: dict[str, Any]) -> Result:
    custom_id = str((item.get("metadata") or {}).get("key") or "")
    if item.get("error") or not isinstance(item.get("response"), dict):
        return Result(custom_id, error=str(item.get("error") or "no response")[:300])
    response = item["response"]
    try:
        parts = response["candidates"][0]["content"]["parts"]
        text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
    except (KeyError, IndexError, TypeError):
        return Result(custom_id, error=f"no candidate: {str(response)[:300]}")
    usage = response.get("usageMetadata") or {}
    completion = int(usage.get("candidatesTokenCount") or 0) + int(usage.get("thoughtsTokenCount") or 0)
    return Result(custom_id, text, int(usage.get("promptTokenCount") or 0), completion)


def _display_name(intent: Intent) -> str:
    return f"cp-observe {intent.tag}"
