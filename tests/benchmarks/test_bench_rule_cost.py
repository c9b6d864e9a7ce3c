"""The rule-cost benchmark reads each group's cost from Prometheus's own metrics, by the group's name."""

from __future__ import annotations

import importlib.util
import sys
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "alerts" / "bench_rule_cost.py"

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH.parent.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_rule_cost", BENCH)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH.parent.parent))


def test_group_metrics_reads_duration_samples_and_rules_per_group(bench: ModuleType, monkeypatch) -> None:
    """Prometheus names a group "<file>;<group>": the figures are keyed by the group, other metrics ignored."""
    text = "\n".join([
        '# HELP prometheus_rule_group_last_duration_seconds The duration of the last rule group evaluation.',
        'prometheus_rule_group_last_duration_seconds{rule_group="/tmp/x/a.rules.yml;context_precision.recording"} 0.004',
        'prometheus_rule_group_last_duration_seconds{rule_group="/tmp/x/b.rules.yml;context_precision.detection.recording"} 0.25',
        'prometheus_rule_group_last_evaluation_samples{rule_group="/tmp/x/b.rules.yml;context_precision.detection.recording"} 628',
        'prometheus_rule_group_rules{rule_group="/tmp/x/b.rules.yml;context_precision.detection.recording"} 119',
        'prometheus_rule_group_interval_seconds{rule_group="/tmp/x/b.rules.yml;context_precision.detection.recording"} 15',
    ]) + "\n"

    class Response:
        def __enter__(self) -> Response:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def read(self) -> bytes:
            return text.encode()

    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Response())
    found = bench.group_metrics("http://127.0.0.1:1")
    assert found == {"context_precision.recording": {"duration": 0.004},
                     "context_precision.detection.recording": {"duration": 0.25, "samples": 628.0, "rules": 119.0}}


def test_the_cost_sums_detection_and_canary_groups_at_their_shipped_interval(bench: ModuleType) -> None:
    """Seconds per minute: each costed group's duration x 60 / its shipped interval; other groups do not count."""
    found = {"context_precision.detection.recording": {"median": 0.02, "shipped_interval": 60.0},
             "context_precision.canary.recording": {"median": 0.01, "shipped_interval": 30.0},
             "context_precision.recording": {"median": 5.0, "shipped_interval": 60.0},
             "context_precision.guard": {"median": 5.0, "shipped_interval": 60.0}}
    assert bench.cost_per_minute(found) == pytest.approx(0.02 + 0.02)


def test_synthesised_records_cover_every_half_window_and_baseline_day_read_during_the_run(bench: ModuleType) -> None:
    """The recorded rules read a window's record half of the next window back, and every window's 1..7 days back
    (the canary's: no days), with the 5-minute lookback, for the whole run after it settles: the synthesised
    history holds a record at every such minute, none after the run's start, and the count is what the lead is
    sized from."""
    end, seconds = 1_000_000_020 // 60 * 60, 60.0
    times, halves = bench.record_times(end, seconds), bench.record_times(end, seconds, days=False)
    for w in bench.WINDOWS:
        backs = ([w * 60] if w != bench.WINDOWS[-1] else []) + [d * 86_400 - bench.POOL_LEAD_S for d in range(1, 8)]
        for back in backs:
            for now in range(end, end + bench.SETTLE_S + int(seconds) + 1, 15):
                assert any(now - back - 300 <= t <= now - back for t in times[w]), (w, back, now)
                assert back > 86_000 or any(now - back - 300 <= t <= now - back for t in halves[w]), (w, back, now)
        assert all(t <= end for t in times[w]) and set(halves[w]) <= set(times[w])
    assert not halves[bench.WINDOWS[-1]]
    per_source = sum(map(len, times.values())) * 3 + sum(map(len, halves.values())) * 3
    assert bench.history_samples(10, False, True, seconds) == 10 * (3 * (bench.RAW_MINUTES + 1) + per_source)
