"""Opt-in enrichment: hold sampled target spans back from export until judged, then add the score to them.

The processor then wraps the export processor: every span reaches it through us. A sampled target span
waits here (bounded in count and time) for its evaluation; when the evaluation ends it is released with
``context_precision.score`` and friends added, and when its time is up or the store is full it is
released as it is. Spans are never lost: shutdown and flush release everything that is held.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from cp_observe import _names as n
from cp_observe._config._settings import Settings
from cp_observe._tally import Tally
from cp_observe._types import ScoreResult

__all__ = ["HeldSpans"]


class HeldSpans:
    """Spans waiting for their score, in arrival order (so expiry looks only at the front).

    No lock: ``hold`` runs in ``on_end``, which the garbage collector can run inside any line of ours, on any
    thread (a collected generator's span ends there), including inside ``release`` or ``expire`` on the
    evaluator thread. Each step is one operation of the ordered dict, atomic under the GIL: ``hold`` inserts
    and takes its own entry back when over the bound, ``release`` and ``expire`` pop, and a pop that finds
    nothing means another thread exported that span already. Each span is exported exactly once.
    """

    def __init__(self, downstream: SpanProcessor, *, options: Settings) -> None:
        self.downstream = downstream
        self.timeout_s = options.hold_timeout_s
        self.max_spans = options.max_held_spans
        self.threshold = options.threshold
        self._held: OrderedDict[tuple[int, int], tuple[float, ReadableSpan]] = OrderedDict()
        self._counts: Tally[str] = Tally()  # enriched, expired, overflowed

    def hold(self, span: ReadableSpan) -> bool:
        """Keep ``span`` until its evaluation ends; False (caller exports it now) when the store is full."""
        context = span.context
        if context is None:
            return False
        key = (context.trace_id, context.span_id)
        held = self._held
        held[key] = (time.monotonic() + self.timeout_s, span)  # insert, then check: the bound is never exceeded
        if len(held) > self.max_spans:
            if held.pop(key, None) is None:
                return True  # released meanwhile (its evaluation ended already): it was exported
            self._counts.add("overflowed")
            return False
        return True

    def release(self, key: tuple[int, int], result: ScoreResult | None) -> None:
        """Export the held span, with the score added when there is one."""
        entry = self._held.pop(key, None)
        if entry is None:
            return
        span = entry[1]
        if result is not None:
            self._counts.add("enriched")
            span = _enriched(span, result, self.threshold)
        self.downstream.on_end(span)

    def expire(self, now: float | None = None) -> None:
        """Export unenriched every span whose hold time is up."""
        now = time.monotonic() if now is None else now
        held = self._held
        while held:
            try:
                key, (deadline, _) = next(iter(held.items()))
            except (StopIteration, RuntimeError):  # emptied or changed under us: look again
                continue
            if deadline > now:
                break
            entry = held.pop(key, None)
            if entry is not None:
                self._counts.add("expired")
                self.downstream.on_end(entry[1])

    def release_all(self) -> None:
        """Export everything still held, unenriched (flush and shutdown)."""
        held = self._held
        while True:
            try:
                _, (_, span) = held.popitem(last=False)
            except KeyError:
                return
            self.downstream.on_end(span)

    def counts(self) -> dict[str, int]:
        """Spans released with their score, after their hold time, or at once because the store was full."""
        return {"enriched": 0, "expired": 0, "overflowed": 0, **self._counts.counts()}

    def after_fork(self) -> None:
        """In a forked child: a fresh lock for the counts (one held at fork time would never be released)."""
        self._counts.after_fork()

    def __len__(self) -> int:
        return len(self._held)


def _enriched(span: ReadableSpan, result: ScoreResult, threshold: float) -> ReadableSpan:
    attributes: dict[str, Any] = dict(span.attributes or {})
    attributes.update(score_attributes(result, threshold))
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def score_attributes(result: ScoreResult, threshold: float) -> Mapping[str, Any]:
    """The attributes written onto a scored span in hold mode."""
    return {
        n.CP_SCORE: result.score,
        n.CP_AVERAGE_PRECISION: result.average_precision,
        n.CP_VERDICTS: [v.relevant for v in result.verdicts],
        n.GEN_AI_EVALUATION_SCORE_LABEL: n.LABEL_PASS if result.score >= threshold else n.LABEL_FAIL,
        n.CP_JUDGE_MODEL: result.judge_model,
    }
