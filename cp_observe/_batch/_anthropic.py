"""Anthropic's Message Batches API, over its own HTTP API (litellm can only retrieve these batches).

``POST /v1/messages/batches`` takes up to 100,000 requests (256 MB), each a ``custom_id`` and the Messages
API ``params``. Status is ``processing_status`` (``in_progress``, ``canceling``, ``ended``) with per-request
counts; once ended, ``results_url`` gives JSON lines whose ``result.type`` is ``succeeded``, ``errored``,
``canceled`` or ``expired``.

The messages are the synchronous call's: the system message becomes ``system``, the rest stay in order.
``response_format`` has no Messages API field here, so the reply is asked for as JSON by the prompt alone
(as the plain-text mode of the synchronous judge does) and read by the same parser and alignment.

A message batch carries no name or metadata, and its requests cannot be read before it ends, so a run killed
between the create and writing its id can find its batch only by creation time and size: listing
``GET /v1/messages/batches`` (newest first) for a batch of the intent's request count created since the intent
(less ten minutes of clock skew) that the run does not already hold. Such a batch is taken as the run's, with
a warning naming it; were it another program's batch of the same size, its results would not hold this run's
``custom_id``s, so they would be listed failed (``--batch-retry-failed`` submits them), never scored wrongly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from cp_observe._batch._api import SKEW_S, BatchStatus, Found, Intent, JsonEntries, Result
from cp_observe._batch._http import LIST_PAGES, get_lines, get_object, named, post_json, seconds_of
from cp_observe._batch._requests import BatchRequest

__all__ = ["AnthropicBatches", "messages_params"]

_VERSION = "2023-06-01"
_MAX_TOKENS = 4096  # litellm's default for Anthropic models when the call sets none
_PASSED = {"temperature": "temperature", "top_p": "top_p", "max_tokens": "max_tokens", "stop": "stop_sequences"}


def messages_params(model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """The Messages API parameters of one chat completion request."""
    system = "\n\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": _MAX_TOKENS,
        "messages": [{"role": m.get("role"), "content": m.get("content")}
                     for m in messages if m.get("role") != "system"],
    }
    if system:
        body["system"] = system
    for key, wire in _PASSED.items():
        if key in params:
            value = params[key]
            body[wire] = [value] if wire == "stop_sequences" and isinstance(value, str) else value
    return body


class AnthropicBatches(JsonEntries):
    """Anthropic's Message Batches."""

    name = "anthropic"
    max_requests = 100_000
    max_bytes = 256 * 1024 * 1024

    def _headers(self) -> dict[str, str]:
        return {"x-api-key": self._endpoint.key, "anthropic-version": _VERSION}

    def _entry(self, request: BatchRequest) -> dict[str, Any]:
        params = messages_params(self._model, request.messages, request.params)
        return {"custom_id": request.custom_id, "params": params}

    def upload(self, requests: Sequence[BatchRequest]) -> str:
        return ""  # the requests go inline in the create

    def create(self, requests: Sequence[BatchRequest], intent: Intent) -> str:
        created = post_json(f"{self._endpoint.base.rstrip('/')}/v1/messages/batches", self._headers(),
                            {"requests": [self._entry(r) for r in requests]})
        return named(created, "id", "the batch create")

    def find(self, intent: Intent, known: set[str]) -> Found:
        """Batches of the intent's size created since it (less the skew), oldest first: not exact."""
        found: list[tuple[float, str]] = []
        after = ""
        for _ in range(LIST_PAGES):
            url = f"{self._endpoint.base.rstrip('/')}/v1/messages/batches?limit=100" + (
                f"&after_id={after}" if after else "")
            page = get_object(url, self._headers(), "the batch list")
            batches = [b for b in page.get("data") or [] if isinstance(b, dict)]
            oldest: float | None = None
            for batch in batches:
                created = seconds_of(batch.get("created_at"))
                if created is None:
                    continue
                oldest = created if oldest is None else min(oldest, created)
                counts = batch.get("request_counts") or {}
                size = sum(int(v or 0) for v in counts.values()) if isinstance(counts, dict) else -1
                if created >= intent.at - SKEW_S and size == intent.requests and batch.get("id") not in known:
                    found.append((created, str(batch["id"])))
            if not page.get("has_more") or not batches or (oldest is not None and oldest < intent.at - SKEW_S):
                break
            after = str(page.get("last_id") or batches[-1].get("id") or "")
        return Found(tuple(i for _, i in sorted(found)), exact=False)

    def complete(self, request: BatchRequest) -> Result:
        """One synchronous Messages call with the batch entry's parameters (a corrective call)."""
        message = post_json(f"{self._endpoint.base.rstrip('/')}/v1/messages", self._headers(),
                            messages_params(self._model, request.messages, request.params))
        return _result({"custom_id": request.custom_id, "result": {"type": "succeeded", "message": message}})

    def _batch(self, batch_id: str) -> dict[str, Any]:
        return get_object(f"{self._endpoint.base.rstrip('/')}/v1/messages/batches/{batch_id}", self._headers(),
                          f"batch {batch_id}")

    def status(self, batch_id: str) -> BatchStatus:
        batch = self._batch(batch_id)
        counts = batch.get("request_counts") or {}
        numbers = {k: int(counts.get(k) or 0) for k in ("processing", "succeeded", "errored", "canceled", "expired")}
        state = str(batch.get("processing_status") or "unknown")
        failed = numbers["errored"] + numbers["canceled"] + numbers["expired"]
        return BatchStatus(state, state == "ended", sum(numbers.values()), numbers["succeeded"], failed)

    def results(self, batch_id: str) -> Iterator[Result]:
        url = self._batch(batch_id).get("results_url")
        if not isinstance(url, str) or not url:
            return
        yield from map(_result, get_lines(url, self._headers()))


def _result(line: dict[str, Any]) -> Result:
    custom_id = str(line.get("custom_id") or "")
    result = line.get("result") or {}
    kind = result.get("type")
    if kind != "succeeded":
        return Result(custom_id, error=f"{kind}: {str(result.get('error') or '')[:300]}")
    message = result.get("message") or {}
    text = "".join(part.get("text", "") for part in message.get("content") or [] if isinstance(part, dict)
                   and part.get("type") == "text")
    usage = message.get("usage") or {}
    return Result(custom_id, text, int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))
