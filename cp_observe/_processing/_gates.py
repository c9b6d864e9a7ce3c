"""The gates between a ready evaluation and the judge: the circuit breaker, the rate cap, the daily budget.

All three live here, with the one function that asks them in order (``refusal``). The circuit is asked last,
because in its half-open state a pass takes the single probe, and a skip after taking it would keep the probe
forever. The trace-id sampler and forced traces are not gates of this kind: the decorators read them at span
start, so they stay in ``_config/_sampling.py``.

The circuit breaker::

    closed --(N consecutive failures)--> open --(cool-down elapsed)--> half-open (one probe)
    half-open --probe succeeds--> closed;  half-open --probe fails--> open again

Used from the evaluator thread only (the rate cap's and the budget's locks guard readers such as a test's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cp_observe._config._settings import Settings

__all__ = ["CircuitBreaker", "DailyBudget", "Gates", "RateLimiter", "refusal"]


class Gates:
    """One processor's three gates, asked in the one order ``refusal`` keeps.

    Built from the processor's options: ``max_evaluations_per_minute``, ``daily_budget_usd``,
    ``circuit_failures`` and ``circuit_cooldown_s``.
    """

    __slots__ = ("budget", "circuit", "rate")

    def __init__(self, options: Settings) -> None:
        self.rate = RateLimiter(options.max_evaluations_per_minute)
        self.budget = DailyBudget(options.daily_budget_usd)
        self.circuit = CircuitBreaker(options.circuit_failures, options.circuit_cooldown_s)

    def refusal(self) -> str | None:
        """Why the next judge call may not go out (the ``skipped`` reason), or None when it may."""
        return refusal(self.circuit, self.rate, self.budget)

    def judged(self, cost_usd: float | None) -> None:
        """A judge call succeeded: close the circuit and spend its cost."""
        self.circuit.success()
        self.budget.spend(cost_usd)

    def spend(self, cost_usd: float | None) -> None:
        """Count a billed call that no gate let through as a judgement: a cheap LLM judge's, a failed one's."""
        self.budget.spend(cost_usd)

    def failed(self) -> None:
        """A judge call failed: it counts against the circuit."""
        self.circuit.failure()


def refusal(circuit: CircuitBreaker, rate: RateLimiter, budget: DailyBudget) -> str | None:
    """Why the next evaluation may not call the judge (the ``skipped`` reason), or None when it may."""
    if circuit.state == "open":
        return "circuit_open"
    if not rate.allow():
        return "rate_limited"
    if not budget.allow():
        return "budget_exhausted"
    if not circuit.allow():
        return "circuit_open"
    return None


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
