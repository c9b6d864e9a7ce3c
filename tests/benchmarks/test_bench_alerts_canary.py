"""The canary part of benchmarks/alerts/bench_alerts.py: the rules' arithmetic, quiet on equal variants, a drop detected."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from cp_observe._stats._canary_scan import gap_z

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "alerts" / "bench_alerts.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """benchmarks/alerts/bench_alerts.py imported as a module (it is a script, not a package)."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_alerts_canary", BENCH)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_alerts_canary"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH.parent))


@pytest.fixture(scope="module")
def rules(bench: ModuleType) -> ModuleType:
    """The shipped canary rules' generator (their constants)."""
    return bench._canary_rules()


def test_the_vectorised_scan_is_the_shared_statistic(bench: ModuleType, rules: ModuleType) -> None:
    """canary_scan_z equals _stats/_canary_scan.gap_z window by window, NaN exactly where it is not judged; a long
    window's at the long group's last evaluation."""
    rng = np.random.default_rng(3)
    minutes = 3000
    means = np.full(minutes, 0.6)
    v2 = bench.draw(means - 0.1, rng.uniform(0, 2, minutes), rng)
    v1 = bench.draw(means, rng.uniform(0, 3, minutes), rng)
    at = np.array([5, 30, 700, 1500, 2999])
    z = bench.canary_scan_z(v2, v1, at, rules)
    for row, w in enumerate(rules.WINDOWS):
        for col, t in enumerate(at):
            if w in rules.LONG_WINDOWS:
                t -= t % rules.LONG_EVERY_MIN
            value = tuple(v2[:, max(t - w, 0):t].sum(axis=1))
            total = tuple((v1 + v2)[:, max(t - w, 0):t].sum(axis=1))
            found = gap_z(value, total, margin=rules.MARGIN, var_floor=rules.VAR_FLOOR, min_count=rules.MIN_COUNT,
                          gap_sd=rules.GAP_SD)
            if found is None:
                assert math.isnan(z[row, col])
            else:
                assert math.isclose(z[row, col], found.z, rel_tol=1e-9, abs_tol=1e-9)


def test_equal_variants_stay_quiet_and_steps_are_caught(bench: ModuleType, rules: ModuleType) -> None:
    """At 10 req/s and 5 %: equal variants over 10 days never fire; 0.2 and 0.3 steps are all caught within a day."""
    cell = bench.Cell(10, 0.05)
    steady = bench.canary_steady(cell, 10, 5, rules)
    assert steady["new"] == 0
    changes = bench.canary_changes(cell, 2, 6, rules)
    for change in (("step", 0.2), ("step", 0.3)):
        assert all(d is not None and d > 0 for d in changes[change]["new"]), changes[change]
        assert all(d is not None for d in changes[change]["oracle"])


def test_a_thin_canary_is_never_judged(bench: ModuleType, rules: ModuleType) -> None:
    """Under the minimum on a side in every window, the scan has no z at all (nothing can fire)."""
    rng = np.random.default_rng(8)
    minutes = 3000
    v2 = bench.draw(np.full(minutes, 0.2), np.full(minutes, 0.01), rng)  # ~13 evaluations in 1280 min
    v1 = bench.draw(np.full(minutes, 0.9), np.full(minutes, 5.0), rng)
    z = bench.canary_scan_z(v2, v1, np.arange(1300, minutes), rules)
    assert np.isnan(z).all()


def test_the_tables_have_a_row_per_cell_and_change(bench: ModuleType, rules: ModuleType) -> None:
    """canary_grid: one false-alarm row per cell, one detection row per cell and change."""
    alarms, detects = bench.canary_grid([bench.Cell(10, 0.05)], 0.1, 1, 2, rules)
    assert len(alarms) == 1 and len(alarms[0]) == 6
    assert [row[2] for row in detects] == ["step 0.1", "step 0.2", "step 0.3", "drift 0.1"]
