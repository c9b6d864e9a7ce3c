"""Evaluation sinks: bounded, batched, asynchronous, retried with backoff, counted; wired from configure and serve.

The runner is exercised through sinks written here against the public ``Sink`` protocol (a sink is user code
the runner must survive); the Phoenix sink against a real Phoenix lives in ``test_phoenix_sink.py``.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import cp_observe
from cp_observe import _names as n
from cp_observe._config._settings import Settings
from cp_observe._emission._phoenix import PhoenixSink, document_annotations, span_annotation
from cp_observe._emission._sinks import Delivery, EvaluationRecord, SinkRunner, recorded_documents
from cp_observe._judging._identity import judge_identity
from cp_observe._wiring._providers import sinks_from_settings
from cp_observe.testing import FakeJudge, ProcessorProbe
from tests.conftest import Otel
from tests.turn_support import Turn

DOCS = ["Paris is the capital of France.", "Bananas are yellow.", "France is in Europe."]


def _record(span_id: int = 0x1234, *, verdicts: tuple[bool, ...] = (True, False), documents: int = 2,
            reasons: tuple[str, ...] | None = ("on topic", "off topic")) -> EvaluationRecord:
    return EvaluationRecord(
        trace_id=0xABC, span_id=span_id, evaluation_span_id=0x5678, score=1.0, label="pass", explanation="why",
        average_precision=1.0, verdicts=verdicts, reasons=reasons, documents=documents, judge_model="m",
        annotator_kind="LLM", prompt_version="cp-2", data_source="kb", agent_name="helper", reference="output",
    )


class ScriptedSink:
    """Answers each record with the next delivery of its script (then SENT); records every batch it was given."""

    def __init__(self, script: Sequence[Delivery] = (), *, raises: int = 0) -> None:
        self.script = list(script)
        self.raises = raises
        self.batches: list[list[EvaluationRecord]] = []
        self.times: list[float] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    @property
    def name(self) -> str:
        return "scripted"

    def send(self, records: Sequence[EvaluationRecord]) -> list[Delivery]:
        self.entered.set()
        self.gate.wait(30)
        self.batches.append(list(records))
        self.times.append(time.monotonic())
        if self.raises:
            self.raises -= 1
            raise ConnectionError("scripted failure")
        return [self.script.pop(0) if self.script else Delivery.SENT for _ in records]


def _counts(reader: InMemoryMetricReader) -> dict[tuple[str, str], int]:
    """{(metric, reason or ''): value} of the context_precision.sink.* counters."""
    out: dict[tuple[str, str], int] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for scope in rm.scope_metrics:
            for metric in scope.metrics:
                if metric.name.startswith("context_precision.sink."):
                    for point in metric.data.data_points:
                        assert point.attributes[n.SINK] in {"scripted", n.SINK_PHOENIX}
                        key = (metric.name, str(point.attributes.get(n.REASON, "")))
                        out[key] = out.get(key, 0) + int(point.value)
    return out


def _runner(sink: Any, reader: InMemoryMetricReader, *, queue_size: int = 1000, batch_size: int = 100,
            max_retries: int = 5, **kwargs: Any) -> SinkRunner:
    options = Settings(sink_queue_size=queue_size, sink_batch_size=batch_size, sink_max_retries=max_retries)
    timing: dict[str, Any] = {"backoff_s": 0.01, "max_backoff_s": 0.05, **kwargs}
    return SinkRunner(sink, meter_provider=MeterProvider(metric_readers=[reader]), options=options, **timing)


def test_records_are_sent_in_bounded_batches_and_counted() -> None:
    """250 records go out in batches of at most 100, all counted sent by sink."""
    reader, sink = InMemoryMetricReader(), ScriptedSink()
    runner = _runner(sink, reader, batch_size=100)
    for i in range(250):
        assert runner.offer(_record(i + 1))
    assert runner.flush(30)
    assert max(len(b) for b in sink.batches) <= 100
    assert sorted(r.span_id for b in sink.batches for r in b) == list(range(1, 251))
    assert runner.stats() == {"offered": 250, "sent": 250, "failed": 0, "dropped": 0, "pending": 0}
    assert _counts(reader) == {(n.SINK_METRIC_SENT, ""): 250}
    runner.shutdown()


def test_a_full_queue_drops_and_counts_without_waiting_for_the_sink() -> None:
    """With the sink stuck, offers beyond queue_size return False at once and are counted dropped/queue_full."""
    reader, sink = InMemoryMetricReader(), ScriptedSink()
    sink.gate.clear()
    runner = _runner(sink, reader, queue_size=5, batch_size=2)
    accepted = [runner.offer(_record(i + 1)) for i in range(12)]
    assert sink.entered.wait(10)
    assert accepted.count(True) == 5 and accepted[:5] == [True] * 5
    sink.gate.set()
    assert runner.flush(30)
    assert runner.stats() == {"offered": 12, "sent": 5, "failed": 0, "dropped": 7, "pending": 0}
    assert _counts(reader) == {(n.SINK_METRIC_SENT, ""): 5, (n.SINK_METRIC_DROPPED, "queue_full"): 7}
    runner.shutdown()


def test_transient_failures_are_retried_until_sent() -> None:
    """Two RETRY answers, then success: three attempts of the same record, counted sent once."""
    reader, sink = InMemoryMetricReader(), ScriptedSink([Delivery.RETRY, Delivery.RETRY])
    runner = _runner(sink, reader, max_retries=5)
    runner.offer(_record())
    assert runner.flush(30)
    assert [len(b) for b in sink.batches] == [1, 1, 1]
    assert runner.stats()["sent"] == 1 and runner.stats()["failed"] == 0
    runner.shutdown()


def test_a_retry_waits_without_holding_up_new_records() -> None:
    """While one record backs off, a record offered later is sent before the retry."""
    reader, sink = InMemoryMetricReader(), ScriptedSink([Delivery.RETRY])
    runner = _runner(sink, reader, backoff_s=2.0, max_backoff_s=2.0)
    runner.offer(_record(1))
    while len(sink.batches) < 1:
        sink.entered.wait(1)
    runner.offer(_record(2))
    assert runner.flush(30)
    assert [[r.span_id for r in b] for b in sink.batches] == [[1], [2], [1]]
    runner.shutdown()


def test_a_failing_destination_pauses_the_whole_sink() -> None:
    """A batch answered UNAVAILABLE (Phoenix down): nothing is sent until the backoff passes, then all goes together."""
    reader, sink = InMemoryMetricReader(), ScriptedSink([Delivery.UNAVAILABLE])
    runner = _runner(sink, reader, backoff_s=1.0, max_backoff_s=1.0)
    runner.offer(_record(1))
    assert runner.flush(0.1) is False  # the flush sends record 1 at once; it fails as a whole
    deadline = time.monotonic() + 10
    while runner._outages == 0 and time.monotonic() < deadline:  # settled: the sink is paused
        time.sleep(0.01)
    assert [[r.span_id for r in b] for b in sink.batches] == [[1]]
    runner.offer(_record(2))
    assert runner.flush(30)
    assert sorted(r.span_id for b in sink.batches[1:] for r in b) == [1, 2]
    assert sink.times[1] - sink.times[0] >= 0.5  # the pause is at least half the backoff (jitter 0.5-1)
    assert runner.stats()["sent"] == 2
    runner.shutdown()


def test_retries_are_bounded_then_counted_failed() -> None:
    """A record that always needs a retry is tried 1 + max_retries times, then counted failed/retries_exhausted."""
    reader, sink = InMemoryMetricReader(), ScriptedSink([Delivery.RETRY] * 10)
    runner = _runner(sink, reader, max_retries=2)
    runner.offer(_record())
    assert runner.flush(30)
    assert len(sink.batches) == 3
    assert _counts(reader) == {(n.SINK_METRIC_FAILED, "retries_exhausted"): 1}
    runner.shutdown()


def test_a_refusal_is_not_retried() -> None:
    """REFUSED (a 422, say) is counted failed/refused after one attempt."""
    reader, sink = InMemoryMetricReader(), ScriptedSink([Delivery.REFUSED])
    runner = _runner(sink, reader)
    runner.offer(_record())
    assert runner.flush(30)
    assert len(sink.batches) == 1
    assert _counts(reader) == {(n.SINK_METRIC_FAILED, "refused"): 1}
    runner.shutdown()


def test_a_sink_that_raises_is_retried_and_never_stops_the_runner() -> None:
    """An exception from send means: retry the batch; the thread keeps serving later records."""
    reader, sink = InMemoryMetricReader(), ScriptedSink(raises=1)
    runner = _runner(sink, reader)
    runner.offer(_record(1))
    assert runner.flush(30)
    runner.offer(_record(2))
    assert runner.flush(30)
    assert runner.stats() == {"offered": 2, "sent": 2, "failed": 0, "dropped": 0, "pending": 0}
    runner.shutdown()


def test_shutdown_counts_what_it_could_not_send_as_dropped() -> None:
    """A stuck sink: shutdown returns within its timeout; offered == sent + failed + dropped; later offers drop."""
    reader, sink = InMemoryMetricReader(), ScriptedSink()
    sink.gate.clear()
    runner = _runner(sink, reader, batch_size=1)
    for i in range(4):
        runner.offer(_record(i + 1))
    assert sink.entered.wait(10)
    runner.shutdown(0.2)
    assert not runner.offer(_record(9))
    sink.gate.set()
    assert runner.flush(10)
    stats = runner.stats()
    assert stats["offered"] == stats["sent"] + stats["failed"] + stats["dropped"] == 5
    assert _counts(reader)[(n.SINK_METRIC_DROPPED, "shutdown")] == stats["dropped"] >= 4


def test_processor_offers_each_scored_evaluation_to_its_sinks(otel: Otel, cp_observe_judge: FakeJudge,
                                                             turn: Turn) -> None:
    """The record names the retrieval span and its evaluation span, with verdicts, reasons and recorded documents."""
    sink = ScriptedSink()
    processor = otel.processor(cp_observe_judge, sinks=[sink])
    assert turn.run() == turn.answer
    assert processor.force_flush(30_000)
    [retrieval] = otel.by_name("retrieval kb")
    [evaluation] = otel.by_name(n.EVALUATION_SPAN_NAME)
    [[record]] = sink.batches
    attributes = evaluation.attributes or {}
    assert record.span_id == retrieval.context.span_id and record.trace_id == retrieval.context.trace_id
    assert record.evaluation_span_id == evaluation.context.span_id
    assert record.score == attributes[n.GEN_AI_EVALUATION_SCORE_VALUE]
    assert record.label == attributes[n.GEN_AI_EVALUATION_SCORE_LABEL]
    assert record.explanation == attributes[n.GEN_AI_EVALUATION_EXPLANATION]
    assert record.verdicts == tuple(attributes[n.CP_VERDICTS])  # type: ignore[arg-type]
    assert record.reasons == tuple(attributes[n.CP_REASONS])  # type: ignore[arg-type]
    assert record.documents == len(turn.docs) == recorded_documents(retrieval.attributes)
    assert (record.annotator_kind, record.prompt_version, record.judge_model) == ("CODE", None, "fake-judge")
    assert (record.data_source, record.agent_name, record.reference) == ("kb", "helper", "output")
    assert processor.sink_stats() == {"scripted": {"offered": 1, "sent": 1, "failed": 0, "dropped": 0, "pending": 0}}


def test_with_capture_off_the_record_has_no_reasons_and_no_documents(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Capture off: no per-context reasons leave the process, and no document is recorded to annotate."""
    otel.runtime.install(capture_content=False)
    sink = ScriptedSink()
    processor = otel.processor(cp_observe_judge, sinks=[sink], capture_content=False)

    @cp_observe.retriever(name="kb")
    def search(query: str) -> list[str]:
        return DOCS

    search("What is the capital of France?")
    assert processor.force_flush(30_000)
    [[record]] = sink.batches
    assert record.reasons is None and record.documents == 0 and len(record.verdicts) == len(DOCS)
    assert document_annotations(record) == []
    assert "Paris" not in str(span_annotation(record))


def test_a_sink_never_changes_what_the_host_sees(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Phoenix down (nothing listens): the host's results and the evaluation are unchanged; the sink counts failures."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    processor = otel.processor(cp_observe_judge, sinks=[PhoenixSink(f"http://127.0.0.1:{closed}", timeout_s=1)],
                               sink_max_retries=1, shutdown_timeout_s=10)

    @cp_observe.retriever(name="kb")
    def search(query: str) -> list[str]:
        return DOCS

    results = [search(f"question {i} about France") for i in range(3)]
    assert results == [DOCS] * 3
    assert processor.force_flush(30_000)  # tries each evaluation once; does not wait out the retries' backoff
    assert processor.stats()["scored"] == 3
    assert len(otel.by_name(n.EVALUATION_SPAN_NAME)) == 3
    assert processor.sink_stats()[n.SINK_PHOENIX]["sent"] == 0
    processor.shutdown()  # drains the retries within its timeout
    assert processor.sink_stats()[n.SINK_PHOENIX] == {"offered": 3, "sent": 0, "failed": 3, "dropped": 0, "pending": 0}
    assert _counts(otel.metrics) == {(n.SINK_METRIC_FAILED, "retries_exhausted"): 3}


def test_force_flush_tries_each_evaluation_once_without_waiting_out_retries(
    otel: Otel, cp_observe_judge: FakeJudge
) -> None:
    """A host that flushes never waits for a failing sink's backoff: the retries stay pending on the sink's thread."""
    sink = ScriptedSink([Delivery.UNAVAILABLE] * 3)
    processor = otel.processor(cp_observe_judge, sinks=[sink], sink_max_retries=5)

    @cp_observe.retriever(name="kb")
    def search(query: str) -> list[str]:
        return DOCS

    search("What is the capital of France?")
    assert processor.force_flush(30_000)
    assert len(sink.batches) == 1
    assert processor.sink_stats()["scripted"]["pending"] == 1
    [runner] = ProcessorProbe(processor).sinks
    assert runner.flush(30)  # the runner's own flush waits for the retries
    assert processor.sink_stats()["scripted"] == {"offered": 1, "sent": 1, "failed": 0, "dropped": 0, "pending": 0}


def test_phoenix_payloads_follow_the_recorded_documents() -> None:
    """Span annotation: fixed identifier, metadata; document annotations: only recorded positions, 1/0 scores."""
    record = _record(verdicts=(True, False, True), documents=2, reasons=("a", "b", "c"))
    span = span_annotation(record)
    assert span["span_id"] == "0000000000001234" and span["identifier"] == n.PHOENIX_ANNOTATION_IDENTIFIER
    assert span["name"] == n.EVALUATION_NAME and span["annotator_kind"] == "LLM"
    assert span["result"] == {"score": 1.0, "label": "pass", "explanation": "why"}
    assert span["metadata"]["evaluation_span_id"] == "0000000000005678"
    assert (span["metadata"]["judge_model"], span["metadata"]["prompt_version"]) == ("m", "cp-2")
    documents = document_annotations(record)
    assert [d["document_position"] for d in documents] == [0, 1]
    assert [d["result"] for d in documents] == [
        {"score": 1.0, "label": n.LABEL_RELEVANT, "explanation": "a"},
        {"score": 0.0, "label": n.LABEL_IRRELEVANT, "explanation": "b"},
    ]
    assert all("identifier" not in d for d in documents)  # Phoenix refuses identifiers on document annotations


def test_annotator_kind_is_llm_for_llm_judges_only() -> None:
    """LLMJudge -> LLM with the prompt version; the lexical judge and plain user judges -> CODE; a judge may declare."""
    def annotator(judge: object) -> tuple[str, str | None]:
        identity = judge_identity(judge)
        return identity.annotator, identity.declared_prompt_version

    assert annotator(cp_observe.LLMJudge("openai/x")) == ("LLM", "cp-3")
    assert annotator(cp_observe.LexicalJudge()) == ("CODE", None)
    assert annotator(FakeJudge()) == ("CODE", None)
    declared = FakeJudge()
    declared.annotator_kind = "LLM"  # type: ignore[attr-defined]
    declared.prompt_version = "mine-1"  # type: ignore[attr-defined]
    assert annotator(declared) == ("LLM", "mine-1")


def test_phoenix_url_and_key_come_from_settings_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """CP_OBSERVE_PHOENIX_URL sets the sink up; the key falls back to PHOENIX_API_KEY and never shows in repr."""
    assert sinks_from_settings(Settings.resolve({}, environ={})) == []
    monkeypatch.setenv("PHOENIX_API_KEY", "px-secret-key")
    settings = Settings.resolve({}, environ={"CP_OBSERVE_PHOENIX_URL": "http://127.0.0.1:6006/"})
    [sink] = sinks_from_settings(settings)
    assert isinstance(sink, PhoenixSink) and sink.url == "http://127.0.0.1:6006"
    assert sink._headers["Authorization"] == "Bearer px-secret-key"
    explicit = Settings.resolve({"phoenix_api_key": "cp-secret-key", "phoenix_url": "https://phoenix.example"})
    [sink] = sinks_from_settings(explicit)
    assert sink._headers["Authorization"] == "Bearer cp-secret-key"
    assert "cp-secret-key" not in repr(explicit)
    with pytest.raises(cp_observe.ConfigurationError):
        Settings.resolve({"phoenix_url": "127.0.0.1:6006"})


def test_serve_takes_phoenix_url_and_sink_flags() -> None:
    """``cp-observe serve --phoenix-url ... --sink-queue-size ...``: the service's processor posts to Phoenix."""
    from cp_observe.serve import ScorerService, ServeSettings
    from cp_observe.serve._cli import add_arguments
    from cp_observe.serve._settings import SERVE_FIELDS

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--phoenix-url", "http://127.0.0.1:6006", "--sink-queue-size", "7"])
    settings = ServeSettings.resolve({name: getattr(args, name) for name in SERVE_FIELDS}, environ={})
    service = ScorerService(settings, judge=cp_observe.LexicalJudge())
    try:
        [runner] = ProcessorProbe(service.processor).sinks
        assert isinstance(runner.sink, PhoenixSink) and runner.queue_size == 7
        assert runner.sink.url == "http://127.0.0.1:6006"
    finally:
        service.processor.shutdown()
        for provider in (service.tracer_provider, service.logger_provider, service.meter_provider):
            provider.shutdown()


def test_configure_sets_up_the_phoenix_sink_and_your_own(otel: Otel, caplog: pytest.LogCaptureFixture) -> None:
    """``configure(phoenix_url=..., sinks=[...])``: both sinks on the processor; capture-only says they are ignored."""
    mine = ScriptedSink()
    processor = cp_observe.configure(
        "lexical", phoenix_url="http://127.0.0.1:6006", sinks=[mine], sink_queue_size=42,
        tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, logger_provider=otel.logger_provider,
    )
    assert processor is not None
    try:
        runners = ProcessorProbe(processor).sinks
        assert [type(r.sink) for r in runners] == [PhoenixSink, ScriptedSink]
        assert {r.queue_size for r in runners} == {42}
    finally:
        processor.shutdown()
    caplog.set_level("WARNING")
    assert cp_observe.configure("lexical", phoenix_url="http://127.0.0.1:6006", capture_only=True,
                                tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider,
                                logger_provider=otel.logger_provider) is None
    assert any("sinks ignored in capture-only mode" in r.getMessage() for r in caplog.records)
