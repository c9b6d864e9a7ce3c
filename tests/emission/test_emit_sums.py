"""The counters kept as sums (``_emission/_sums.py``) export what the synchronous counters exported.

The baseline is ``_emit.py`` as it was before the sums (synchronous ``Counter.add`` for squares, evaluations,
verdicts, cost and the cascade sums), loaded from git as ``benchmarks/judging/bench_emission.py`` loads it. Both
emitters get the same mixed stream (segments, agents, the rerank stage, the cascade with and without its LLM
judgement, failures, dropped and skipped targets, costs and none) into a meter provider with a cumulative and a delta
reader, collected several times along the way: every collection must hold the same points.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanContext, TraceFlags

from cp_observe import _names as n
from cp_observe._config._settings import Settings
from cp_observe._emission import _emit as current
from cp_observe._types import CascadeResult, RerankLift, ScoreResult, Usage, Verdict

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "judging" / "bench_emission.py"
BEFORE_SUMS = "2242c3f"  # main before the counters became sums
_DELTA = {kind: AggregationTemporality.DELTA for kind in
          (Counter, UpDownCounter, Histogram, ObservableCounter, ObservableUpDownCounter, ObservableGauge)}


@pytest.fixture(scope="module")
def baseline() -> Iterator[ModuleType]:
    known = subprocess.run(["git", "cat-file", "-e", f"{BEFORE_SUMS}^{{commit}}"], cwd=ROOT, check=False)
    if known.returncode != 0:
        pytest.skip(f"commit {BEFORE_SUMS} is not in this clone")
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_emission_sums", BENCH)
        assert spec and spec.loader
        bench = importlib.util.module_from_spec(spec)
        sys.modules["bench_emission_sums"] = bench
        spec.loader.exec_module(bench)
        yield bench._baseline_module(BEFORE_SUMS)
    finally:
        sys.path.remove(str(BENCH.parent))
        sys.modules.pop("bench_emission_sums", None)


def _result(i: int, *, rerank: bool = False, model: str = "openai/judge-test") -> ScoreResult:
    verdicts = tuple(Verdict(j, (i + j) % 3 == 0, f"reason {j}") for j in range(1 + i % 5))
    ap = round(0.1 + (i % 9) / 10, 3)
    lift = RerankLift(average_precision_before=ap / 2, lift=ap / 2, dropped_relevant=i % 2) if rerank else None
    cost = (None, 0.0, 0.00013 * (i + 1))[i % 3]
    return ScoreResult(score=ap, reason="r", verdicts=verdicts, average_precision=ap, judge_model=model,
                       reference="output", usage=Usage(1 + i % 2, 100 + i, (0, 30)[i % 2]), cost_usd=cost,
                       rerank=lift)


def _stream(module: Any, emitter: Any, collect: Any) -> None:
    """The same mixed stream into ``emitter``; ``collect()`` every 7 events."""
    for i in range(60):
        ctx = SpanContext(trace_id=i + 1, span_id=i + 1, is_remote=False, trace_flags=TraceFlags(1))
        segments = (("tenant", ("a", "b", n.SEGMENT_OTHER)[i % 3]),) if i % 4 else ()
        stage = n.STAGE_RERANK if i % 5 == 0 else n.STAGE_RETRIEVAL
        target = module.Target(span_context=ctx, data_source=("kb", "faq")[i % 2],
                               agent_name=("support", None)[i % 2], reference="output", sampling_reason="ratio",
                               segments=segments, stage=stage)
        labels = emitter.labels(target)
        kind = i % 6
        if kind == 0:
            emitter.failed(target, TimeoutError("slow"), "timeout", start_ns=0, end_ns=10_000_000,
                           model="openai/judge-test", cheap=i % 4 == 0)
        elif kind == 1:
            emitter.count(n.OUTCOME_DROPPED, "queue_full", labels)
            emitter.count(n.OUTCOME_SKIPPED, "no_contexts", labels)
        elif kind == 2:  # the cascade, with and without its LLM judgement
            cheap = _result(i, model="local/cheap")
            llm = _result(i + 1) if i % 4 == 2 else None
            cascade = CascadeResult(cheap=cheap, llm=llm, llm_status="judged" if llm else "skipped",
                                    cheap_seconds=0.001 * i, llm_seconds=0.01 * i)
            emitter.scored(target, llm or cheap, start_ns=0, end_ns=5_000_000, model="openai/judge-test",
                           cascade=cascade)
        else:
            emitter.scored(target, _result(i, rerank=stage == n.STAGE_RERANK), start_ns=0, end_ns=2_000_000 * i,
                           model=("openai/judge-test", "openai/other")[i % 2])
        emitter.count_sampled(labels)
        if i % 7 == 6:
            collect()
    collect()


def _points(reader: InMemoryMetricReader) -> set[tuple[Any, ...]]:
    """One collection's points (name, attribute set, value type, value or (count, sum, bucket counts)).

    Zero deltas are dropped, and float values rounded to 12 significant digits: the SDK adds a synchronous
    counter's measurements per collection interval and then onto the running total, where the sums add each
    measurement onto the total, so the last bits of a float sum depend on when collections fell.
    """
    points: set[tuple[Any, ...]] = set()
    data = reader.get_metrics_data()
    if data is None:
        return points
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name in (n.METRIC_QUEUE_DEPTH, n.METRIC_INTERNAL_ERRORS):
                    continue
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = (point.count, point.sum, tuple(point.bucket_counts))
                    elif value == 0 and getattr(metric.data, "aggregation_temporality", None) == \
                            AggregationTemporality.DELTA:
                        continue  # an observable counter reports an unchanged set as a zero delta
                    if isinstance(value, float):
                        value = float(f"{value:.12g}")
                    points.add((metric.name, frozenset((point.attributes or {}).items()), type(value), value))
    return points


def _run(module: Any) -> tuple[list[set[Any]], list[set[Any]]]:
    cumulative, delta = InMemoryMetricReader(), InMemoryMetricReader(preferred_temporality=_DELTA)
    meter = MeterProvider(metric_readers=[cumulative, delta])
    tracer = TracerProvider()
    emitter = sys.modules["bench_emission_sums"].make_emitter(  # loaded by the baseline fixture
        module, tracer_provider=tracer, meter_provider=meter, logger_provider=None, threshold=0.5,
        capture_content=False, queue_depth=lambda: 0, segments=(("tenant", "tenant"),), judge=None, cheap_judge=None)
    cumulative_points: list[set[Any]] = []
    delta_points: list[set[Any]] = []

    def collect() -> None:
        cumulative_points.append(_points(cumulative))
        delta_points.append(_points(delta))

    try:
        _stream(module, emitter, collect)
    finally:
        meter.shutdown()
        tracer.shutdown()
    return cumulative_points, delta_points


def test_summed_counters_export_what_the_synchronous_ones_did(baseline: ModuleType) -> None:
    """Every collection, cumulative and delta, holds the same points (same series, values and value types)."""
    before_cumulative, before_delta = _run(baseline)
    after_cumulative, after_delta = _run(current)
    assert len(after_cumulative) == len(before_cumulative) == 9
    names = {point[0] for point in before_cumulative[-1]}
    assert {n.METRIC_SCORE_SQUARES, n.METRIC_EVALUATIONS, n.METRIC_VERDICTS, n.METRIC_JUDGE_COST,
            n.METRIC_CASCADE_SUMS} <= names  # the stream reaches every summed counter
    for before, after in zip(before_cumulative, after_cumulative, strict=True):
        assert after == before
    for before, after in zip(before_delta, after_delta, strict=True):
        assert after == before


def test_a_second_emitter_on_the_same_meter_adds_into_the_same_counters() -> None:
    """The SDK keeps the first observable counter's callbacks: both emitters' evaluations must still count."""
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader])
    try:
        emitters = [current.Emitter(tracer_provider=TracerProvider(), meter_provider=meter, logger_provider=None,
                                    queue_depth=lambda: 0, options=Settings(capture_content=False)) for _ in range(2)]
        labels = {n.GEN_AI_DATA_SOURCE_ID: "kb", n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME, n.STAGE: "retrieval"}
        for emitter in emitters:
            emitter.count(n.OUTCOME_DROPPED, "queue_full", labels)
        values = [point[3] for point in _points(reader) if point[0] == n.METRIC_EVALUATIONS]
        assert values == [2]
    finally:
        meter.shutdown()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_starts_its_own_sums() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader])
    emitter = current.Emitter(tracer_provider=TracerProvider(), meter_provider=meter, logger_provider=None,
                              queue_depth=lambda: 0, options=Settings(capture_content=False))
    labels = {n.GEN_AI_DATA_SOURCE_ID: "kb", n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME, n.STAGE: "retrieval"}
    emitter.count(n.OUTCOME_DROPPED, "queue_full", labels)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's count is not its own; its own counts start from zero
        try:
            os.close(read)
            emitter.count(n.OUTCOME_DROPPED, "queue_full", labels)
            values = [point[3] for point in _points(reader) if point[0] == n.METRIC_EVALUATIONS]
            os.write(write, repr(values).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    try:
        assert child == "[1]"
        parent = [point[3] for point in _points(reader) if point[0] == n.METRIC_EVALUATIONS]
        assert parent == [1]
    finally:
        meter.shutdown()


def test_past_the_bound_further_attribute_sets_add_into_the_overflow_set() -> None:
    """No count is lost: the sets past ``MAX_SERIES`` add into ``otel.metric.overflow``, the rest stay apart."""
    from cp_observe._emission._sums import MAX_SERIES

    try:  # the SDK's own limit (2,000 attribute sets) raised above ours, so ours is what shows
        reader = InMemoryMetricReader(cardinality_limits={ObservableCounter: 2 * MAX_SERIES})
    except TypeError:  # an SDK before 1.45.2 has no cardinality limit
        reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader])
    try:
        emitter = current.Emitter(tracer_provider=TracerProvider(), meter_provider=meter, logger_provider=None,
                                  queue_depth=lambda: 0, options=Settings(capture_content=False))
        for i in range(MAX_SERIES + 10):
            labels = {n.GEN_AI_DATA_SOURCE_ID: f"kb{i}", n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME,
                      n.STAGE: "retrieval"}
            emitter.count(n.OUTCOME_DROPPED, "queue_full", labels)
            if i == 0:
                emitter.count(n.OUTCOME_DROPPED, "queue_full", labels)  # a known set still adds to itself
        points = {point[1]: point[3] for point in _points(reader) if point[0] == n.METRIC_EVALUATIONS}
        overflow = frozenset({(n.OTEL_METRIC_OVERFLOW, True)})
        assert len(points) == MAX_SERIES + 1
        assert points[overflow] == 10
        assert sum(points.values()) == MAX_SERIES + 11
        first = frozenset({(n.GEN_AI_DATA_SOURCE_ID, "kb0"), (n.GEN_AI_EVALUATION_NAME, n.EVALUATION_NAME),
                           (n.STAGE, "retrieval"), (n.OUTCOME, n.OUTCOME_DROPPED), (n.REASON, "queue_full")})
        assert points[first] == 2
    finally:
        meter.shutdown()
