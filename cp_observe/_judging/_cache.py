"""A bounded, thread-safe LRU cache of verdicts, keyed by a digest so it holds no captured text in its keys."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

from cp_observe._fork import at_fork_method

__all__ = ["LRUCache"]

V = TypeVar("V")


class LRUCache(Generic[V]):
    """At most ``max_entries`` values; the least recently used is evicted first and counted.

    Attributes:
        hits: lookups that found a value.
        misses: lookups that did not.
        evictions: values dropped to stay within the bound.
    """

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        self._max = max_entries
        self._data: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()  # guards _data and the counters
        at_fork_method(self._after_fork)
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def _after_fork(self) -> None:
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: str) -> V | None:
        """Return the cached value or ``None``, marking it recently used."""
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: str, value: V) -> None:
        """Store ``value``, evicting the least recently used entries beyond the bound."""
        if self._max == 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._max:
                self._data.popitem(last=False)
                self.evictions += 1

    def clear(self) -> None:
        """Drop every entry (the counters stay)."""
        with self._lock:
            self._data.clear()
