"""The bounded store of judge payloads: the hand-off from the decorators to the processor.

A sampled call's query, contexts and answer are kept in memory for the in-process judge, keyed by (trace id,
span id), until the processor takes them when the span ends. This is how scoring works with content capture
off: the content never touches a span. The store is bounded; when full, the oldest entry is evicted and counted
(its span is then scored from its attributes, or skipped).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from cp_observe._fork import at_fork
from cp_observe._log import logger

__all__ = ["PAYLOADS", "Payload", "PayloadStore"]


@dataclass(slots=True)
class Payload:
    """What the judge needs from one call, kept in memory (never exported when capture is off)."""

    query: str
    contexts: list[str] | None = None
    answer: str | None = None
    before: list[str] | None = None  # a reranker's input documents, in their order


class PayloadStore:
    """At most ``max_entries`` payloads by (trace id, span id); the oldest is evicted first and counted."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self._data: dict[tuple[int, int], Payload] = {}
        self._max = max_entries
        self._lock = threading.Lock()  # serialises eviction and guards evicted; only ever tried, never waited on
        self.evicted = 0

    def put(self, key: tuple[int, int], payload: Payload) -> None:
        """Keep ``payload`` until ``take(key)``.

        A single dict store is atomic under the GIL, so the request path takes no lock; only eviction, rare,
        does (it iterates the dict), and it only tries the lock: ``put`` runs when a span's call ends, which
        may be inside the garbage collector, inside this very eviction. Whoever holds the lock evicts down to
        the bound, so the store exceeds it by at most the threads storing at once.
        """
        self._data[key] = payload
        if len(self._data) > self._max:
            self._evict()

    def _evict(self) -> None:
        if not self._lock.acquire(blocking=False):
            return  # another eviction is under way (on another thread, or interrupted on this one)
        before = self.evicted
        try:
            data = self._data
            while len(data) > self._max:
                try:
                    del data[next(iter(data))]
                except (KeyError, RuntimeError, StopIteration):  # taken or changed meanwhile: look again
                    continue
                self.evicted += 1
            after = self.evicted
        finally:
            self._lock.release()
        for milestone in (1, 100, 10_000):
            if before < milestone <= after:
                logger.warning("payload store full; oldest payloads evicted", evicted=after)
                break

    def take(self, key: tuple[int, int]) -> Payload | None:
        """Remove and return the payload, or ``None`` (``dict.pop`` is atomic: no lock)."""
        return self._data.pop(key, None)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        """Forget everything."""
        self._data.clear()

    def after_fork(self) -> None:
        """In a forked child: a fresh lock and no payloads (the parent's calls are not the child's)."""
        self._lock = threading.Lock()
        self._data = {}


PAYLOADS = PayloadStore()
at_fork(PAYLOADS.after_fork)  # a lock held by another thread at fork time would stay locked in the child
