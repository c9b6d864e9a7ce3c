"""``bench_flex_alert_delay.py`` records each score when its judge answers, and compares the tiers on one stream."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "judging" / "bench_flex_alert_delay.py"


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    """benchmarks/judging/bench_flex_alert_delay.py imported as a module (it is a script, not a package)."""
    paths = [str(BENCH.parents[1] / "alerts"), str(BENCH.parents[1])]
    sys.path[:0] = paths
    try:
        spec = importlib.util.spec_from_file_location("bench_flex_alert_delay", BENCH)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("bench_flex_alert_delay", None)
        for path in paths:
            sys.path.remove(path)


def test_scores_land_in_the_minute_the_judge_answered(bench: ModuleType) -> None:
    """A fixed latency of 150 s moves every evaluation two minutes later; none is lost or counted twice."""
    rng = np.random.default_rng(1)
    means = np.full(10, 0.65)
    expected = np.full(10, 50.0)
    on_time = bench.draw_late(means, expected, 20, latency=lambda r, n: np.zeros(n), rng=np.random.default_rng(2))
    late = bench.draw_late(means, expected, 20, latency=lambda r, n: np.full(n, 150.0), rng=np.random.default_rng(2))
    assert on_time[0, :10].sum() == late[0].sum()
    # 150 s after an arrival somewhere in its minute: recorded 2 or 3 minutes later, so minutes 2 to 12
    assert late[0, :2].sum() == 0 and late[0, 2:13].sum() == on_time[0, :10].sum()
    assert late[1].sum() == pytest.approx(on_time[1].sum())  # the same scores, only later
    flex = bench.flex_latency(rng, 100_000)
    assert 100 < np.median(flex) < 140 and flex.max() < bench.FLEX_TIMEOUT_S + 120


def test_a_quick_run_prints_the_table() -> None:
    """Every quick cell and change has a row, and the script says whether a simple rule picks the tier."""
    done = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith(("| 1 |", "| 10 |", "| 50 |"))]
    assert len(rows) == 9
    assert "non-loopback connections refused: 0" in done.stdout
