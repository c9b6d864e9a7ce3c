"""Which calls get scored: a trace-id hash ratio and forced traces.

The decorators read these at span start, so they sit below capture; the gates a ready evaluation passes
before the judge (rate cap, daily budget, circuit breaker) are in ``_processing/_gates.py``.

The ratio decision uses the low 56 bits of the trace id, the randomness that W3C Trace Context level 2
guarantees. Every process and every span of a trace therefore agrees, and a lower rate selects a subset
of a higher rate's traces (decisions nest), unlike ``random()`` sampling.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace

__all__ = ["ForcedTraces", "TraceIdRatio", "force_evaluation", "sampling_reason"]

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
