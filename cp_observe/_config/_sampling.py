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
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from cp_observe._names import GEN_AI_DATA_SOURCE_ID as DATA_SOURCE_ID

__all__ = ["ForcedTraces", "SourceRates", "TraceIdRatio", "force_evaluation", "sample_key", "sampling_reason"]

_RANDOM_BITS = 56
_MASK = (1 << _RANDOM_BITS) - 1
_FORCE_KEY = otel_context.create_key("cp_observe.force_evaluation")


class TraceIdRatio:
    """Samples ``rate`` of traces by their trace id's low 56 bits.

    ``key`` names the data source a span retrieves from (its ``gen_ai.data_source.id`` at span start) and is
    ignored here: one flat rate for all. ``SourceRates`` gives each key its own rate.
    """

    __slots__ = ("_bound", "rate")

    def __init__(self, rate: float) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"sample_rate must be within [0, 1], got {rate!r}")
        self.rate = float(rate)
        self._bound = round(rate * (1 << _RANDOM_BITS))

    def __call__(self, trace_id: int, key: str | None = None) -> bool:  # the flat rate ignores key
        """True when this trace is in the sampled share."""
        return (trace_id & _MASK) < self._bound


class SourceRates(TraceIdRatio):
    """A rate per data source (the sampling key), each a trace-id ratio, replaced wholesale at window boundaries.

    The key at span start is the data source the span names then: a decorated retriever's name, a foreign
    retrieval's ``gen_ai.data_source.id``. A ``data_source`` callable's answer is known only on the evaluator
    thread, so it never keys the sampler: when it names the retrieval otherwise, the retrieval is still sampled
    at the rate of the key it started with, and counted under that key's traffic.

    A span with no key (an agent, a root: the data sources its retrievals will use are not known when it
    starts) and a key not yet seen are sampled at ``rate``, the highest rate in force. Decisions nest (the same
    low bits against a higher bound), so every trace one of its retrievals samples also has its agent's answer
    captured. The read is one dict lookup; ``install`` swaps the dict, so a reader never sees half an update
    and nothing waits (a finalizer may start a span).
    """

    __slots__ = ("_bounds", "rates")

    def __init__(self, rate: float) -> None:
        super().__init__(rate)
        self.rates: dict[str, float] = {}
        self._bounds: dict[str | None, int] = {}

    def __call__(self, trace_id: int, key: str | None = None) -> bool:
        """True when this trace is in the share sampled for data source ``key``."""
        return (trace_id & _MASK) < self._bounds.get(key, self._bound)

    def install(self, rates: dict[str, float], default: float) -> None:
        """Put ``rates`` (data source -> rate) in force; other keys and spans with none get at least ``default``."""
        for key, rate in rates.items():
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"rate of {key!r} must be within [0, 1], got {rate!r}")
        top = max([default, *rates.values()])
        bounds: dict[str | None, int] = {key: round(rate * (1 << _RANDOM_BITS)) for key, rate in rates.items()}
        self._bound = round(top * (1 << _RANDOM_BITS))  # read first by a racing reader: never below a key's bound
        self._bounds = bounds
        self.rates = dict(rates)
        self.rate = top

    def rate_of(self, key: str | None) -> float:
        """The rate in force for ``key`` (the highest for a key with no rate of its own)."""
        return self.rates.get(key, self.rate) if key is not None else self.rate


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


def sampling_reason(trace_id: int, sampler: Callable[[int, str | None], bool], key: str | None = None) -> str | None:
    """Why an ended span's trace is scored: ``"forced"``, ``"ratio"`` (the sampler chose it), or None (it is not).

    ``key`` is the span's sampling key (``sample_key``). The one rule for both paths: the in-process processor
    (``on_end``) and ``serve``'s admission, which must count exactly the items ``on_end`` will queue.
    """
    if trace_id in FORCED._ids:
        return "forced"
    return "ratio" if sampler(trace_id, key) else None


def sample_key(attributes: Mapping[str, Any] | None, retrieval: bool) -> str | None:
    """The sampling key of an ended span: a retrieval's ``gen_ai.data_source.id`` (what the decorator set at start).

    None for every other span and for a retrieval that names no data source: the highest rate in force.
    """
    if not retrieval or not attributes:
        return None
    value = attributes.get(DATA_SOURCE_ID)
    return value if type(value) is str else None


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
