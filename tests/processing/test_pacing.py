"""The paced budget and the per-data-source rates: the period's hard cap, the pace, the burst allowance, the
allocation's bounds, the sampler's keys, spend kept across a restart, and a processor steering its own sampler."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

import cp_observe
from cp_observe import _names as n
from cp_observe._config._sampling import SourceRates, TraceIdRatio
from cp_observe._config._settings import Settings
from cp_observe._processing._allocation import (
    FLAT_DELAY_BOUND,
    FLOOR_DIVISOR,
    TrafficEstimate,
    allocate,
    saturation,
)
from cp_observe._processing._gates import CircuitBreaker, DailyBudget, Gates, RateLimiter, refusal
from cp_observe._processing._pacer import Pacer
from cp_observe._processing._rate_plan import RatePlan
from cp_observe.testing import FakeJudge
from tests.conftest import Otel

HOUR = 3600.0
DAY = 86_400.0
# Ten data sources whose traffic spans 100x, 0.5 to 50 calls a second (the fleet).
FLEET = {f"ds{i}": 0.5 * 100 ** (i / 9) for i in range(10)}


class Clock:
    """A settable clock (seconds since the epoch)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _closed() -> CircuitBreaker:
    return CircuitBreaker(failures=5, cooldown_s=1.0)


# --- the hard cap over its period ---------------------------------------------------------------------------------


def test_an_hourly_budget_refuses_when_spent_and_starts_again_with_the_next_utc_hour() -> None:
    """budget_period_s=3600: spent out within 10:00-11:00, refused until 11:00 sharp, then a fresh budget."""
    clock = Clock(1_700_000_000 // 3600 * 3600 + 600.0)  # 10 minutes into a UTC hour
    budget = DailyBudget(0.01, period_s=HOUR, clock=clock)
    budget.spend(0.006)
    assert refusal(_closed(), RateLimiter(None), budget) is None
    budget.spend(0.006)
    assert refusal(_closed(), RateLimiter(None), budget) == n.SKIP_BUDGET_EXHAUSTED
    clock.now = budget.period_end - 0.001
    assert not budget.allow()
    clock.now = budget.period_end
    assert budget.allow() and budget.spent_usd == 0.0


def test_the_default_period_is_the_utc_day() -> None:
    """Without budget_period_s the period runs from UTC midnight to UTC midnight, as daily_budget_usd always did."""
    clock = Clock(1_700_000_000.0)
    budget = DailyBudget(1.0, clock=clock)
    assert budget.period_start % DAY == 0 and budget.period_end - budget.period_start == DAY
    assert budget.period_start <= clock.now < budget.period_end


def test_replicas_each_pace_their_share_of_the_budget() -> None:
    """budget_replicas=4: each process's hard cap and pace are a quarter of daily_budget_usd."""
    gates = Gates(Settings(daily_budget_usd=2.0, budget_replicas=4))
    assert gates.budget.limit_usd == 0.5
    assert gates.pacer is not None and gates.pacer.snapshot()["limit_usd"] == 0.5


def test_without_pacing_the_budget_is_a_plain_cap() -> None:
    """budget_pacing=false (the offline commands): no pacer, only the hard cap."""
    gates = Gates(Settings(daily_budget_usd=1.0, budget_pacing=False))
    assert gates.pacer is None and gates.budget.limit_usd == 1.0


# --- spend kept across a restart --------------------------------------------------------------------------------


def test_spend_survives_a_restart_within_its_period(tmp_path: Path) -> None:
    """A budget built again on the same state file resumes the period's spend; the next period starts at zero."""
    path = str(tmp_path / "budget.json")
    clock = Clock(1_700_000_000.0)
    first = DailyBudget(1.0, period_s=HOUR, state_path=path, clock=clock)
    first.spend(0.25)
    first.spend(0.5)
    first.save()
    clock.now += 60
    assert DailyBudget(1.0, period_s=HOUR, state_path=path, clock=clock).spent_usd == pytest.approx(0.75)
    clock.now = first.period_end + 1
    assert DailyBudget(1.0, period_s=HOUR, state_path=path, clock=clock).spent_usd == 0.0


def test_an_unreadable_state_file_starts_the_period_at_zero(tmp_path: Path) -> None:
    """A corrupt file or one from another period length never raises: the period starts at zero."""
    path = tmp_path / "budget.json"
    path.write_text("{not json", encoding="utf-8")
    assert DailyBudget(1.0, state_path=str(path)).spent_usd == 0.0
    clock = Clock(1_700_000_000.0)
    path.write_text(json.dumps({"period_start": clock.now // HOUR * HOUR, "period_s": DAY, "spent_usd": 0.5}),
                    encoding="utf-8")
    assert DailyBudget(1.0, period_s=HOUR, state_path=str(path), clock=clock).spent_usd == 0.0


# --- the pace and the burst allowance -----------------------------------------------------------------------------


def test_the_spend_rate_follows_what_is_left_and_how_long_is_left() -> None:
    """At 06:00 with the whole budget left the rate is budget / 18 h; spending fast lowers it, never to zero."""
    start = 1_700_000_000 // DAY * DAY
    clock = Clock(start + 6 * HOUR)
    budget = DailyBudget(18.0, clock=clock)
    pacer = Pacer(budget, burst=2.0, window_s=300, clock=clock)
    assert pacer.spend_rate_usd == pytest.approx(18.0 / (18 * HOUR))
    budget.spend(17.9)
    clock.now += 300
    pacer.tick()
    assert 0 < pacer.spend_rate_usd == pytest.approx(0.1 / (18 * HOUR - 300))
    assert pacer.allowance_usd() == pytest.approx(18.0 * (6 * HOUR + 300) / DAY)


def test_a_window_past_its_burst_allowance_is_paced_until_the_next_window() -> None:
    """Spend within a window stops at burst x its paced share (budget_paced), and goes on in the next window."""
    start = 1_700_000_000 // DAY * DAY
    clock = Clock(start)
    budget = DailyBudget(28.8, clock=clock)  # 1/3000 USD a second over the day: 0.1 USD a 300 s window
    pacer = Pacer(budget, burst=2.0, window_s=300, clock=clock)
    clock.now += 300
    pacer.tick()
    assert pacer.window_cap_usd == pytest.approx(2 * 28.8 / (DAY - 300) * 300)
    spent = 0
    while refusal(_closed(), RateLimiter(None), budget, pacer) is None:
        budget.spend(0.01)
        pacer.spend(0.01)
        spent += 1
    assert spent == math.ceil(pacer.window_cap_usd / 0.01 - 1e-9)
    assert refusal(_closed(), RateLimiter(None), budget, pacer) == n.SKIP_BUDGET_PACED
    clock.now += 300
    pacer.tick()
    assert refusal(_closed(), RateLimiter(None), budget, pacer) is None


def test_the_burst_allowance_always_admits_one_evaluation_while_budget_remains() -> None:
    """Late in the period with little left, the window still lets one evaluation (at the mean cost) through."""
    start = 1_700_000_000 // DAY * DAY
    clock = Clock(start)
    budget = DailyBudget(1.0, clock=clock)
    pacer = Pacer(budget, burst=1.0, window_s=60, clock=clock)
    pacer.spend(0.05)  # the mean cost is now known: 0.05 USD an evaluation
    budget.spend(0.99)
    clock.now += 60
    pacer.tick()
    assert pacer.window_cap_usd >= 0.05 and pacer.allow()


# --- the allocation -----------------------------------------------------------------------------------------------


def test_allocation_moves_evaluations_from_busy_to_quiet_data_sources_within_its_bounds() -> None:
    """Same evaluations as a flat 5 %: busy below 5 %, quiet above, none under 5 % / 1.5, none over the ceiling."""
    spend = 0.05 * sum(FLEET.values())
    rates = allocate(FLEET, spend, 1.0)
    flat = 0.05
    assert rates["ds0"] > 5 * flat and rates["ds9"] < flat
    assert all(flat / FLAT_DELAY_BOUND - 1e-12 <= r <= 1.0 for r in rates.values())
    assert sum(FLEET[k] * r for k, r in rates.items()) == pytest.approx(spend, rel=1e-6)
    evaluations = {k: FLEET[k] * r for k, r in rates.items()}
    assert min(evaluations.values()) >= 0.999 * FLEET["ds0"] * rates["ds0"]  # the quietest is the worst off no more


def test_allocation_off_is_one_flat_rate_and_a_loose_budget_is_the_ceiling() -> None:
    """allocation=false gives every data source E / total; more evaluations than the ceiling allows give the ceiling."""
    total = sum(FLEET.values())
    flat = allocate(FLEET, 0.05 * total, 1.0, allocation=False)
    assert list(flat.values()) == [pytest.approx(0.05)] * len(FLEET)
    assert set(allocate(FLEET, 10 * total, 0.3).values()) == {0.3}


def test_allocation_spends_no_more_than_detection_can_use() -> None:
    """Past N(δ) evaluations in the shortest window a data source's delay is the window's: the rest is not spent."""
    fleet = {"a": 500.0, "b": 400.0}
    rates = allocate(fleet, 0.5 * 900, 1.0, drop=0.2)
    used = sum(fleet[k] * r for k, r in rates.items())
    assert used < 0.5 * 900
    assert all(fleet[k] * r <= max(saturation(0.2), fleet[k] * 0.5 / FLOOR_DIVISOR) + 1e-9
               for k, r in rates.items())


# --- the sampler's keys ---------------------------------------------------------------------------------------------


def test_rates_by_data_source_nest_under_the_rate_of_spans_with_no_key() -> None:
    """Every trace a data source samples is sampled for an agent (no key) too; decisions are the trace id's alone."""
    sampler = SourceRates(1.0)
    sampler.install({"quiet": 0.8, "busy": 0.02}, 0.1)
    assert sampler.rate == 0.8 and sampler.rate_of("unseen") == 0.8
    ids = [(i * 0x9E3779B97F4A7C15) & ((1 << 128) - 1) for i in range(20_000)]
    for trace_id in ids:
        for key in ("quiet", "busy"):
            if sampler(trace_id, key):
                assert sampler(trace_id) and sampler(trace_id, "unseen")
    busy = sum(sampler(t, "busy") for t in ids) / len(ids)
    assert busy == pytest.approx(0.02, abs=0.005)
    assert [sampler(t, "busy") for t in ids] == [TraceIdRatio(0.02)(t) for t in ids]


def test_traffic_is_estimated_from_the_sampled_calls_alone() -> None:
    """Each sampled call stands for 1 / rate calls: 10 000 calls sampled at 10 % estimate 10 000 within 10 %."""
    estimate = TrafficEstimate()
    ratio = TraceIdRatio(0.1)
    ids = [(i * 0x9E3779B97F4A7C15 + 12345) & ((1 << 128) - 1) for i in range(10_000)]
    for trace_id in ids:
        if ratio(trace_id):
            estimate.add("kb", 0.1)
    assert estimate.close(100.0)["kb"] == pytest.approx(100.0, rel=0.1)


def test_the_traffic_estimate_keeps_a_bounded_number_of_data_sources() -> None:
    """A key per call (a bad data source id) cannot grow the estimate without bound."""
    estimate = TrafficEstimate()
    for i in range(5000):
        estimate.add(f"k{i}", 0.5)
    assert len(estimate.close(1.0)) <= 1000


def test_the_long_run_traffic_is_the_plain_mean_of_the_last_period() -> None:
    """Over a horizon of four windows, traffic rising 1, 2, ... 6 a second averages the last four: 4.5 a second."""
    estimate = TrafficEstimate(horizon_s=400.0)
    for per_s in range(1, 7):
        estimate.add("kb", 1.0, per_s * 100.0)
        estimate.close(100.0)
    assert estimate.long_run_total == pytest.approx(4.5)
    assert estimate.flat_rate(0.45, 1.0) == pytest.approx(0.1)


def test_the_floors_follow_the_even_pace_not_the_rate_a_fast_morning_left() -> None:
    """Half the day's budget spent by 06:00 lowers the paced rate; the even pace the floors follow stays put."""
    start = 1_700_000_000 // DAY * DAY
    clock = Clock(start + 6 * HOUR)
    budget = DailyBudget(8.64, clock=clock)  # 1e-4 USD a second spent evenly
    pacer = Pacer(budget, burst=2.0, window_s=300, clock=clock)
    assert pacer.even_evaluations_per_s() is None  # no cost known yet
    pacer.spend(1e-5)
    budget.spend(4.32)
    clock.now += 300
    pacer.tick()
    assert pacer.evaluations_per_s() < 0.7 * 10.0
    assert pacer.even_evaluations_per_s() == pytest.approx(10.0)


def test_the_plan_installs_rates_only_at_window_boundaries_and_none_once_the_budget_is_spent() -> None:
    """Rates change at the UTC-aligned boundary; a spent period samples nothing (forced traces stay forced)."""
    start = 1_700_000_000 // DAY * DAY
    clock = Clock(start + 10)
    options = Settings(sample_rate=1.0, daily_budget_usd=8.64, pacing_window_s=300)  # 1e-4 USD a second
    budget = DailyBudget(8.64, clock=clock)
    pacer = Pacer(budget, burst=2.0, window_s=300, clock=clock)
    sampler = SourceRates(1.0)
    plan = RatePlan(sampler, pacer, options, clock=clock)
    pacer.spend(1e-4)  # one evaluation costs 1e-4 USD: the pace buys about one a second
    for key, calls in (("busy", 3000), ("quiet", 30)):
        for _ in range(calls):
            plan.saw(key, "ratio")
    clock.now = start + 200
    assert not plan.tick() and sampler.rates == {}
    clock.now = start + 300
    assert plan.tick()
    assert sampler.rates["quiet"] == 1.0 and sampler.rates["busy"] < 0.1
    assert plan.evaluations_per_s == pytest.approx(1.0, rel=0.01)
    budget.spend(9.0)
    clock.now = start + 600
    plan.tick()
    assert sampler.rate == 0.0 and set(sampler.rates.values()) == {0.0}


def test_with_the_cascade_the_budget_paces_the_llm_calls_and_a_spent_one_leaves_the_cheap_judge_going() -> None:
    """llm_share=0.25: four times the retrievals the paced LLM calls allow; once spent, the ceiling (not zero)."""
    start = 1_700_000_000 // DAY * DAY
    clock = Clock(start + 10)
    options = Settings(sample_rate=1.0, daily_budget_usd=8.64, pacing_window_s=300)
    budget = DailyBudget(8.64, clock=clock)
    pacer = Pacer(budget, burst=2.0, window_s=300, clock=clock)
    pacer.spend(1e-4)
    plan = RatePlan(SourceRates(1.0), pacer, options, llm_share=0.25, clock=clock)
    alone = RatePlan(SourceRates(1.0), pacer, options, clock=clock)
    assert plan.target() == pytest.approx(4 * alone.target())
    budget.spend(9.0)
    assert alone.target() == 0.0 and math.isinf(plan.target())


# --- a processor steering its own sampler -------------------------------------------------------------------------


def _pairs(otel: Otel, processor: Any, seconds: float) -> None:
    @cp_observe.retriever(name="busy")
    def busy(question: str) -> list[str]:
        return ["Paris is the capital of France.", "Bananas are yellow."]

    @cp_observe.retriever(name="quiet")
    def quiet(question: str) -> list[str]:
        return ["Paris is the capital of France.", "Bananas are yellow."]

    @cp_observe.agent(name="helper")
    def answer(question: str, source: Any) -> str:
        source(question)
        return "Paris is the capital of France."

    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        answer(f"what is the capital of France? {i}", quiet if i % 20 == 0 else busy)
        i += 1
        if i % 50 == 0:
            time.sleep(0.01)


def test_a_processor_allocates_its_evaluation_rate_and_exports_the_rates(otel: Otel) -> None:
    """max_evaluations_per_minute as the rate to spend: after a window the busy source is sampled below the quiet one,
    each sampled retrieval is judged against its agent's answer, and the rates are gauges."""
    processor = otel.processor(FakeJudge(), sample_rate=1.0, max_evaluations_per_minute=120, pacing_window_s=1,
                               queue_size=100_000, max_pending_traces=100_000)
    _pairs(otel, processor, 3.2)
    assert processor.force_flush(60_000)
    sampling = processor.stats()["sampling"]
    rates = sampling["rates"]
    assert rates["busy"] < rates["quiet"] <= 1.0
    assert sampling["evaluations_per_s"] == pytest.approx(2.0)
    evaluations = otel.by_name(n.EVALUATION_SPAN_NAME)
    assert evaluations and {e.attributes[n.CP_REFERENCE] for e in evaluations} == {n.REFERENCE_OUTPUT}
    gauges = {p.attributes[n.GEN_AI_DATA_SOURCE_ID]: p.value for p in otel.metric_points(n.METRIC_SAMPLE_RATE)}
    assert gauges["busy"] == rates["busy"] and gauges[n.SAMPLE_KEY_ANY] == sampling["default_rate"]


def test_a_processor_without_budget_or_rate_keeps_the_flat_rate(otel: Otel) -> None:
    """No budget, no rate cap: the sampler is today's trace-id ratio and stats() shows no sampling plan."""
    processor = otel.processor(FakeJudge(), sample_rate=0.5)
    assert type(processor.sampler) is TraceIdRatio and "sampling" not in processor.stats()


def test_a_spent_budget_still_scores_forced_traces(otel: Otel) -> None:
    """A zero budget paces every rate to nothing at the first boundary; force_evaluation still samples (then skips)."""
    processor = otel.processor(FakeJudge(cost_usd=0.001), daily_budget_usd=0.0, pacing_window_s=1)
    time.sleep(1.3)  # one boundary: the rates go to zero
    assert processor.stats()["sampling"]["default_rate"] == 0.0

    @cp_observe.retriever(name="kb")
    def search(question: str) -> list[str]:
        return ["Paris is the capital of France."]

    search("capital?")
    with cp_observe.force_evaluation():
        search("capital of France?")
    assert processor.force_flush(10_000)
    stats = processor.stats()
    assert stats["sampled"] == 1 and stats["reasons"] == {f"{n.OUTCOME_SKIPPED}:{n.SKIP_BUDGET_EXHAUSTED}": 1}
    assert stats["budget"]["limit_usd"] == 0.0
