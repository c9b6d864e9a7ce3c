"""The paced budget: how fast the rest of the period's budget may be spent, and the burst allowance of a window.

An ad server's lesson: a budget spent as fast as traffic allows is gone by the busy morning, and the rest of
the day is blind. So the allowed spend rate is what is left over how long is left (``spend_rate``): spending
faster now leaves less per second later, never nothing while any budget remains. The sampler is steered to it
(``_rate_plan.py`` turns the rate into evaluations a second with the judge's mean cost per evaluation), so
nothing is captured that will not be judged. Within one pacing window, a burst of traffic may spend up to
``burst`` times the window's paced share (at least one evaluation's cost); past that the pacer refuses judge
calls (``budget_paced``) until the next window. The hard cap of the period stays ``_gates.DailyBudget``.

Used from the evaluator thread only; the numbers it shows (``snapshot``) are plain reads of floats.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["RESERVE_SHARE", "Pacer", "PeriodBudget", "paced_spend_rate"]


class PeriodBudget(Protocol):
    """What the pacer reads of the hard cap (``_gates.DailyBudget``)."""

    limit_usd: float | None
    spent_usd: float
    period_start: float
    period_s: float

    @property
    def period_end(self) -> float: ...
    def left_usd(self) -> float: ...
    def save(self) -> None: ...

_COST_WEIGHT = 0.1  # the weight of a new judgement's cost in the running mean cost per evaluation
#: The share of the even pace kept in reserve for the rest of the period: spending above the pace (the
#: allocation's floors in a busy hour) stops where it would leave less than this for every later hour (above one
#: half, so that the window-to-window wobble of the rate never takes an hour below half the even pace).
RESERVE_SHARE = 0.6


def paced_spend_rate(left_usd: float, now: float, period_end: float, window_s: float) -> float:
    """USD a second that spends ``left_usd`` evenly until ``period_end`` (the last window counts as a whole one)."""
    return max(0.0, left_usd) / max(period_end - now, window_s)


class Pacer:
    """Paces ``budget`` over its period: the spend rate in force, the window's burst allowance, the mean cost."""

    def __init__(self, budget: PeriodBudget, *, burst: float, window_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.budget = budget
        self.burst = burst
        self.window_s = window_s
        self._clock = clock
        self.window_start = math.floor(clock() / window_s) * window_s
        self.window_spent_usd = 0.0
        self.window_cap_usd = math.inf  # the first window: nothing known yet, the hard cap alone holds
        self.mean_cost_usd: float | None = None
        self.spend_rate_usd = 0.0  # USD a second in force this window
        self._set_rate(clock())

    def _set_rate(self, now: float) -> None:
        self.spend_rate_usd = paced_spend_rate(self.budget.left_usd(), now, self.budget.period_end, self.window_s)

    def tick(self) -> bool:
        """At a window boundary: a new spend rate and burst allowance. True when a new window began."""
        now = self._clock()
        start = math.floor(now / self.window_s) * self.window_s
        if start == self.window_start:
            return False
        self.window_start, self.window_spent_usd = start, 0.0
        self._set_rate(now)
        self.expect(self.spend_rate_usd)
        self.budget.save()
        return True

    def expect(self, usd_per_s: float) -> None:
        """Set this window's burst allowance from the spend the sampler's rates are expected to make.

        ``burst`` times the larger of the paced rate and ``usd_per_s`` (what the allocation's floors may spend
        in a busy hour), over the window; at least one evaluation's cost while any budget remains.
        """
        share = self.burst * max(self.spend_rate_usd, usd_per_s) * self.window_s
        self.window_cap_usd = max(share, self.mean_cost_usd or 0.0) if self.budget.left_usd() > 0 else 0.0

    def allow(self) -> bool:
        """True while this window's spend is under its burst allowance."""
        return self.window_spent_usd < self.window_cap_usd

    def spend(self, usd: float | None) -> None:
        """Add a judgement's cost to the window and to the running mean cost per evaluation."""
        if usd is None:
            return
        self.window_spent_usd += usd
        mean = self.mean_cost_usd
        self.mean_cost_usd = usd if mean is None else mean + _COST_WEIGHT * (usd - mean)

    def headroom_usd(self) -> float:
        """What may be spent now beyond the pace while the rest of the period keeps ``RESERVE_SHARE`` of the even pace.

        The spend rate is what is left over how long is left, so as long as what is left covers that share of the
        even pace for the time left, no later hour falls below it.
        """
        budget = self.budget
        if budget.limit_usd is None:
            return math.inf
        left_s = max(budget.period_end - self._clock(), 0.0)
        return budget.left_usd() - RESERVE_SHARE * budget.limit_usd * left_s / budget.period_s

    def evaluations_per_s(self) -> float | None:
        """Evaluations a second the paced spend rate buys at the mean cost (None before any cost is known)."""
        mean = self.mean_cost_usd
        if mean is None or mean <= 0:
            return None
        return self.spend_rate_usd / mean

    def even_evaluations_per_s(self) -> float | None:
        """Evaluations a second the period's whole budget buys spent evenly over the period (None before any cost).

        What a flat sampler spending the same budget spends on average: the allocation's floors follow it, not the
        paced rate in force, which falls below it in the hours after the budget ran ahead of the pace.
        """
        mean = self.mean_cost_usd
        budget = self.budget
        if mean is None or mean <= 0 or budget.limit_usd is None:
            return None
        return budget.limit_usd / budget.period_s / mean

    def allowance_usd(self) -> float:
        """What an even pace would have spent by now in this period."""
        budget = self.budget
        if budget.limit_usd is None:
            return 0.0
        elapsed = min(max(self._clock() - budget.period_start, 0.0), budget.period_s)
        return budget.limit_usd * elapsed / budget.period_s

    def snapshot(self) -> dict[str, Any]:
        """The budget against the pace, for ``processor.stats()`` and the gauges."""
        budget = self.budget
        return {
            "limit_usd": budget.limit_usd,
            "spent_usd": budget.spent_usd,
            "allowance_usd": self.allowance_usd(),
            "period_start": budget.period_start,
            "period_end": budget.period_end,
            "spend_rate_usd_per_s": self.spend_rate_usd,
            "window_spent_usd": self.window_spent_usd,
            "window_cap_usd": None if math.isinf(self.window_cap_usd) else self.window_cap_usd,
            "mean_cost_usd": self.mean_cost_usd,
        }
