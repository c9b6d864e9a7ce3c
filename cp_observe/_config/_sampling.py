"""Which calls get scored: a trace-id hash ratio, forced traces, a rate cap and a daily cost budget.

The ratio decision uses the low 56 bits of the trace id, the randomness that W3C Trace Context level 2
guarantees. Every process and every span of a trace therefore agrees, and a lower rate selects a subset
of a higher rate's traces (decisions nest), unlike ``random()`` sampling.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import datetime, timezone

from opentelemetry import context as otel_context
from opentelemetry import trace

__all__ = ["DailyBudget", "ForcedTraces", "RateLimiter", "TraceIdRatio", "force_evaluation", "sampling_reason"]

_RANDOM_BITS = 56
_MASK = (1 << _RANDOM_BITS) - 1
_FORCE_KEY = otel_context.create_key("cp_observe.force_evaluation")


class TraceIdRatio:
    """Samples ``rate`` of traces by their trace id's low 56 bits."""

    __slots__ = ("_bound", "rate")

    def __init__(self, rate: float) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"sample_rate must be within [0, 1], got {rate!r}")
        self.rate = float(rate)
        self._bound = round(rate * (1 << _RANDOM_BITS))

    def __call__(self, trace_id: int) -> bool:
        """True when this trace is in the sampled share."""
        return (trace_id & _MASK) < self._bound


class ForcedTraces:
    """Trace ids whose retrievals must be scored whatever the ratio says (bounded, oldest forgotten first).

    No lock: ``add`` runs when a decorated call starts, and a call can start inside a finalizer (user code in a
    ``__del__`` or a collected generator's ``finally``) that the collector ran inside ``add`` itself. Each step
    is one operation of the ordered dict, atomic under the GIL; racing adds may forget one id too many.
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        self._ids: OrderedDict[int, None] = OrderedDict()
        self._max = max_entries

    def add(self, trace_id: int) -> None:
        """Force scoring of every target span of ``trace_id``."""
        ids = self._ids
        ids[trace_id] = None
        ids.move_to_end(trace_id)
        while len(ids) > self._max:
            try:
                ids.popitem(last=False)
            except KeyError:  # emptied by a racing add
                return

    def __contains__(self, trace_id: object) -> bool:
        return trace_id in self._ids

    def clear(self) -> None:
        """Forget every forced trace (``cp_observe.testing.IsolatedRuntime`` does, when it closes)."""
        self._ids.clear()


#: Process-wide forced traces; ``force_evaluation()`` adds to it, every processor reads it.
FORCED = ForcedTraces()


def is_forced(parent: otel_context.Context | None, trace_id: int) -> bool:
    """True if the trace was forced or the span starts inside ``force_evaluation()``."""
    if trace_id in FORCED._ids:  # the dict itself: no Python-level __contains__ call on the request path
        return True
    return bool(otel_context.get_value(_FORCE_KEY, parent))


def sampling_reason(trace_id: int, sampler: Callable[[int], bool]) -> str | None:
    """Why an ended span's trace is scored: ``"forced"``, ``"ratio"`` (the sampler chose it), or None (it is not).

    The one rule for both paths: the in-process processor (``on_end``) and ``serve``'s admission, which must
    count exactly the items ``on_end`` will queue.
    """
    if trace_id in FORCED._ids:
        return "forced"
    return "ratio" if sampler(trace_id) else None


@contextlib.contextmanager
def force_evaluation() -> Iterator[None]:
    """Score the current trace (and spans started inside this block) regardless of the sample rate.

    Use it for a request you want to inspect, e.g. behind a debug header::

        with cp_observe.force_evaluation():
            answer = agent(question)
    """
    span_context = trace.get_current_span().get_span_context()
    if span_context.is_valid:
        FORCED.add(span_context.trace_id)
    token = otel_context.attach(otel_context.set_value(_FORCE_KEY, True))
    try:
        yield
    finally:
        otel_context.detach(token)


class RateLimiter:
    """A token bucket allowing ``per_minute`` evaluations a minute, with a burst of the same size."""

    def __init__(self, per_minute: float | None, *, clock: object = time.monotonic) -> None:
        if per_minute is not None and per_minute <= 0:
            raise ValueError("max_evaluations_per_minute must be > 0 or None")
        self.per_minute = per_minute
        self._clock = clock
        self._tokens = float(per_minute or 0)
        self._last = self._now()
        self._lock = threading.Lock()  # guards _tokens and _last

    def _now(self) -> float:
        return float(self._clock())  # type: ignore[operator]

    def allow(self) -> bool:
        """Take one token if there is one."""
        if self.per_minute is None:
            return True
        with self._lock:
            now = self._now()
            self._tokens = min(self.per_minute, self._tokens + (now - self._last) * self.per_minute / 60.0)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False


class DailyBudget:
    """Stops scoring once the judge's known cost for the current UTC day reaches ``limit_usd``."""

    def __init__(self, limit_usd: float | None) -> None:
        if limit_usd is not None and limit_usd < 0:
            raise ValueError("daily_budget_usd must be >= 0 or None")
        self.limit_usd = limit_usd
        self._day = self._today()
        self.spent_usd = 0.0
        self._lock = threading.Lock()  # guards _day and spent_usd

    @staticmethod
    def _today() -> str:
        return datetime.now(timezone.utc).date().isoformat()

    def _roll(self) -> None:
        today = self._today()
        if today != self._day:
            self._day, self.spent_usd = today, 0.0

    def allow(self) -> bool:
        """True while today's spend is under the limit."""
        if self.limit_usd is None:
            return True
        with self._lock:
            self._roll()
            return self.spent_usd < self.limit_usd

    def spend(self, usd: float | None) -> None:
        """Add a judgement's cost (unknown costs add nothing)."""
        if usd is None:
            return
        with self._lock:
            self._roll()
            self.spent_usd += usd
