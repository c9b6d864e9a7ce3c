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
