"""The gates between a ready evaluation and the judge: the circuit breaker, the rate cap, the budget's hard cap.

All three live here (the budget's pacing, which also refuses a call once a window's spend reaches its burst
allowance, is ``_pacer.py``), with the one function that asks them in order (``refusal``). The circuit is asked last,
because in its half-open state a pass takes the single probe, and a skip after taking it would keep the probe
forever. The trace-id sampler and forced traces are not gates of this kind: the decorators read them at span
start, so they stay in ``_config/_sampling.py``.

The circuit breaker::

    closed --(N consecutive failures)--> open --(cool-down elapsed)--> half-open (one probe)
    half-open --probe succeeds--> closed;  half-open --probe fails--> open again

Used from the evaluator thread only (the rate cap's and the budget's locks guard readers such as a test's).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from cp_observe import _names as n
from cp_observe._log import logger
from cp_observe._processing._pacer import Pacer

if TYPE_CHECKING:
    from cp_observe._config._settings import Settings
    from cp_observe._processing._rate_plan import RatePlan

_SAVE_EVERY_S = 10.0  # the budget's state file is rewritten at most this often by spend()

__all__ = ["CircuitBreaker", "DailyBudget", "Gates", "RateLimiter", "refusal"]


class Gates:
    """One processor's gates, asked in the one order ``refusal`` keeps, and the pacing that steers the sampler.

    Built from the processor's options: ``max_evaluations_per_minute``, the budget's (``daily_budget_usd`` shared
    by ``budget_replicas``, ``budget_period_s``, ``budget_state_path``; with ``budget_pacing``, the pacer's
    ``budget_burst`` and ``pacing_window_s``), ``circuit_failures`` and ``circuit_cooldown_s``. ``plan`` (the
    processor's ``RatePlan``, when it steers its sampler) is told each sampled retrieval and ticked by the
    evaluator thread.
    """

    __slots__ = ("budget", "circuit", "pacer", "plan", "rate")

    def __init__(self, options: Settings) -> None:
        self.rate = RateLimiter(options.max_evaluations_per_minute)
        limit = options.daily_budget_usd
        self.budget = DailyBudget(None if limit is None else limit / options.budget_replicas,
                                  period_s=options.budget_period_s, state_path=options.budget_state_path)
        self.pacer = (Pacer(self.budget, burst=options.budget_burst, window_s=options.pacing_window_s)
                      if limit is not None and options.budget_pacing else None)
        self.circuit = CircuitBreaker(options.circuit_failures, options.circuit_cooldown_s)
        self.plan: RatePlan | None = None

    def refusal(self) -> str | None:
        """Why the next judge call may not go out (the ``skipped`` reason), or None when it may."""
        return refusal(self.circuit, self.rate, self.budget, self.pacer)

    def judged(self, cost_usd: float | None) -> None:
        """A judge call succeeded: close the circuit and spend its cost."""
        self.circuit.success()
        self.budget.spend(cost_usd)
        if self.pacer is not None:
            self.pacer.spend(cost_usd)

    def spend(self, cost_usd: float | None) -> None:
        """Count a billed call that no gate let through as a judgement: a cheap LLM judge's, a failed one's.

        It is in the period's and the pacing window's spend, not in the pacer's mean cost per evaluation.
        """
        self.budget.spend(cost_usd)
        if self.pacer is not None and cost_usd:
            self.pacer.window_spent_usd += cost_usd

    def failed(self) -> None:
        """A judge call failed: it counts against the circuit."""
        self.circuit.failure()

    def saw(self, key: str | None, sampling_reason: str) -> None:
        """A sampled retrieval with sampling key ``key`` reached the evaluator (its traffic, for the plan)."""
        if self.plan is not None:
            self.plan.saw(key, sampling_reason)

    def tick(self) -> None:
        """On the evaluator thread, every tick: at a window boundary the pacer and the plan move on."""
        if self.plan is not None:
            self.plan.tick()
        elif self.pacer is not None:
            self.pacer.tick()


def refusal(circuit: CircuitBreaker, rate: RateLimiter, budget: DailyBudget, pacer: Pacer | None = None) -> str | None:
    """Why the next evaluation may not call the judge (the ``skipped`` reason), or None when it may."""
    if circuit.state == "open":
        return "circuit_open"
    if not rate.allow():
        return "rate_limited"
    if not budget.allow():
        return n.SKIP_BUDGET_EXHAUSTED
    if pacer is not None and not pacer.allow():
        return n.SKIP_BUDGET_PACED
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
    """The hard cap: refuses every judge call once the judge's known cost in the current period reaches the limit.

    The period is ``period_s`` long and aligned to UTC (86400: each UTC day, as ``daily_budget_usd`` always
    meant; 3600: each UTC hour). ``limit_usd`` is this process's share (``daily_budget_usd / budget_replicas``).
    The calls already in flight when the cap is reached still add their cost, so the overshoot is bounded by
    ``concurrency`` calls. With ``state_path`` the period's spend is kept in that file (written at most every
    ``_SAVE_EVERY_S`` and by ``save``) and read back at start, so a restarted process resumes it within its
    period; a file of an earlier period, or one that cannot be read, starts the period at zero (logged).
    """

    def __init__(self, limit_usd: float | None, *, period_s: float = 86400.0, state_path: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if limit_usd is not None and limit_usd < 0:
            raise ValueError("daily_budget_usd must be >= 0 or None")
        if period_s <= 0:
            raise ValueError("budget_period_s must be > 0")
        self.limit_usd = limit_usd
        self.period_s = float(period_s)
        self._clock = clock
        self._path = state_path
        self.period_start = self._start_of(clock())
        self.spent_usd = 0.0
        self._saved_at = -math.inf
        self._lock = threading.Lock()  # guards period_start and spent_usd
        if state_path is not None and limit_usd is not None:
            self._restore(state_path)

    def _start_of(self, now: float) -> float:
        return math.floor(now / self.period_s) * self.period_s

    def _roll(self, now: float) -> None:
        start = self._start_of(now)
        if start != self.period_start:
            self.period_start, self.spent_usd = start, 0.0

    @property
    def period_end(self) -> float:
        """When the current period ends (seconds since the epoch)."""
        return self.period_start + self.period_s

    def allow(self) -> bool:
        """True while the period's spend is under the limit."""
        if self.limit_usd is None:
            return True
        with self._lock:
            self._roll(self._clock())
            return self.spent_usd < self.limit_usd

    def spend(self, usd: float | None) -> None:
        """Add a judgement's cost (unknown costs add nothing)."""
        if usd is None:
            return
        with self._lock:
            now = self._clock()
            self._roll(now)
            self.spent_usd += usd
            due = self._path is not None and now - self._saved_at >= _SAVE_EVERY_S
        if due:
            self.save()

    def left_usd(self) -> float:
        """What is left of the current period's budget (infinite without one)."""
        if self.limit_usd is None:
            return math.inf
        with self._lock:
            self._roll(self._clock())
            return max(0.0, self.limit_usd - self.spent_usd)

    def save(self) -> None:
        """Write the period's spend to ``state_path`` (atomically: a new file renamed over the old one)."""
        if self._path is None:
            return
        with self._lock:
            state = {"period_start": self.period_start, "period_s": self.period_s, "spent_usd": self.spent_usd}
            self._saved_at = self._clock()
        try:
            folder = os.path.dirname(os.path.abspath(self._path))
            with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp", encoding="utf-8") as out:
                json.dump(state, out)
            os.replace(out.name, self._path)
        except OSError as exc:
            logger.warning("the budget's spend could not be saved", error_type=type(exc).__name__)

    def _restore(self, path: str) -> None:
        try:
            with open(path, encoding="utf-8") as file:
                state = json.load(file)
            same = state.get("period_start") == self.period_start and state.get("period_s") == self.period_s
            spent = float(state.get("spent_usd", 0.0))
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            logger.warning("the budget's saved spend could not be read; the period starts at zero",
                           error_type=type(exc).__name__)
            return
        if same and math.isfinite(spent) and spent >= 0:
            self.spent_usd = spent


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
