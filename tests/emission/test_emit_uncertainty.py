"""What the alert rules' uncertainty needs from emission: squares counter, exemplars, judge identity, OpenMetrics."""

from __future__ import annotations

import math
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Histogram, InMemoryMetricReader, Sum
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest as generate_text
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from cp_observe import _names as n
from cp_observe._config._settings import Settings
from cp_observe._emission._emit import Emitter, Target
from cp_observe._emission._exemplars import ExemplarPrometheusReader
from cp_observe._judging._identity import JudgeIdentity, judge_identity
from cp_observe._judging._lexical import LexicalJudge
from cp_observe._types import ScoreResult, Usage, Verdict

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C


class _Rig:
    """An Emitter wired to in-memory span, log and metric readers (and optionally a Prometheus reader)."""

    def __init__(self, judge: Any = None, *, prometheus: bool = False, max_exemplars: int = 10_000) -> None:
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.logs = InMemoryLogRecordExporter()
        logger_provider = LoggerProvider()
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))
        self.reader = InMemoryMetricReader()
        self.registry = CollectorRegistry()
        readers: list[Any] = [self.reader]
        if prometheus:
            self.prometheus = ExemplarPrometheusReader(registry=self.registry, max_exemplars=max_exemplars)
            readers.append(self.prometheus)
        self.emitter = Emitter(tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=readers),
                               logger_provider=logger_provider, queue_depth=lambda: 0,
                               options=Settings(capture_content=False), judge=judge)  # fmt: skip

    def score(self, ap: float, *, span_id: int = 2, model: str = "lexical") -> None:
        target = Target(
            span_context=SpanContext(TRACE_ID, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)),
            data_source="docs", agent_name=None, reference="output", sampling_reason="ratio",
        )  # fmt: skip
        verdicts = (Verdict(0, ap > 0), Verdict(1, False))
        result = ScoreResult(score=ap, reason="", verdicts=verdicts, average_precision=ap, judge_model=model,
                             reference="output", usage=Usage(calls=1), cost_usd=0.0)  # fmt: skip
        self.emitter.scored(target, result, start_ns=0, end_ns=1_000, model=model)

    def metric(self, name: str) -> Any:
        data = self.reader.get_metrics_data()
        assert data is not None
        return next(m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics if m.name == name)


def test_squares_counter_gives_the_exact_window_variance() -> None:
    """sum, count and the squares counter reproduce the scores' variance exactly, with the histogram's labels."""
    rig = _Rig(LexicalJudge())
    scores = [1.0, 0.0, 0.5, 1.0, 0.25]
    for ap in scores:
        rig.score(ap)
    (hist,) = rig.metric(n.METRIC_SCORE).data.data_points
    squares = rig.metric(n.METRIC_SCORE_SQUARES)
    assert isinstance(squares.data, Sum) and squares.data.is_monotonic
    (point,) = squares.data.data_points
    assert dict(point.attributes) == dict(hist.attributes)
    mean = hist.sum / hist.count
    variance = point.value / hist.count - mean**2
    expected = sum((s - mean) ** 2 for s in scores) / len(scores)
    assert math.isclose(variance, expected)


def test_score_carries_an_exemplar_of_the_evaluation_span() -> None:
    """The score histogram's exemplar has the evaluated trace's id and the evaluation span's id."""
    rig = _Rig(LexicalJudge())
    rig.score(0.25)
    (span,) = rig.spans.get_finished_spans()
    metric = rig.metric(n.METRIC_SCORE)
    assert isinstance(metric.data, Histogram)
    (exemplar,) = metric.data.data_points[0].exemplars
    assert exemplar.trace_id == TRACE_ID == span.context.trace_id
    assert exemplar.span_id == span.context.span_id
    assert exemplar.value == 0.25


@pytest.mark.parametrize(
    ("judge", "kind", "prompt"),
    [
        (LexicalJudge(), n.JUDGE_KIND_LEXICAL, "none"),
        (type("Mine", (), {"model": "m"})(), n.JUDGE_KIND_CUSTOM, "none"),
        (type("Declared", (), {"model": "m", "kind": "rules", "prompt_version": "v7"})(), "rules", "v7"),
    ],
    ids=["lexical", "custom", "declared"],
)
def test_judge_identity_on_span_event_and_metric(judge: Any, kind: str, prompt: str) -> None:
    """Model, prompt version and kind are on the evaluation span, the evaluation event and the score series."""
    rig = _Rig(judge)
    rig.score(0.5, model="judge-model")
    expected = {n.CP_JUDGE_MODEL: "judge-model", n.CP_JUDGE_PROMPT_VERSION: prompt, n.CP_JUDGE_KIND: kind}
    (span,) = rig.spans.get_finished_spans()
    assert {k: span.attributes[k] for k in expected} == expected  # type: ignore[index]
    (record,) = rig.logs.get_finished_logs()
    assert {k: record.log_record.attributes[k] for k in expected} == expected  # type: ignore[index]
    (point,) = rig.metric(n.METRIC_SCORE).data.data_points
    assert {k: point.attributes[k] for k in expected} == expected
    (outcome,) = rig.metric(n.METRIC_EVALUATIONS).data.data_points
    assert n.CP_JUDGE_KIND not in outcome.attributes  # outcome counters keep their label set


def test_llm_judge_identity_names_the_prompt_version() -> None:
    """cp-observe's LLM judge is kind llm with the shipped prompt version."""
    from cp_observe._judging._llm_judge import LLMJudge
    from cp_observe._judging._prompt import PROMPT_VERSION

    assert judge_identity(LLMJudge("openai/judge")) == JudgeIdentity(n.JUDGE_KIND_LLM, PROMPT_VERSION, n.ANNOTATOR_LLM)


def test_a_failing_judge_property_does_not_stop_the_evaluation() -> None:
    """A user's judge whose kind property raises is recorded as custom."""

    class Broken:
        model = "m"

        @property
        def kind(self) -> str:
            raise RuntimeError("boom")

    assert judge_identity(Broken()) == JudgeIdentity(n.JUDGE_KIND_CUSTOM, "none")


def test_openmetrics_exposition_puts_the_exemplar_on_its_bucket() -> None:
    """OpenMetrics shows the trace exemplar on the bucket holding the score, every scrape; plain text has none."""
    rig = _Rig(LexicalJudge(), prometheus=True)
    rig.score(0.25, span_id=0x1234)
    (span,) = rig.spans.get_finished_spans()
    for _ in range(2):  # the SDK empties its reservoir per collection; the reader remembers
        text = generate_openmetrics(rig.registry).decode()
        lines = [line for line in text.splitlines() if "# {" in line]
        assert len(lines) == 1, text
        exemplar = f'# {{span_id="{span.context.span_id:016x}",trace_id="{TRACE_ID:032x}"}} 0.25 '
        assert 'le="0.3"' in lines[0] and f"}} 1.0 {exemplar}" in lines[0], lines[0]
    assert "trace_id" not in generate_text(rig.registry).decode()


def test_exemplar_memory_is_bounded_and_counts_what_it_drops() -> None:
    """Beyond max_exemplars new buckets go without an exemplar, counted in dropped."""
    rig = _Rig(LexicalJudge(), prometheus=True, max_exemplars=1)
    rig.score(0.05)
    rig.score(0.95)
    text = generate_openmetrics(rig.registry).decode()
    assert len([line for line in text.splitlines() if "# {" in line]) == 1
    assert rig.prometheus.dropped == 1


def test_a_failure_in_exemplar_handling_still_serves_the_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """If putting exemplars back fails, the scrape still returns every series, without exemplars."""
    rig = _Rig(LexicalJudge(), prometheus=True)
    rig.score(0.25)

    def broken(*_: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(rig.prometheus, "_with_exemplars", broken)
    monkeypatch.setattr(rig.prometheus, "_remember", broken)
    text = generate_openmetrics(rig.registry).decode()
    assert "context_precision_score_count{" in text and "# {" not in text


def test_an_exporter_without_the_expected_collector_still_serves_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the exporter's private collector has no ``collect`` to wrap, the reader serves plain metrics."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    class Opaque:
        """Stands for a changed exporter internals: it forwards data but has no ``collect``.

        It is equal to the collector it wraps, the one registered, so the reader's shutdown unregisters it.
        """

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def add_metrics_data(self, data: Any) -> None:
            self.inner.add_metrics_data(data)

        def __eq__(self, other: object) -> bool:
            return other is self or other is self.inner

        def __hash__(self) -> int:
            return hash(self.inner)

    original = PrometheusMetricReader.__init__

    def opaque_collector(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._collector = Opaque(self._collector)

    monkeypatch.setattr(PrometheusMetricReader, "__init__", opaque_collector)
    rig = _Rig(LexicalJudge(), prometheus=True)
    rig.score(0.25)
    text = generate_openmetrics(rig.registry).decode()
    assert "context_precision_score_count{" in text and "# {" not in text
