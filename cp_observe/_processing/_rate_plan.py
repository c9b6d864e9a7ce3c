"""The sample rates in force: every pacing window, traffic seen, the evaluations to spend, each data source's rate.

With a budget (paced) or ``max_evaluations_per_minute``, the processor's sampler is a ``SourceRates`` and this plan
steers it. At each UTC-aligned boundary of ``pacing_window_s`` (on the evaluator thread's tick, never on the request
path) it

1. closes the window's traffic estimate (``_allocation.TrafficEstimate``, from the sampled retrievals the evaluator
   saw, each standing for ``1 / rate`` calls of its data source),
2. takes the evaluations a second to spend: the paced spend rate over the judge's mean cost per evaluation
   (``_pacer.Pacer``), capped by ``max_evaluations_per_minute``; none once the period's budget is spent,
3. allocates them across data sources (``_allocation.allocate``; one flat rate with ``allocation`` off), with
   ``sample_rate`` as the ceiling, and installs the rates in the sampler in one swap.

Rates therefore change only at window boundaries, which the drop scan's shortest window (5 min) shares with the
default ``pacing_window_s``: within each base window every data source's evaluations are a uniform draw of its
traffic. Until the first boundary, and before any judgement's cost is known, the sampler runs at the ceiling and
the budget's gates alone bound the spend. The rates, and the budget against its pace, are exported as gauges.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from cp_observe import _names as n
from cp_observe._processing._allocation import TrafficEstimate, allocate

if TYPE_CHECKING:
    from cp_observe._config._sampling import SourceRates
    from cp_observe._config._settings import Settings
    from cp_observe._processing._pacer import Pacer

__all__ = ["RatePlan", "wants_plan"]


def wants_plan(options: Settings) -> bool:
    """Whether a processor with ``options`` steers its sampler: a paced budget or an evaluation rate to spend."""
    return options.max_evaluations_per_minute is not None or (
        options.daily_budget_usd is not None and options.budget_pacing)


class RatePlan:
    """Steers one processor's ``SourceRates`` from the traffic its evaluator sees (evaluator thread only)."""

    def __init__(self, sampler: SourceRates, pacer: Pacer | None, options: Settings, *,
                 llm_share: float | None = None, clock: Callable[[], float] = time.time) -> None:
        self.sampler = sampler
        self.pacer = pacer
        # With the cheap-plus-LLM cascade (None without): the share of the sampled retrievals that reaches the
        # priced judge. The cheap judge costs nothing, so a spent budget leaves the sampler at the ceiling there.
        self.llm_share = llm_share
        self.ceiling = options.sample_rate
        self.per_minute = options.max_evaluations_per_minute
        self.allocation = options.allocation
        self.drop = options.allocation_drop
        self.window_s = options.pacing_window_s
        self.traffic = TrafficEstimate(options.budget_period_s)
        self.evaluations_per_s: float | None = None
        self._clock = clock
        now = clock()
        self._opened = now
        self.window_start = math.floor(now / self.window_s) * self.window_s

    def saw(self, key: str | None, sampling_reason: str) -> None:
        """A retrieval sampled by the ratio for data source ``key`` (forced ones say nothing about traffic)."""
        if key is not None and sampling_reason == "ratio":
            self.traffic.add(key, self.sampler.rate_of(key))

    def target(self) -> float:
        """Sampled retrievals a second to aim for now (infinite when nothing bounds them yet).

        The rate cap and the paced budget bound the priced judge's calls. With the cascade only ``llm_share`` of
        the sampled retrievals make one, so the sampler may take ``1 / llm_share`` times as many, and once the
        budget is spent the cheap judge goes on at the ceiling (the gates refuse the LLM calls).
        """
        wanted = math.inf if self.per_minute is None else self.per_minute / 60.0
        pacer = self.pacer
        if pacer is not None:
            if pacer.budget.left_usd() <= 0:
                return 0.0 if self.llm_share is None else math.inf
            paced = pacer.evaluations_per_s()
            if paced is not None:
                wanted = min(wanted, paced)
        if self.llm_share is None:
            return wanted
        return wanted / self.llm_share if self.llm_share > 0 else math.inf

    def tick(self) -> bool:
        """At a window boundary: new rates in force. True when they changed window."""
        pacer = self.pacer
        if pacer is not None:
            pacer.tick()
        now = self._clock()
        start = math.floor(now / self.window_s) * self.window_s
        if start == self.window_start:
            return False
        self.window_start = start
        sampling = self.sampler.rate > 0  # a window sampled at zero saw nothing: keep the estimate it had
        traffic = self.traffic.close(now - self._opened) if sampling else self.traffic.per_s
        self._opened = now
        wanted = self.target()
        self.evaluations_per_s = None if math.isinf(wanted) else wanted
        if wanted <= 0:
            self.sampler.install(dict.fromkeys(traffic, 0.0), 0.0)
            return True
        total = sum(traffic.values())
        if math.isinf(wanted) or total <= 0:
            self.sampler.install({}, self.ceiling)
            return True
        rates = allocate(traffic, wanted, self.ceiling, drop=self.drop, allocation=self.allocation,
                         flat_rate=self.traffic.flat_rate(self._even_target(wanted), self.ceiling),
                         floor_spend=self._floor_spend(wanted))
        self.sampler.install(rates, min(self.ceiling, wanted / total))
        pacer = self.pacer
        if pacer is not None and pacer.mean_cost_usd is not None:
            pacer.expect(sum(traffic[k] * r for k, r in rates.items()) * pacer.mean_cost_usd)
        return True

    def _even_target(self, wanted: float) -> float:
        """Sampled retrievals a second that spend the period's budget evenly (``wanted`` without a budget).

        The flat rate the floors protect is the one spending the same budget over the whole period, so it is taken
        from the even pace, not from the paced rate in force (which a busy morning lowers for the rest of the day).
        """
        pacer = self.pacer
        even = pacer.even_evaluations_per_s() if pacer is not None else None
        if even is None:
            return wanted
        if self.per_minute is not None:
            even = min(even, self.per_minute / 60.0)
        if self.llm_share is None:
            return even
        return even / self.llm_share if self.llm_share > 0 else wanted

    def _floor_spend(self, wanted: float) -> float:
        """Sampled retrievals a second the allocation's floors may take this window: the pace plus the headroom."""
        pacer = self.pacer
        mean = pacer.mean_cost_usd if pacer is not None else None
        if pacer is None or not mean:
            return math.inf
        extra = max(0.0, pacer.headroom_usd()) / mean / self.window_s
        return wanted + (extra / self.llm_share if self.llm_share else extra)

    def snapshot(self) -> dict[str, Any]:
        """The rates in force and what they were chosen from, for ``processor.stats()``."""
        return {
            "rates": dict(self.sampler.rates),
            "default_rate": self.sampler.rate,
            "ceiling": self.ceiling,
            "allocation": self.allocation,
            "traffic_per_s": dict(self.traffic.per_s),
            "evaluations_per_s": self.evaluations_per_s,
            "window_s": self.window_s,
        }

    def observe(self, meter_provider: MeterProvider | None) -> None:
        """Export the rates in force and, with a paced budget, the budget against its pace, as gauges."""
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("cp_observe")
        sampler, pacer = self.sampler, self.pacer

        def rates(_options: CallbackOptions) -> Iterable[Observation]:
            current = sampler.rates  # one read of the dict the plan swaps whole
            for key, rate in current.items():
                yield Observation(rate, {n.GEN_AI_DATA_SOURCE_ID: key})
            yield Observation(sampler.rate, {n.GEN_AI_DATA_SOURCE_ID: n.SAMPLE_KEY_ANY})

        meter.create_observable_gauge(n.METRIC_SAMPLE_RATE, [rates], unit="1",
                                      description="Share of a data source's traces sampled now ('' : agents, "
                                                  "roots and data sources not yet seen)")
        if pacer is None:
            return

        def gauge(read: Callable[[], float | None]) -> Callable[[CallbackOptions], Iterable[Observation]]:
            def callback(_options: CallbackOptions) -> Iterable[Observation]:
                value = read()
                return [] if value is None else [Observation(value)]
            return callback

        meter.create_observable_gauge(n.METRIC_BUDGET_LIMIT, [gauge(lambda: pacer.budget.limit_usd)], unit="{USD}",
                                      description="This process's judge budget for the current period")
        meter.create_observable_gauge(n.METRIC_BUDGET_SPENT, [gauge(lambda: pacer.budget.spent_usd)], unit="{USD}",
                                      description="Judge cost counted in the current period")
        meter.create_observable_gauge(n.METRIC_BUDGET_ALLOWANCE, [gauge(pacer.allowance_usd)], unit="{USD}",
                                      description="What an even pace would have spent by now in the period")
