"""``bench_emission.py`` compares like with like: the emitter of this checkout emits everything the baseline did.

The benchmark times this checkout's ``Emitter.scored`` against ``_emit.py`` as it was before the per-evaluation
cost work (reused attribute dicts, counters as sums; loaded from git, as the benchmark does). Here both emit the
benchmark's own inputs into in-memory exporters and readers: every span attribute, log-record attribute and
metric point of the baseline must come out of this checkout's emitter unchanged (it may emit more: labels added
since are allowed), so the figures compare the same work, and the reused attribute dicts changed nothing that is
exported.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "judging" / "bench_emission.py"
BASELINE = "c51661a"  # the emitter before the per-evaluation cost work


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    """benchmarks/judging/bench_emission.py imported as a module (it is a script, not a package)."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_emission", BENCH)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_emission"] = module
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH.parent))
        sys.modules.pop("bench_emission", None)


def _emit(module: Any, bench: ModuleType) -> tuple[list[dict[str, Any]], list[dict[str, Any]], set[Any]]:
    spans, logs, reader = InMemorySpanExporter(), InMemoryLogRecordExporter(), InMemoryMetricReader()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    logger = LoggerProvider()
    logger.add_log_record_processor(SimpleLogRecordProcessor(logs))
    emitter = bench.make_emitter(module, tracer_provider=tracer, meter_provider=MeterProvider(metric_readers=[reader]),
                                 logger_provider=logger, threshold=0.5, capture_content=True, queue_depth=lambda: 0)
    for target, result in bench._inputs(module, 12):
        emitter.scored(target, result, start_ns=1_000, end_ns=2_000_000, model="openai/judge-test")
    points: set[Any] = set()
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    measured = value if value is not None else (point.count, point.sum)
                    points.add((metric.name, frozenset((point.attributes or {}).items()), measured))
    span_attributes = [dict(s.attributes or {}) for s in spans.get_finished_spans()]
    log_attributes = [dict(record.log_record.attributes or {}) for record in logs.get_finished_logs()]
    return span_attributes, log_attributes, points


def _covers(mine: dict[str, Any], theirs: dict[str, Any]) -> bool:
    return all(key in mine and mine[key] == value for key, value in theirs.items())


def test_this_emitter_emits_everything_the_baseline_did(bench: ModuleType) -> None:
    """Same spans, log records and metric points as the baseline, for the benchmark's own inputs."""
    known = subprocess.run(["git", "cat-file", "-e", f"{BASELINE}^{{commit}}"], cwd=ROOT, check=False)
    if known.returncode != 0:
        pytest.skip(f"commit {BASELINE} is not in this clone")
    from cp_observe._emission import _emit as current

    baseline = bench._baseline_module(BASELINE)
    before_spans, before_logs, before_points = _emit(baseline, bench)
    after_spans, after_logs, after_points = _emit(current, bench)
    assert len(before_spans) == len(after_spans) == 12
    assert all(_covers(a, b) for a, b in zip(after_spans, before_spans, strict=True))
    assert len(before_logs) == len(after_logs) == 12
    assert all(_covers(a, b) for a, b in zip(after_logs, before_logs, strict=True))
    by_name = {(name, value) for name, _, value in after_points}
    assert {(name, value) for name, _, value in before_points} <= by_name
    if {labels for _, labels, _ in after_points} == {labels for _, labels, _ in before_points}:
        assert after_points == before_points  # no label added since: exactly the same points
