"""The canary scenario of benchmarks/alerts/bench_alerts.py: quiet on equal variants, detects a large drop."""

from __future__ import annotations

import importlib.util
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
        spec = importlib.util.spec_from_file_location("bench_alerts_canary", BENCH)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_alerts_canary"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH.parent))


def test_equal_variants_do_not_fire_and_a_large_drop_does(bench: ModuleType) -> None:
    """At 50 req/s and 10 % sampling (1,800 v2 evaluations per window): equal is quiet, a 0.2 drop is found."""
    equal = bench.Stream("c", 50, 0.10, 0.0, 1)
    assert bench.canary_stream(equal, 0, 1) == []
    worse = bench.Stream("c", 50, 0.10, 0.2, 2)
    found, minutes = bench.detection(bench.canary_stream(worse, 0, 2), worse.episodes(0))
    assert found == 4 and all(minutes_ >= bench.CANARY_FOR_S / 60 for minutes_ in minutes)


def test_a_thin_canary_is_never_judged(bench: ModuleType) -> None:
    """At 1 req/s and 1 % sampling v2 has ~3.6 evaluations per window: below the minimum, nothing fires."""
    worse = bench.Stream("c", 1, 0.01, 0.2, 2)
    assert bench.canary_stream(worse, 0, 3) == []


def test_the_table_has_a_row_per_rate_and_sampling(bench: ModuleType) -> None:
    """canary_table gives one row per (rate, sampling) with false alarms and both drops' detection."""
    rows = bench.canary_table((10,), (0.05, 0.10), 1, 2, 5)
    assert [row[:2] for row in rows] == [[10, "5%"], [10, "10%"]] and all(len(row) == 6 for row in rows)
