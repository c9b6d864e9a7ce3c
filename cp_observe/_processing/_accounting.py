"""The last stage of the path: every sampled target ends in exactly one outcome, counted once, by reason.

``Finish`` is the one place a target ends, whatever its outcome (scored, failed, dropped, skipped, or folded
into another span): its labels, its count in ``Accounting``, its outcome metric when the emitter did not count
it, its outcome string, and its release (the held span exported, ``serve``'s store told).

Updated from the evaluator thread (and ``shutdown``) under a lock, and from any thread by a refused ``submit``
through a ``Tally``: a refusal is reachable from a finalizer (a collected generator's span ends inside
whatever the collector interrupted), so it never waits on a lock. Read by ``stats()``. Once nothing is
pending, ``sampled == scored + failed + dropped + skipped``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from cp_observe import _names as n
from cp_observe._emission._emit import Emitter, Target
from cp_observe._log import logger
from cp_observe._processing._record import Record
from cp_observe._tally import Tally
from cp_observe._types import ScoreResult

__all__ = ["Accounting", "Finish", "Finished", "target_of"]

_OUTCOMES = (n.OUTCOME_SCORED, n.OUTCOME_FAILED, n.OUTCOME_DROPPED, n.OUTCOME_SKIPPED)

#: Told of every finished target on the evaluator thread: its record, its outcome string ("scored", "failed",
#: "dropped:<reason>", "skipped:<reason>", or "" when folded into another span) and its result, if scored.
Finished = Callable[[Record, str, ScoreResult | None], None]


class Accounting:
    """Counts of targets by outcome and reason: ``refused`` from any thread, the rest from the evaluator's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _sampled and _reasons; never taken on a path a finalizer can reach
        self._sampled = 0
        self._reasons: Counter[tuple[str, str]] = Counter()  # (outcome, reason) -> targets
        self._refused: Tally[str] = Tally()  # reasons of targets refused at submit: sampled and dropped at once

    def refused(self, reason: str) -> None:
        """Count a target refused before it entered (sampled and dropped in one step); never waits."""
        self._refused.add(reason)

    def sampled(self) -> None:
        """Count one target that entered the evaluator."""
        with self._lock:
            self._sampled += 1

    def outcome(self, outcome: str, reason: str, *, sampled: bool = False) -> None:
        """Count one target's outcome (and, for a target refused before it entered, its sampling).

        Only the evaluator thread and ``shutdown`` call this: a refusal on a host thread goes to ``refused``.
        """
        with self._lock:
            self._sampled += sampled
            self._reasons[(outcome, reason)] += 1

    def snapshot(self, pending: Callable[[], int]) -> dict[str, Any]:
        """The counts now (``sampled``, each outcome, ``reasons``) and ``pending()`` in flight.

        ``pending()`` is read under the same lock, so no outcome lands between.
        """
        with self._lock:
            sampled, reasons = self._sampled, Counter(self._reasons)
            for reason, count in self._refused.counts().items():  # each refusal in one entry: never half seen
                sampled += count
                reasons[(n.OUTCOME_DROPPED, reason)] += count
            totals: Counter[str] = Counter()
            for (outcome, _), count in reasons.items():
                totals[outcome] += count
            return {"sampled": sampled, **{o: totals[o] for o in _OUTCOMES}, "pending": pending(),
                    "reasons": {f"{o}:{r}": c for (o, r), c in sorted(reasons.items())}}


def target_of(record: Record) -> Target:
    """The emitter's view of a record: the span scored and the labels its evaluation carries."""
    return Target(
        span_context=record.span_context,
        data_source=record.name,
        agent_name=record.agent_name if record.kind == "retriever" else record.name,
        reference=record.reference,
        sampling_reason=record.sampling_reason,
        attributes=record.attributes,
        segments=record.segments,
        stage=record.stage,
        top_k=record.top_k,
        reranker_model=record.reranker_model,
    )


class Finish:
    """Counts and releases targets: ``sampled`` when one enters, ``__call__`` when one ends (evaluator thread)."""

    def __init__(self, accounting: Accounting, emitter: Emitter, on_finished: Finished | None = None) -> None:
        self.accounting = accounting
        self.emitter = emitter
        self.on_finished = on_finished

    def sampled(self, record: Record) -> None:
        """Count one target that entered assembly as a retrieval of its own."""
        self.accounting.sampled()
        self.emitter.count_sampled(Emitter.base_labels(target_of(record)))

    def __call__(self, record: Record, kind: str, reason: str = "", result: ScoreResult | None = None, *,
                 emitted: bool = False, sampled: bool = False, refused: bool = False) -> None:
        """End ``record`` in ``kind`` (an outcome, or "" for a span folded into another) for ``reason``.

        ``emitted``: the emitter already counted its outcome (a scored or failed evaluation it emitted).
        ``sampled``: it never entered, so it is counted sampled here too. ``refused``: refused at the queue, so
        ``Accounting`` counted it then; only its metrics are left.
        """
        outcome = kind if kind in ("", n.OUTCOME_SCORED, n.OUTCOME_FAILED) else f"{kind}:{reason}"
        if kind:
            if not refused:
                self.accounting.outcome(kind, reason, sampled=sampled)
            try:
                target = target_of(record)
                if sampled or refused:
                    self.emitter.count_sampled(Emitter.base_labels(target))  # the sampled counter: no segments
                if not emitted:
                    self.emitter.count(kind, reason, Emitter.labels(target))
            except Exception as exc:  # noqa: BLE001 - a failing meter must not stop the evaluator
                logger.warning("counting an outcome failed", error_type=type(exc).__name__)
        if self.on_finished is not None and record.target:
            try:
                self.on_finished(record, outcome, result)
            except Exception as exc:  # noqa: BLE001 - a failing export must not stop the accounting
                logger.warning("releasing a held span failed", error_type=type(exc).__name__)
