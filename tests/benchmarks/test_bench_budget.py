"""The budget simulation's own machinery: the paced plan spends its budget and blinds no hour; today's gate does."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "budget" / "bench_budget.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """benchmarks/budget/bench_budget.py imported as a module (it imports the alert benchmark's streams)."""
    folders = [str(BENCH.parents[1]), str(BENCH.parents[1] / "alerts")]
    sys.path[:0] = folders
    try:
        spec = importlib.util.spec_from_file_location("bench_budget", BENCH)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_budget"] = module
        spec.loader.exec_module(module)
        return module
    finally:
        for folder in folders:
            sys.path.remove(folder)


def test_the_paced_plan_spends_its_budget_and_leaves_no_hour_blind(bench: ModuleType) -> None:
    """Three days at half the flat spend: each day's spend at most the budget, every hour half the even pace or more."""
    rng = np.random.default_rng(1)
    days = 3
    calls = bench.fleet_traffic(days, rng, phase=0.75)
    budget = 0.5 * bench.FLAT * calls.sum() / days
    paced = bench.plan_rates(calls, budget, rng)
    per_day = paced.sum(axis=0).reshape(days, -1).sum(axis=1)
    assert (per_day <= budget * (1 + 1e-9)).all()
    assert (per_day[1:] >= 0.8 * budget).all()  # the first day starts with no traffic estimate
    hours = paced.sum(axis=0).reshape(days, 24, 60).sum(axis=2)
    assert hours[1:].min() >= 0.5 * budget / 24


def test_todays_gate_is_blind_after_the_budget_is_spent(bench: ModuleType) -> None:
    """The flat rate until the budget is spent, then zero for the rest of each day."""
    rng = np.random.default_rng(2)
    calls = bench.fleet_traffic(2, rng, phase=0.75)
    budget = 0.5 * bench.FLAT * calls.sum() / 2
    hours = bench.todays_gate(calls, budget).sum(axis=0).reshape(2, 24, 60).sum(axis=2)
    assert (hours == 0).sum() >= 2
    assert hours.sum() == pytest.approx(2 * budget, rel=0.05)


def test_allocation_moves_evaluations_to_the_quiet_data_sources(bench: ModuleType) -> None:
    """At the flat rate's spend, the quietest data source gets several times the flat rate's evaluations."""
    rng = np.random.default_rng(3)
    days = 2
    calls = bench.fleet_traffic(days, rng, phase=0.3)
    allocated = bench.plan_rates(calls, bench.FLAT * calls.sum() / days, rng)
    flat = calls * bench.FLAT
    assert allocated[0, 1440:].sum() > 3 * flat[0, 1440:].sum()
    assert allocated[-1, 1440:].sum() < flat[-1, 1440:].sum()
