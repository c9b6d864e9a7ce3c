"""The emitter's reused metric attribute sets: counts stay exact per series, the cache stays bounded.

``Emitter.series`` builds the metric attribute dicts of one label set and judge model once and reuses them;
these tests read the metrics back from a real SDK reader: series that share labels add up, series that do
not stay apart, and more label sets than the cache holds are all still counted exactly.
"""

from __future__ import annotations

from typing import Any

from opentelemetry._logs import NoOpLoggerProvider
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags

from cp_observe import _names as n
from cp_observe._config._settings import Settings
from cp_observe._emission._emit import _MAX_SERIES, Emitter, Target
from cp_observe._types import ScoreResult, Usage, Verdict


def _emitter(logger_provider: Any = None) -> tuple[Emitter, InMemoryMetricReader, InMemorySpanExporter]:
    reader = InMemoryMetricReader()
    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    emitter = Emitter(tracer_provider=tracer, meter_provider=MeterProvider(metric_readers=[reader]),
                      logger_provider=logger_provider or LoggerProvider(), queue_depth=lambda: 0,
                      options=Settings(capture_content=True))
    return emitter, reader, spans


def _score(emitter: Emitter, source: str, verdicts: tuple[bool, ...], i: int = 0) -> None:
    ctx = SpanContext(trace_id=i + 1, span_id=i + 1, is_remote=False, trace_flags=TraceFlags(1))
    target = Target(span_context=ctx, data_source=source, agent_name=None, reference="output",
                    sampling_reason="ratio")
    result = ScoreResult(score=0.5, reason="r", verdicts=tuple(Verdict(k, v, "x") for k, v in enumerate(verdicts)),
                         average_precision=0.5, judge_model="m", reference="output", usage=Usage(1, 10, 5),
                         cost_usd=0.25)
    emitter.scored(target, result, start_ns=1, end_ns=2, model="m")


def _points(reader: InMemoryMetricReader, name: str) -> dict[frozenset[tuple[str, Any]], float]:
    out: dict[frozenset[tuple[str, Any]], float] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        out[frozenset((point.attributes or {}).items())] = value if value is not None else point.count
    return out


def test_series_add_up_and_stay_apart() -> None:
    """Two evaluations of one source share a series; another source has its own; verdicts split by relevance."""
    emitter, reader, spans = _emitter()
    _score(emitter, "kb", (True, False, True))
    _score(emitter, "kb", (False, False, True), 1)
    _score(emitter, "faq", (True,), 2)
    evaluations = _points(reader, n.METRIC_EVALUATIONS)
    kb = {n.GEN_AI_DATA_SOURCE_ID: "kb", n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME, n.STAGE: n.STAGE_RETRIEVAL,
          n.OUTCOME: n.OUTCOME_SCORED, n.REASON: "ok"}
    assert evaluations[frozenset(kb.items())] == 2
    assert evaluations[frozenset({**kb, n.GEN_AI_DATA_SOURCE_ID: "faq"}.items())] == 1
    verdicts = _points(reader, n.METRIC_VERDICTS)
    base = {n.GEN_AI_DATA_SOURCE_ID: "kb", n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME, n.STAGE: n.STAGE_RETRIEVAL}
    assert verdicts[frozenset({**base, n.RELEVANT: "true"}.items())] == 3
    assert verdicts[frozenset({**base, n.RELEVANT: "false"}.items())] == 3
    assert sum(_points(reader, n.METRIC_JUDGE_COST).values()) == 0.75
    assert len(spans.get_finished_spans()) == 3
    # The reused dicts were never changed by what was recorded with them.
    assert dict(emitter.series(base, "m").scored) == kb


def test_more_label_sets_than_the_cache_holds_are_all_counted() -> None:
    """Past the bound the oldest series is rebuilt on use; no evaluation goes uncounted."""
    emitter, reader, _ = _emitter()
    sources = [f"source-{i}" for i in range(_MAX_SERIES + 20)]
    for i, source in enumerate(sources):
        _score(emitter, source, (True,), i)
    _score(emitter, sources[0], (True,), 0)  # evicted long ago: rebuilt, still the same series
    evaluations = _points(reader, n.METRIC_EVALUATIONS)
    assert sum(evaluations.values()) == len(sources) + 1
    first = {n.GEN_AI_DATA_SOURCE_ID: sources[0], n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME,
             n.STAGE: n.STAGE_RETRIEVAL,
             n.OUTCOME: n.OUTCOME_SCORED, n.REASON: "ok"}
    assert evaluations[frozenset(first.items())] == 2


def test_no_log_record_is_built_for_a_no_op_logger_provider() -> None:
    """With a no-op log pipeline the span and the metrics are still emitted."""
    emitter, reader, spans = _emitter(NoOpLoggerProvider())
    _score(emitter, "kb", (True, False))
    assert len(spans.get_finished_spans()) == 1
    assert sum(_points(reader, n.METRIC_EVALUATIONS).values()) == 1
