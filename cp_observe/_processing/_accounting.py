"""The evaluator's accounting: every sampled target ends in exactly one outcome, counted once, by reason.

Updated from the evaluator thread (and ``shutdown``) under a lock, and from any thread by a refused ``submit``
through a ``Tally``: a refusal is reachable from a finalizer (a collected generator's span ends inside
whatever the collector interrupted), so it never waits on a lock. Read by ``stats()``. Once nothing is
pending, ``sampled == scored + failed + dropped + skipped``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cp_observe import _names as n
from cp_observe._tally import Tally

__all__ = ["Accounting", "Stats"]


@dataclass(slots=True)
class Stats:
    """Counts of evaluation targets. ``reasons`` counts ``(outcome, reason)`` pairs."""

    sampled: int = 0
    scored: int = 0
    failed: int = 0
    dropped: int = 0
    skipped: int = 0
    reasons: Counter[tuple[str, str]] = field(default_factory=Counter)

    def as_dict(self, pending: int) -> dict[str, Any]:
        """A snapshot, with the targets still in flight as ``pending``."""
        return {
            "sampled": self.sampled,
            "scored": self.scored,
            "failed": self.failed,
            "dropped": self.dropped,
            "skipped": self.skipped,
            "pending": pending,
            "reasons": {f"{o}:{r}": c for (o, r), c in sorted(self.reasons.items())},
        }


class Accounting:
    """Counts of targets by outcome and reason: ``refused`` from any thread, the rest from the evaluator's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _stats; never taken on a path a finalizer can reach
        self._stats = Stats()
        self._refused: Tally[str] = Tally()  # reasons of targets refused at submit: sampled and dropped at once

    def refused(self, reason: str) -> None:
        """Count a target refused before it entered (sampled and dropped in one step); never waits."""
        self._refused.add(reason)

    def sampled(self) -> None:
        """Count one target that entered the evaluator."""
        with self._lock:
            self._stats.sampled += 1

    def outcome(self, outcome: str, reason: str, *, sampled: bool = False) -> None:
        """Count one target's outcome (and, for a target refused before it entered, its sampling).

        Only the evaluator thread and ``shutdown`` call this: a refusal on a host thread goes to ``refused``.
        """
        with self._lock:
            stats = self._stats
            if sampled:
                stats.sampled += 1
            if outcome == n.OUTCOME_SCORED:
                stats.scored += 1
            elif outcome == n.OUTCOME_FAILED:
                stats.failed += 1
            elif outcome == n.OUTCOME_DROPPED:
                stats.dropped += 1
            else:
                stats.skipped += 1
            stats.reasons[(outcome, reason)] += 1

    def snapshot(self, pending: Callable[[], int]) -> dict[str, Any]:
        """The counts now, with ``pending()`` (read under the same lock, so no outcome lands between) in flight."""
        with self._lock:
            stats = self._stats
            merged = Stats(stats.sampled, stats.scored, stats.failed, stats.dropped, stats.skipped,
                           Counter(stats.reasons))
            for reason, count in self._refused.counts().items():  # each refusal in one entry: never half seen
                merged.sampled += count
                merged.dropped += count
                merged.reasons[(n.OUTCOME_DROPPED, reason)] += count
            return merged.as_dict(pending())
