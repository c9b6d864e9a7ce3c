"""Opt-in enrichment: hold sampled target spans back from export until judged, then add the score to them.

The processor then wraps the export processor: every span reaches it through us. A sampled target span
waits here (bounded in count and time) for its evaluation; when the evaluation ends it is released with
``context_precision.score`` and friends added, and when its time is up or the store is full it is
released as it is. Spans are never lost: shutdown and flush release everything that is held.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from cp_observe import _names as n
from cp_observe._types import ScoreResult

__all__ = ["HeldSpans"]


class HeldSpans:
    """Spans waiting for their score, in arrival order (so expiry looks only at the front)."""

    def __init__(self, downstream: SpanProcessor, *, timeout_s: float, max_spans: int, threshold: float) -> None:
        self.downstream = downstream
        self.timeout_s = timeout_s
        self.max_spans = max_spans
        self.threshold = threshold
        self._held: OrderedDict[tuple[int, int], tuple[float, ReadableSpan]] = OrderedDict()
        self._lock = threading.Lock()  # guards _held and the counters
        self.enriched = 0
        self.expired = 0
        self.overflowed = 0

    def hold(self, span: ReadableSpan) -> bool:
        """Keep ``span`` until its evaluation ends; False (caller exports it now) when the store is full."""
        context = span.context
        if context is None:
            return False
        with self._lock:
            if len(self._held) >= self.max_spans:
                self.overflowed += 1
                return False
            self._held[(context.trace_id, context.span_id)] = (time.monotonic() + self.timeout_s, span)
        return True

    def release(self, key: tuple[int, int], result: ScoreResult | None) -> None:
        """Export the held span, with the score added when there is one."""
        with self._lock:
            entry = self._held.pop(key, None)
            if entry is not None and result is not None:
                self.enriched += 1
        if entry is None:
            return
        span = entry[1]
        self.downstream.on_end(_enriched(span, result, self.threshold) if result is not None else span)

    def expire(self, now: float | None = None) -> None:
        """Export unenriched every span whose hold time is up."""
        now = time.monotonic() if now is None else now
        out: list[ReadableSpan] = []
        with self._lock:
            while self._held:
                key, (deadline, span) = next(iter(self._held.items()))
                if deadline > now:
                    break
                del self._held[key]
                self.expired += 1
                out.append(span)
        for span in out:
            self.downstream.on_end(span)

    def release_all(self) -> None:
        """Export everything still held, unenriched (flush and shutdown)."""
        with self._lock:
            spans = [span for _, span in self._held.values()]
            self._held.clear()
        for span in spans:
            self.downstream.on_end(span)

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
