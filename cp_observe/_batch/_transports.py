"""The two passes' transports under an unchanged ``LLMJudge``: one records each call, one answers from results.

``LLMJudge.use_transport`` swaps where its calls go and nothing else, so both passes build their messages and
parameters with the synchronous judge's own code, and the second pass reads, aligns and scores replies with
it too.

- ``RecordingTransport`` (first pass) appends each call to the ``RequestLog`` and answers "no" for every
  context it counts in the prompt, so the judge aligns, caches and moves on as it would, and records the
  same calls the second pass will make. Nothing of the first pass is emitted.
- ``AnsweringTransport`` (second pass) finds each call's result by its ``custom_id``. A call the batch did not
  hold -- the corrective call after a misaligned reply, a per-context call, a call the verdict cache shaped
  differently -- goes synchronously to the provider's standard API (``SyncCaller``), counted and priced apart. A
  request the batch failed is a judge error (the evaluation is counted failed), never a silent gap.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any

import orjson

from cp_observe._batch._api import BatchProvider, Result
from cp_observe._batch._http import BatchApiError
from cp_observe._batch._requests import BatchRequest, RequestLog, request_id
from cp_observe._judging._lean import LeanConnectionError, LeanReply, LeanStatusError
from cp_observe._judging._prices import Price
from cp_observe._types import Usage

__all__ = ["AnsweringTransport", "RecordingTransport", "SyncCaller", "contexts_in"]

_END = re.compile(r"^=== END \S+ ===$", re.MULTILINE)
_FAILED_STATUS = 424  # neither retried nor read as a refusal of structured output by the judge


def contexts_in(messages: list[dict[str, Any]]) -> int:
    """How many context blocks the judge prompt holds: its block ends, less the question's and the reference's."""
    user = next((m.get("content") for m in messages if m.get("role") == "user"), "")
    return max(len(_END.findall(str(user))) - 2, 0)


class RecordingTransport:
    """First pass: record the call, answer an aligned all-"no" reply."""

    def __init__(self, log: RequestLog) -> None:
        self.log = log
        self.calls = 0

    async def complete(self, messages: list[dict[str, Any]], params: Mapping[str, Any], *,
                       timeout: float | None = None) -> LeanReply:
        self.log.add(messages, params)
        self.calls += 1
        entries = [{"context_index": i, "verdict": "no", "reason": ""} for i in range(contexts_in(messages))]
        return LeanReply(orjson.dumps({"verdicts": entries}).decode(), Usage(), 0.0)


class SyncCaller:
    """A synchronous call through the provider's standard API, with the batch entry's own body, at its price.

    The corrective call is the one request a batch run sends synchronously: it goes in the same provider
    format as the batch's requests (``BatchProvider.complete``), on a worker thread so the evaluator's loop
    keeps running. A provider's error status comes back as the lean transport's, so the judge retries a 429
    or a 5xx as it would on its own path.
    """

    def __init__(self, provider: BatchProvider, price: Price | None) -> None:
        self._provider = provider
        self._price = price

    async def complete(self, messages: list[dict[str, Any]], params: Mapping[str, Any], *,
                       timeout: float | None = None) -> LeanReply:
        request = BatchRequest(request_id(messages, params), list(messages), dict(params))
        try:
            result = await asyncio.to_thread(self._provider.complete, request)
        except BatchApiError as exc:
            if exc.status:
                raise LeanStatusError(exc.status, {}, str(exc)) from None
            raise LeanConnectionError(str(exc)) from None
        if not result.ok:
            raise LeanStatusError(_FAILED_STATUS, {}, f"corrective call failed: {result.error}")
        usage = Usage(1, result.prompt_tokens, result.completion_tokens)
        cost = self._price.cost(usage) if self._price is not None else None
        return LeanReply(result.text, usage, cost)


class AnsweringTransport:
    """Second pass: the batch's answer to each call, or a synchronous call for one the batch did not hold.

    Used by the evaluator's one event loop; its counters are read once the processor has been flushed.
    """

    def __init__(self, results: Mapping[str, Result], price: Price | None, fallback: Any) -> None:
        self._results = results
        self._price = price
        self._fallback = fallback
        self.answered = 0
        self.failed = 0
        self.batch_cost_usd: float | None = 0.0 if price is not None else None
        self.batch_prompt_tokens = 0
        self.batch_completion_tokens = 0
        self.corrective_calls = 0
        self.corrective_cost_usd: float | None = 0.0
        self._billed: set[str] = set()  # bounded by the batch's requests; a merged request is billed once

    async def complete(self, messages: list[dict[str, Any]], params: Mapping[str, Any], *,
                       timeout: float | None = None) -> LeanReply:
        custom_id = request_id(messages, params)
        result = self._results.get(custom_id)
        if result is None:
            self.corrective_calls += 1
            reply: LeanReply = await self._fallback.complete(messages, params)
            if reply.cost_usd is None or self.corrective_cost_usd is None:
                self.corrective_cost_usd = None
            else:
                self.corrective_cost_usd += reply.cost_usd
            return reply
        if not result.ok:
            self.failed += 1
            raise LeanStatusError(_FAILED_STATUS, {}, f"batch request {custom_id[:16]} failed: {result.error}")
        self.answered += 1
        if custom_id in self._billed:  # an identical call merged into one request: the provider billed it once
            return LeanReply(result.text, Usage(), 0.0 if self._price is not None else None)
        self._billed.add(custom_id)
        usage = Usage(1, result.prompt_tokens, result.completion_tokens)
        cost = self._price.cost(usage, "batch") if self._price is not None else None
        if cost is not None and self.batch_cost_usd is not None:
            self.batch_cost_usd += cost
        self.batch_prompt_tokens += result.prompt_tokens
        self.batch_completion_tokens += result.completion_tokens
        return LeanReply(result.text, usage, cost)
