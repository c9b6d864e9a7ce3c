"""``Tally``: counts by key that any thread may add to, from anywhere, without ever waiting on a lock.

The garbage collector runs finalizers in whatever thread allocates, at whatever line it is on: a collected
generator's span ends there (and so ``on_end`` runs), a dropped processor's ``weakref.finalize`` runs there.
If that line is inside a locked block and the finalizer path waits on the same lock, the thread deadlocks
itself. So the paths a finalizer can reach count through this class: ``add`` appends to a deque (atomic under
the GIL, reentrant) and then only *tries* the lock to fold what is pending into the counts. If the lock is
busy (another thread folding, or this very thread, re-entered by a collection inside the fold), the entry
waits in the deque for the next fold, which the lock's holder runs before it lets go. Readers (``counts``,
``drain``) never run on a finalizer path, so they may wait for the lock.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["Tally"]

K = TypeVar("K", bound=Hashable)


class Tally(Generic[K]):
    """Counts by key; ``add`` never waits (safe in finalizers, weakref callbacks and GC callbacks).

    The pending deque is bounded by the threads adding at once: every ``add`` whose try succeeds folds
    everything pending, and the lock's holder folds again after its own last entry.
    """

    __slots__ = ("_counts", "_lock", "_pending")

    def __init__(self) -> None:
        self._pending: deque[K] = deque()
        self._counts: Counter[K] = Counter()
        self._lock = threading.Lock()  # guards _counts; add() only ever tries it

    def add(self, key: K) -> None:
        """Count one ``key``. Never waits, never raises (beyond ``MemoryError``)."""
        self._pending.append(key)
        while self._pending and self._lock.acquire(blocking=False):
            try:
                self._fold()
            finally:
                self._lock.release()
            # An entry added between the fold's last look and the release was left to us: look again.

    def _fold(self) -> None:
        """Move what is pending into the counts (the caller holds the lock)."""
        pending, counts = self._pending, self._counts
        while pending:
            counts[pending.popleft()] += 1

    def counts(self) -> dict[K, int]:
        """All counts so far (waits for the lock: never call it from a finalizer path)."""
        with self._lock:
            self._fold()
            return dict(self._counts)

    def drain(self) -> dict[K, int]:
        """The counts since the last ``drain``, and start again from zero (waits for the lock, as ``counts``)."""
        with self._lock:
            self._fold()
            counts, self._counts = self._counts, Counter()
            return dict(counts)

    def total(self) -> int:
        """The sum of all counts (waits for the lock, as ``counts``)."""
        return sum(self.counts().values())

    def __bool__(self) -> bool:
        """True when anything is counted or pending (no lock: a hint for a caller deciding whether to drain)."""
        return bool(self._pending) or bool(self._counts)

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (one held by another thread at fork time would never be released)."""
        self._lock = threading.Lock()
