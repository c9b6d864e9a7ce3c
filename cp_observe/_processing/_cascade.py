"""The cheap-plus-LLM cascade: who judges a retrieval.

With a cheap judge configured, every scored retrieval is judged by it, and a uniform ``llm_share`` of them also
by the LLM judge (the processor's ``judge``). The cheap judge's score ``f`` on all of them and the LLM's ``y`` on
the subsample are what prediction-powered inference combines (``_judging/_ppi.py``; the emitter exports their
sums). The rules of this module:

- The draw is a hash of the retrieval's trace and span id, salted apart from the trace-id sampling hash, so it
  is uniform over the scored retrievals (forced traces included), independent of the sampling decision, and the
  same on every replica and on a replay.
- The gates (circuit, rate cap, daily budget) stand before LLM calls only: the cheap judge always runs, and an
  LLM call a gate refuses leaves the retrieval scored by the cheap judge (the skip reason is on its span).
- The reported score (the evaluation span's ``gen_ai.evaluation.score.value``, the score histogram, the sinks)
  is the LLM's where it judged, else the cheap judge's; both scores are on the span with their judge identity.
- The cheap judge failing fails the evaluation (nothing to report); the LLM failing only loses the subsample
  point and counts against the circuit.

Runs on the evaluator thread only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cp_observe import _names as n
from cp_observe._judging._evaluate import evaluate
from cp_observe._judging._prices import billed_usd
from cp_observe._types import CascadeResult, Judge, Reference

__all__ = ["Cascade", "Gate", "llm_drawn"]

_SALT = b"cp-observe/cascade/llm_share"
_SCALE = float(1 << 64)


class Gate(Protocol):
    """What the judge stages ask of the gates (``_gates.Gates``, a stage before them): may a call go; how it went."""

    def refusal(self) -> str | None: ...

    def judged(self, cost_usd: float | None) -> None: ...

    def failed(self) -> None: ...

    def spend(self, cost_usd: float | None) -> None: ...


def llm_drawn(trace_id: int, span_id: int, share: float) -> bool:
    """Whether the LLM judges this retrieval: a uniform draw of probability ``share`` from its ids."""
    if share >= 1.0:
        return True
    if share <= 0.0:
        return False
    import hashlib  # on first use, on the evaluator thread (see _judging/_calibration.py)

    digest = hashlib.blake2b(trace_id.to_bytes(16, "big") + span_id.to_bytes(8, "big"), digest_size=8,
                             key=_SALT).digest()
    return int.from_bytes(digest, "big") / _SCALE < share


@dataclass(frozen=True, slots=True)
class Cascade:
    """A cheap judge on every retrieval and the LLM judge on a uniform ``llm_share`` of them."""

    cheap: Judge
    llm_share: float

    async def judge(
        self,
        llm: Judge,
        *,
        trace_id: int,
        span_id: int,
        gates: Gate,
        failure_reason: Callable[[BaseException], str],
        query: str,
        reference_text: str,
        reference: Reference,
        contexts: Sequence[str],
    ) -> CascadeResult:
        """Judge with the cheap judge, then (drawn, and let through by the gates) with the LLM.

        Raises:
            JudgeError: the cheap judge failed (the evaluation fails; the circuit is the LLM's and is not told).
        """
        started = time.perf_counter()
        cheap = await evaluate(self.cheap, query=query, reference_text=reference_text, reference=reference,
                               contexts=contexts)
        cheap_seconds = time.perf_counter() - started
        gates.spend(cheap.cost_usd)  # an LLM as the cheap judge is billed too (the lexical one costs 0)
        if not llm_drawn(trace_id, span_id, self.llm_share):
            return CascadeResult(cheap, None, n.CASCADE_LLM_NOT_DRAWN, cheap_seconds, 0.0)
        refused = gates.refusal()
        if refused is not None:
            return CascadeResult(cheap, None, refused, cheap_seconds, 0.0)
        started = time.perf_counter()
        try:
            result = await evaluate(llm, query=query, reference_text=reference_text, reference=reference,
                                    contexts=contexts)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the LLM failing loses one subsample point, never the evaluation
            gates.failed()
            billed = billed_usd(exc)
            gates.spend(billed)
            return CascadeResult(cheap, None, f"{n.OUTCOME_FAILED}:{failure_reason(exc)}", cheap_seconds,
                                 time.perf_counter() - started, llm_failed_cost_usd=billed)
        gates.judged(result.cost_usd)
        return CascadeResult(cheap, result, n.CASCADE_LLM_JUDGED, cheap_seconds, time.perf_counter() - started)
