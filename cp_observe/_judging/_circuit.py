"""A circuit breaker: stop calling a judge that keeps failing, probe it again after a cool-down.

closed --(N consecutive failures)--> open --(cool-down elapsed)--> half-open (one probe)
half-open --probe succeeds--> closed;  half-open --probe fails--> open again
Used from the evaluator thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["CircuitBreaker"]


class CircuitBreaker:
    """Counts consecutive judge failures; ``allow()`` says whether to call the judge now."""

    def __init__(self, failures: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.failures_to_open = failures
        self.cooldown_s = cooldown_s
        self._clock = clock
        self.consecutive_failures = 0
        self.opened_at: float | None = None
        self._probing = False
        self.times_opened = 0

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half_open``."""
        if self.opened_at is None:
            return "closed"
        return "half_open" if self._probing or self._clock() - self.opened_at >= self.cooldown_s else "open"

    def allow(self) -> bool:
        """True if a judge call may go out now (in half-open state, only the single probe)."""
        if self.opened_at is None:
            return True
        if self._probing:
            return False
        if self._clock() - self.opened_at >= self.cooldown_s:
            self._probing = True
            return True
        return False

    def success(self) -> None:
        """A judge call succeeded: close the circuit."""
        self.consecutive_failures = 0
        self.opened_at = None
        self._probing = False

    def failure(self) -> None:
        """A judge call failed: open the circuit after enough of them (or when the probe fails)."""
        self.consecutive_failures += 1
        if self._probing or self.consecutive_failures >= self.failures_to_open:
            if self.opened_at is None or self._probing:
                self.times_opened += 1
            self.opened_at = self._clock()
            self._probing = False
