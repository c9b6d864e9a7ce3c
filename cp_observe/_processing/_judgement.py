"""The judge stage: one judge call of a ready record, the plain, reranker or cascade case, and its ``Outcome``.

The cases differ only in what is called: the plain judge over the contexts; a reranker's one judgement over its
input and output (``_judging/_rerank.py``); or the cascade (``_cascade.py``, gates before its LLM call only).
Around the call, once: the gates, the timeout, instrumentation suppressed (the judge's own calls are neither traced
nor scored), and the circuit told of the result. Runs on the evaluator thread only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY

from cp_observe import _names as n
from cp_observe._errors import JudgeError, JudgeTransportError
from cp_observe._judging._evaluate import evaluate, judge_model_name
from cp_observe._judging._prices import billed_usd
from cp_observe._judging._rerank import evaluate_rerank
from cp_observe._types import CascadeResult, Judge, ScoreResult

if TYPE_CHECKING:
    from cp_observe._processing._cascade import Cascade, Gate
    from cp_observe._processing._record import Record

__all__ = ["Outcome", "call_judge", "failure_reason"]


class Outcome:
    """What one judge call ended in: ``skipped`` (a gate refused), ``failed`` or ``scored``.

    ``result`` is the reported score (the cascade's: the LLM's where it judged, else the cheap judge's);
    ``cascade`` both of its judgements; ``model`` the judge named on the evaluation; ``cheap`` whether the
    failure was the cascade's cheap judge.
    """

    __slots__ = ("cascade", "cheap", "end_ns", "error", "kind", "model", "reason", "result", "start_ns")

    def __init__(self, kind: str, reason: str, *, model: str = "", start_ns: int = 0,
                 result: ScoreResult | None = None, error: BaseException | None = None,
                 cascade: CascadeResult | None = None, cheap: bool = False) -> None:
        self.kind = kind
        self.reason = reason
        self.model = model
        self.start_ns = start_ns
        self.end_ns = time.time_ns()
        self.result = result
        self.error = error
        self.cascade = cascade
        self.cheap = cheap


async def call_judge(
    record: Record,
    contexts: Sequence[str],
    *,
    llm: Judge,
    cascade: Cascade | None,
    gates: Gate,
    limit: int,
    timeout_s: float,
) -> Outcome:
    """Judge ``record`` on ``contexts`` (its first ``limit``): refused by a gate, failed, or scored.

    Raises:
        asyncio.CancelledError: the evaluator is shutting down (the caller counts the target dropped).
    """
    query = record.query or ""
    reference = record.reference
    if cascade is not None:  # the gates stand before its LLM calls only
        model = judge_model_name(cascade.cheap)
        judging = cascade.judge(llm, trace_id=record.span_context.trace_id, span_id=record.span_context.span_id,
                                gates=gates, failure_reason=failure_reason, query=query,
                                reference_text=record.reference_text, reference=reference,  # type: ignore[arg-type]
                                contexts=contexts[:limit])
    else:
        refused = gates.refusal()
        if refused is not None:
            return Outcome(n.OUTCOME_SKIPPED, refused)
        model = judge_model_name(llm)
        before = record.before if record.stage == n.STAGE_RERANK else None
        if before is not None:  # a reranker: one judgement of both orders' documents
            judging = evaluate_rerank(llm, query=query, reference_text=record.reference_text,
                                      reference=reference,  # type: ignore[arg-type]
                                      before=before, after=contexts, limit=limit)
        else:
            judging = evaluate(llm, query=query, reference_text=record.reference_text,
                               reference=reference,  # type: ignore[arg-type]
                               contexts=contexts[:limit])
    start_ns = time.time_ns()
    token = otel_context.attach(otel_context.set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        done = await asyncio.wait_for(judging, timeout=timeout_s)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a failing judge is an outcome, never an exception in the host
        if cascade is None:  # the cascade's circuit is the LLM's, told inside it; the cheap judge failed here
            gates.failed()
        gates.spend(billed_usd(exc))  # the replies before the failure were billed all the same
        return Outcome(n.OUTCOME_FAILED, failure_reason(exc), model=model, start_ns=start_ns, error=exc,
                       cheap=cascade is not None)
    finally:
        otel_context.detach(token)
    if isinstance(done, CascadeResult):
        return Outcome(n.OUTCOME_SCORED, "ok", model=done.reported.judge_model, start_ns=start_ns,
                       result=done.reported, cascade=done)
    gates.judged(done.cost_usd)
    return Outcome(n.OUTCOME_SCORED, "ok", model=done.judge_model, start_ns=start_ns, result=done)


def failure_reason(exc: BaseException) -> str:
    """The ``failed`` reason of a judge call that raised ``exc``."""
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout"
    if isinstance(exc, JudgeTransportError):
        return "judge_unavailable"
    if isinstance(exc, JudgeError):
        return "judge_error"
    return "judge_exception"
