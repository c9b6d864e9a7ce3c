"""The emitter's counters as our own cumulative sums, exported by observable counters.

A synchronous ``Counter.add`` costs the OpenTelemetry SDK a ``Measurement`` whose attributes it cleans, then a
hash of them, at every call: about half of an evaluation's emission. Here an addition is a dict update keyed by
the attribute set (a ``frozenset`` of its items, built once per series by the emitter), and the metric reader's
collection reads a copy through the observable counters' callbacks. The SDK reports an observable counter's
cumulative value per attribute set, and computes deltas from it for a delta-temporality exporter, so what is
exported is what the synchronous counters exported: the same series, values (added in the same order), and types;
the one difference is that a delta exporter also gets a zero point for a set unchanged since its last export.
Counters keep no exemplars here (cp-observe puts exemplars only on the score histogram's buckets).

One store per meter: the SDK keeps the first callbacks registered under a name and ignores a second emitter's,
so every emitter on a meter adds into the same store (as they added into the same synchronous instrument). The
store's lock guards the totals against two evaluator threads (two processors on one meter) and a collection;
it is taken by the evaluator thread, ``flush``/``shutdown`` callers, ``serve``'s recovery and the reader's
collection, never on a path a finalizer can reach (``on_end`` defers its counts to the evaluator thread). Its
totals are bounded: past ``MAX_SERIES`` attribute sets per counter, a new set's additions go to the
``otel.metric.overflow=True`` set, as the SDK's cardinality limit does, so no count is lost. The bound is above
the SDK's default limit (2,000 per instrument and reader, since SDK 1.45.2), which therefore still decides
first, as it did for the synchronous counters; ours only bounds the memory (an older SDK has no limit). A forked
child starts its own sums (``_fork.py``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, NoOpMeter, Observation

from cp_observe import _names as n
from cp_observe._fork import at_fork

__all__ = ["MAX_SERIES", "Key", "Sums", "key", "sums_for"]

MAX_SERIES = 4096  # attribute sets kept per counter; more go to the overflow set (above the SDK's 2,000)
Key = frozenset[tuple[str, Any]]
_OVERFLOW: Key = frozenset({(n.OTEL_METRIC_OVERFLOW, True)})  # the SDK's own overflow set


def key(attributes: Mapping[str, str]) -> Key:
    """The store's key of an attribute set (order of the items does not matter, as for the SDK)."""
    return frozenset(attributes.items())


class Sums:
    """Cumulative sums per counter and attribute set of one meter, read by its observable counters."""

    def __init__(self, meter: Meter | None, counters: Iterable[tuple[str, str, str]]) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, dict[Key, float]] = {}
        self._on = meter is not None  # no meter: nobody reads the sums, so nothing is added
        for name, unit, description in counters:
            self._totals[name] = {}
            if meter is not None:
                meter.create_observable_counter(name, callbacks=[self._observer(name)], unit=unit,
                                                description=description)

    def add(self, changes: Iterable[tuple[str, Key, float]]) -> None:
        """Add each ``(counter name, key, value)``: one evaluation's additions under one lock."""
        if not self._on:
            return
        with self._lock:
            for name, series, value in changes:
                totals = self._totals[name]
                k = series if series in totals or len(totals) < MAX_SERIES else _OVERFLOW
                totals[k] = totals.get(k, 0) + value

    def snapshot(self, name: str) -> dict[Key, float]:
        """A copy of counter ``name``'s totals."""
        with self._lock:
            return dict(self._totals[name])

    def _observer(self, name: str) -> Any:
        def observe(_: CallbackOptions) -> list[Observation]:
            return [Observation(value, dict(k)) for k, value in self.snapshot(name).items()]

        return observe

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # the parent's may be held by a thread the child does not have
        for totals in self._totals.values():
            totals.clear()


_stores: weakref.WeakKeyDictionary[Any, Sums] = weakref.WeakKeyDictionary()
_stores_lock = threading.Lock()  # guards _stores (emitters are made on any thread)


def sums_for(meter: Meter, counters: Iterable[tuple[str, str, str]]) -> Sums:
    """The store of ``meter`` (made, with its observable counters, by the first emitter on it).

    An explicit no-op meter (the API's, or the SDK's when disabled) gets a store that adds nothing.
    """
    if isinstance(meter, NoOpMeter):
        return Sums(None, counters)
    with _stores_lock:
        found = _stores.get(meter)
        if found is None:
            found = _stores[meter] = Sums(meter, counters)
        return found


def _reset_in_child() -> None:
    global _stores_lock  # noqa: PLW0603 - a fresh lock in the child
    _stores_lock = threading.Lock()
    for store in list(_stores.values()):
        store._after_fork()  # this module's own class


at_fork(_reset_in_child)
