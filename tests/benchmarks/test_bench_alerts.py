"""The alert simulation's own machinery: `for` as the rule manager applies it, rule inlining, detection counting."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "alerts" / "bench_alerts.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    """benchmarks/alerts/bench_alerts.py imported as a module (it is a script, not a package)."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_alerts", BENCH)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_alerts"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH.parent))


def test_for_fires_only_after_the_expression_held_that_long(bench: ModuleType) -> None:
    """An expression true for 5 steps fires at the 5th with for = 4 steps; a gap restarts the count."""
    step = bench.STEP
    held = {t * step for t in (*range(10, 15), *range(20, 23), *range(30, 36))}
    assert bench.firing_times(held, 4 * step) == [14 * step, 34 * step, 35 * step]
    assert bench.firing_times(held, 0) == sorted(held)


def test_inline_expands_recorded_series_until_none_is_left(bench: ModuleType) -> None:
    """Nested recording rules are replaced by their expressions, parenthesised."""
    records = {"a:x:m": "sum(rate(x[5m]))", "a:x:se": "sqrt(a:x:m)", "a:x:m2": "a:x:m * 2"}
    assert bench.inline("a:x:se + a:x:m2 > 1", records) == "(sqrt((sum(rate(x[5m]))))) + ((sum(rate(x[5m]))) * 2) > 1"


def test_new_rules_are_the_shipped_ones_without_recorded_series(bench: ModuleType) -> None:
    """The new rules read only raw series once inlined, with their shipped `for`."""
    rules = bench.new_rules()
    assert set(rules) == {"ContextPrecisionMAPDrop", "ContextPrecisionMAPRegression", "ContextPrecisionLowVolume"}
    assert all(not re.search(r"\b\w+:\w+:\w+\b", expr) for expr, _ in rules.values())
    assert rules["ContextPrecisionMAPDrop"][1] == 300 and rules["ContextPrecisionMAPRegression"][1] == 600


def test_detection_counts_the_first_firing_within_each_drop(bench: ModuleType) -> None:
    """A drop is detected by the first firing after its start and within its 2 hours; later ones are missed."""
    drops = [0, 10_000, 20_000]
    firing = [-60, 600, 660, 10_000 + bench.EPISODE_S + 60, 20_000 + 1_200]
    found, minutes = bench.detection(firing, drops)
    assert (found, minutes) == (2, [10.0, 20.0])


def test_streams_drop_on_odd_days_only(bench: ModuleType) -> None:
    """A drop stream is healthy on even days (the regression baseline) and drops four times on odd days."""
    stream = bench.Stream("s", 10, 0.05, 0.2, 4)
    assert len(stream.episodes(0)) == 8
    assert stream.mean_at(3600 + 60, 0) == bench.HEALTHY
    assert stream.mean_at(bench.DAY + 3600 + 60, 0) == pytest.approx(bench.HEALTHY - 0.2)
    assert bench.Stream("t", 10, 0.05, 0.0, 4).episodes(0) == []
