"""The Phoenix sink against a real Arize Phoenix 20.26.1 on loopback, read back through its REST and GraphQL APIs.

The demo runs as a user runs it (a subprocess, ``--otlp`` at Phoenix, ``CP_OBSERVE_PHOENIX_URL`` set, an LLM
judge served by the loopback ``JudgeServer`` through litellm), its spans going to a project named by
``openinference.project.name``. Then: each scored retrieval span carries exactly one ``context_precision`` span
annotation equal to its evaluation span; each judged document its ``relevance`` annotation; Phoenix computes its
retrieval metrics; re-sending duplicates nothing; refusals (422, unknown spans) and 5xx replies (through a failing
loopback gateway in front of it) are retried or counted; and the metrics and
logs endpoints Phoenix does not have are refused once, quietly.

Needs ``.venv-phoenix`` (``scripts/install-phoenix.sh``); without it the module is skipped.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, PeriodicExportingMetricReader

from cp_observe import _names as n
from cp_observe._config._settings import Settings
from cp_observe._emission._phoenix import PhoenixSink
from cp_observe._emission._quiet_export import QuietLogExporter, QuietMetricExporter
from cp_observe._emission._sinks import Delivery, EvaluationRecord, SinkRunner
from cp_observe._judging._prompt import PROMPT_VERSION
from cp_observe.testing import JudgeServer, ProcessorProbe
from tests.otlp_receiver import OtlpReceiver
from tests.phoenix_support import INSTALL_HINT, PHOENIX_EXECUTABLE, PhoenixServer

pytestmark = [
    pytest.mark.skipif(not PHOENIX_EXECUTABLE.exists(), reason=INSTALL_HINT),
    # The first test sets up Phoenix (90 s startup deadline) and the demo run into it (240 s), then waits 30 s.
    pytest.mark.timeout(600),
]

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "cp-observe-demo-phoenix"
TURNS = 4
JUDGE_MODEL = "openai/judge-test"

_DOCUMENTS_QUERY = """
query ($spanId: String!) {
  getSpanByOtelId(spanId: $spanId) {
    numDocuments
    documentEvaluations { name score label explanation documentPosition annotatorKind }
    documentRetrievalMetrics { evaluationName ndcg precision hit }
  }
}"""


@dataclass
class DemoRun:
    """The demo's finished process and what Phoenix holds for its project."""

    process: subprocess.CompletedProcess[str]
    server: PhoenixServer
    spans: list[dict[str, Any]]

    def named(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"] == name]

    def by_id(self, span_id: str) -> dict[str, Any]:
        [span] = [s for s in self.spans if s["context"]["span_id"] == span_id]
        return span

    @property
    def evaluations(self) -> list[dict[str, Any]]:
        return self.named(n.EVALUATION_SPAN_NAME)


@pytest.fixture(scope="module")
def demo(phoenix: PhoenixServer) -> Iterator[DemoRun]:
    """``cp-observe demo --otlp PHOENIX --judge openai/... `` with ``CP_OBSERVE_PHOENIX_URL`` set, run to the end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_", "PHOENIX_"))}
    env.update(
        {
            "CP_OBSERVE_PHOENIX_URL": phoenix.url,
            "CP_OBSERVE_JUDGE_API_KEY": "sk-test-key-0000",
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={PROJECT}",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            # The loopback judge scores these turns 1.0, 0.95, 1.0, 1.0: this threshold gives both labels.
            "CP_OBSERVE_THRESHOLD": "0.99",
        }
    )
    with JudgeServer() as judge:
        process = subprocess.run(
            [sys.executable, "-m", "cp_observe.cli", "demo", "--otlp", phoenix.url, "--judge", JUDGE_MODEL,
             "--judge-api-base", judge.url, "--turns", str(TURNS)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
        )
    assert process.returncode == 0, process.stderr
    spans = phoenix.wait_for_spans(PROJECT, lambda got: sum(s["name"] == n.EVALUATION_SPAN_NAME for s in got) >= TURNS)
    yield DemoRun(process, phoenix, spans)


def _span_annotations(server: PhoenixServer, span_ids: list[str]) -> list[dict[str, Any]]:
    body = server.get_json(f"/v1/projects/{PROJECT}/span_annotations", span_ids=span_ids, limit=1000)
    annotations: list[dict[str, Any]] = body["data"]
    return annotations


def _graphql(server: PhoenixServer, query: str, **variables: Any) -> Any:
    request = urllib.request.Request(
        f"{server.url}/graphql", data=json.dumps({"query": query, "variables": variables}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        body = json.loads(response.read())
    assert not body.get("errors"), body["errors"]
    return body["data"]


def _documents(server: PhoenixServer, span_id: str) -> dict[str, Any]:
    span: dict[str, Any] = _graphql(server, _DOCUMENTS_QUERY, spanId=span_id)["getSpanByOtelId"]
    return span


def _record_from(run: DemoRun, evaluation: dict[str, Any]) -> EvaluationRecord:
    """The record the sink sent for an evaluation, rebuilt from what Phoenix holds (to send it again)."""
    a = evaluation["attributes"]
    retrieval = run.by_id(evaluation["parent_id"])
    documents = _documents(run.server, retrieval["context"]["span_id"])["numDocuments"]
    return EvaluationRecord(
        trace_id=int(evaluation["context"]["trace_id"], 16), span_id=int(retrieval["context"]["span_id"], 16),
        evaluation_span_id=int(evaluation["context"]["span_id"], 16), score=a[n.GEN_AI_EVALUATION_SCORE_VALUE],
        label=a[n.GEN_AI_EVALUATION_SCORE_LABEL], explanation=a[n.GEN_AI_EVALUATION_EXPLANATION],
        average_precision=a[n.CP_AVERAGE_PRECISION], verdicts=tuple(a[n.CP_VERDICTS]),
        reasons=tuple(a[n.CP_REASONS]), documents=documents,
        judge_model=a[n.CP_JUDGE_MODEL], annotator_kind=n.ANNOTATOR_LLM, prompt_version=PROMPT_VERSION,
        data_source=a[n.GEN_AI_DATA_SOURCE_ID], agent_name=a.get(n.GEN_AI_AGENT_NAME), reference=a[n.CP_REFERENCE],
    )


def test_the_demo_scores_every_turn_and_says_nothing_about_refused_signals(demo: DemoRun) -> None:
    """Every turn scored; Phoenix's 405 on /v1/metrics and /v1/logs is said once each, no per-batch error."""
    assert len(demo.evaluations) == TURNS
    assert f"sampled {TURNS}, scored {TURNS}, failed 0" in demo.process.stdout
    assert "Failed to export" not in demo.process.stderr
    # Said once per signal, with the remedy, on the demo's stderr (not into a silent library logger).
    assert demo.process.stderr.count("refuses metrics (HTTP 405)") == 1, demo.process.stderr
    assert demo.process.stderr.count("refuses logs (HTTP 405)") == 1, demo.process.stderr
    assert "METRICS_ENDPOINT" in demo.process.stderr


def test_each_scored_retrieval_has_one_annotation_equal_to_its_evaluation(demo: DemoRun) -> None:
    """Exactly one context_precision annotation per retrieval span: same score, label, explanation; LLM; metadata."""
    retrieval_ids = [e["parent_id"] for e in demo.evaluations]
    assert len(set(retrieval_ids)) == TURNS
    assert all(demo.by_id(i)["span_kind"] == n.KIND_RETRIEVER for i in retrieval_ids)
    annotations = _span_annotations(demo.server, retrieval_ids)
    assert sorted(a["span_id"] for a in annotations) == sorted(retrieval_ids)
    for evaluation in demo.evaluations:
        a = evaluation["attributes"]
        [annotation] = [x for x in annotations if x["span_id"] == evaluation["parent_id"]]
        assert annotation["name"] == n.EVALUATION_NAME
        assert annotation["annotator_kind"] == n.ANNOTATOR_LLM
        assert annotation["identifier"] == n.PHOENIX_ANNOTATION_IDENTIFIER
        assert annotation["result"] == {
            "score": a[n.GEN_AI_EVALUATION_SCORE_VALUE],
            "label": a[n.GEN_AI_EVALUATION_SCORE_LABEL],
            "explanation": a[n.GEN_AI_EVALUATION_EXPLANATION],
        }
        metadata = annotation["metadata"]
        assert metadata["evaluation_span_id"] == evaluation["context"]["span_id"]
        assert metadata["trace_id"] == evaluation["context"]["trace_id"]
        assert (metadata["judge_model"], metadata["prompt_version"]) == (JUDGE_MODEL, PROMPT_VERSION)
        assert metadata["average_precision"] == a[n.CP_AVERAGE_PRECISION]


def test_each_judged_document_has_its_relevance_annotation(demo: DemoRun) -> None:
    """One relevance annotation per recorded document, at its position: score 1/0 from the verdict, the reason."""
    for evaluation in demo.evaluations:
        a = evaluation["attributes"]
        verdicts, reasons = a[n.CP_VERDICTS], a[n.CP_REASONS]
        span = _documents(demo.server, evaluation["parent_id"])
        assert span["numDocuments"] == len(verdicts) > 0
        got = sorted(span["documentEvaluations"], key=lambda d: d["documentPosition"])
        assert [d["documentPosition"] for d in got] == list(range(len(verdicts)))
        assert all(d["name"] == n.PHOENIX_DOCUMENT_ANNOTATION_NAME and d["annotatorKind"] == "LLM" for d in got)
        assert [d["score"] for d in got] == [1.0 if v else 0.0 for v in verdicts]
        assert [d["label"] for d in got] == [n.LABEL_RELEVANT if v else n.LABEL_IRRELEVANT for v in verdicts]
        assert [d["explanation"] for d in got] == [r or None for r in reasons]


def test_phoenix_computes_its_retrieval_metrics_for_llm_judged_spans(demo: DemoRun) -> None:
    """documentRetrievalMetrics is filled in: precision is relevant/n and hit is any-relevant, unlike the MAP."""
    for evaluation in demo.evaluations:
        verdicts = evaluation["attributes"][n.CP_VERDICTS]
        [metrics] = _documents(demo.server, evaluation["parent_id"])["documentRetrievalMetrics"]
        assert metrics["evaluationName"] == n.PHOENIX_DOCUMENT_ANNOTATION_NAME
        assert metrics["ndcg"] is not None
        assert metrics["precision"] == pytest.approx(sum(verdicts) / len(verdicts))
        assert metrics["hit"] == (1.0 if any(verdicts) else 0.0)


_FILTER_QUERY = """
query ($name: String!, $filter: String!) {
  getProjectByName(name: $name) { spans(first: 1000, filterCondition: $filter) { edges { node { spanId } } } }
}"""


@pytest.mark.parametrize("label", [n.LABEL_PASS, n.LABEL_FAIL])
def test_spans_can_be_filtered_on_the_score_in_phoenix(demo: DemoRun, label: str) -> None:
    """Phoenix's span filter ``evals['context_precision'].label == ...`` finds exactly the spans with that label."""
    condition = f"evals['{n.EVALUATION_NAME}'].label == '{label}'"
    project = _graphql(demo.server, _FILTER_QUERY, name=PROJECT, filter=condition)["getProjectByName"]
    found = {edge["node"]["spanId"] for edge in project["spans"]["edges"]}
    expected = {e["parent_id"] for e in demo.evaluations if e["attributes"][n.GEN_AI_EVALUATION_SCORE_LABEL] == label}
    assert expected and found == expected


def test_resending_the_same_evaluations_duplicates_nothing(demo: DemoRun) -> None:
    """Every evaluation sent twice more: still one span annotation per span and one relevance per document."""
    records = [_record_from(demo, e) for e in demo.evaluations]
    runner = SinkRunner(PhoenixSink(demo.server.url), meter_provider=MeterProvider())
    for _ in range(2):
        for record in records:
            assert runner.offer(record)
        assert runner.flush(60)
    runner.shutdown()
    assert runner.stats()["sent"] == 2 * len(records)
    retrieval_ids = [e["parent_id"] for e in demo.evaluations]
    assert sorted(a["span_id"] for a in _span_annotations(demo.server, retrieval_ids)) == sorted(retrieval_ids)
    for record, span_id in zip(records, retrieval_ids, strict=True):
        assert len(_documents(demo.server, span_id)["documentEvaluations"]) == len(record.verdicts)


def test_a_refused_record_is_counted_and_does_not_sink_its_batch(demo: DemoRun) -> None:
    """A position beyond the span's documents gets Phoenix's 422: that record fails (refused), its neighbour lands."""
    good = _record_from(demo, demo.evaluations[0])
    bad = replace(_record_from(demo, demo.evaluations[1]), documents=99, verdicts=(True,) * 9)
    sink = PhoenixSink(demo.server.url)
    assert sink._post("/v1/document_annotations?sync=true", [
        {"span_id": f"{bad.span_id:016x}", "name": "relevance", "annotator_kind": "LLM", "document_position": 8,
         "result": {"score": 1.0}}
    ])[0] == 422
    assert sink.send([good, bad]) == [Delivery.SENT, Delivery.REFUSED]
    reader = InMemoryMetricReader()
    runner = SinkRunner(sink, meter_provider=MeterProvider(metric_readers=[reader]))
    runner.offer(bad)
    assert runner.flush(30)
    runner.shutdown()
    assert runner.stats()["failed"] == 1
    points = [p for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics
              if m.name == n.SINK_METRIC_FAILED for p in m.data.data_points]
    assert [(p.attributes[n.SINK], p.attributes[n.REASON], p.value) for p in points] == [("phoenix", "refused", 1)]


def test_a_span_phoenix_does_not_have_is_retried_then_counted(demo: DemoRun) -> None:
    """Phoenix answers 404 for a span not ingested (yet): retried with backoff, then counted failed."""
    unknown = replace(_record_from(demo, demo.evaluations[0]), span_id=0x0123456789ABCDEF)
    sink = PhoenixSink(demo.server.url)
    assert sink.send([unknown]) == [Delivery.RETRY]
    runner = SinkRunner(sink, meter_provider=MeterProvider(), options=Settings(sink_max_retries=2), backoff_s=0.05)
    runner.offer(unknown)
    assert runner.flush(30)
    runner.shutdown()
    assert runner.stats() == {"offered": 1, "sent": 0, "failed": 1, "dropped": 0, "pending": 0}
    assert sink.last_error == "HTTP 404"


class FailingGateway:
    """A loopback HTTP proxy in front of the real Phoenix that answers 503 to the first ``failures`` requests."""

    def __init__(self, upstream: str, failures: int) -> None:
        self.failures = failures
        self.statuses: list[int] = []
        gateway = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if gateway.failures > 0:
                    gateway.failures -= 1
                    status, payload = 503, b"Service Unavailable"
                else:
                    request = urllib.request.Request(upstream + self.path, data=body, method="POST",
                                                     headers={"Content-Type": "application/json"})
                    try:
                        with urllib.request.urlopen(request, timeout=10) as response:
                            status, payload = response.status, response.read()
                    except urllib.error.HTTPError as exc:
                        status, payload = exc.code, exc.read()
                gateway.statuses.append(status)
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_span_not_there_yet_does_not_hold_up_its_batch(demo: DemoRun) -> None:
    """Phoenix's 404 names the missing span: that record waits for a retry, the others go again in one request."""
    first, second = (_record_from(demo, e) for e in demo.evaluations[:2])
    unknown = replace(first, span_id=0x0FEDCBA987654321)
    gateway = FailingGateway(demo.server.url, failures=0)
    try:
        assert PhoenixSink(gateway.url).send([first, unknown, second]) == [Delivery.SENT, Delivery.RETRY, Delivery.SENT]
    finally:
        gateway.close()
    assert gateway.statuses == [404, 200, 200]  # span annotations (all, then the two known), then their documents


def test_phoenix_5xx_is_retried_with_backoff_then_delivered_or_counted(demo: DemoRun) -> None:
    """Two 503s, then Phoenix answers: delivered, counted sent once; a gateway that keeps failing: counted failed."""
    record = _record_from(demo, demo.evaluations[2])
    gateway = FailingGateway(demo.server.url, failures=2)
    try:
        runner = SinkRunner(PhoenixSink(gateway.url), meter_provider=MeterProvider(), backoff_s=0.05)
        runner.offer(record)
        assert runner.flush(30)
        runner.shutdown()
        assert runner.stats() == {"offered": 1, "sent": 1, "failed": 0, "dropped": 0, "pending": 0}
        assert gateway.statuses == [503, 503, 200, 200]  # span annotation twice refused, then it and the documents
        gateway.failures = 1000
        runner = SinkRunner(PhoenixSink(gateway.url), meter_provider=MeterProvider(), backoff_s=0.05,
                            options=Settings(sink_max_retries=2))
        runner.offer(record)
        assert runner.flush(30)
        runner.shutdown()
        assert runner.stats() == {"offered": 1, "sent": 0, "failed": 1, "dropped": 0, "pending": 0}
        assert runner.sink.last_error == "HTTP 503"  # type: ignore[attr-defined]
    finally:
        gateway.close()
    assert len(_span_annotations(demo.server, [f"{record.span_id:016x}"])) == 1


def _exporters(protocol: str, phoenix: PhoenixServer) -> tuple[Any, Any]:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter

        endpoint = f"127.0.0.1:{phoenix.grpc_port}"
        return GrpcMetricExporter(endpoint=endpoint, insecure=True), GrpcLogExporter(endpoint=endpoint, insecure=True)
    return OTLPMetricExporter(endpoint=f"{phoenix.url}/v1/metrics"), OTLPLogExporter(endpoint=f"{phoenix.url}/v1/logs")


@pytest.mark.parametrize(("protocol", "refusal"), [("http/protobuf", "HTTP 405"), ("grpc", "gRPC UNIMPLEMENTED")])
def test_metrics_and_logs_refused_by_phoenix_are_said_once_and_dropped(
    phoenix: PhoenixServer, caplog: pytest.LogCaptureFixture, protocol: str, refusal: str
) -> None:
    """One warning per signal naming the remedy, no exporter error, however many batches follow."""
    caplog.set_level(logging.WARNING)
    inner_metrics, inner_logs = _exporters(protocol, phoenix)
    metric_exporter = QuietMetricExporter(inner_metrics)
    meters = MeterProvider(metric_readers=[PeriodicExportingMetricReader(metric_exporter, 3_600_000)])
    log_exporter = QuietLogExporter(inner_logs)
    logs = LoggerProvider()
    logs.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    counter = meters.get_meter("test").create_counter("test.counter")
    for _ in range(3):
        counter.add(1)
        assert meters.force_flush(10_000)
        logs.get_logger("test").emit(body="an evaluation event")
    assert (metric_exporter.probe.refused, log_exporter.probe.refused) == (refusal, refusal)
    warnings = [r.getMessage() for r in caplog.records if r.name == "cp_observe"]
    assert len(warnings) == 2, warnings
    assert any(f"refuses metrics ({refusal})" in w and "METRICS_ENDPOINT" in w for w in warnings)
    assert any(f"refuses logs ({refusal})" in w and "LOGS_ENDPOINT" in w for w in warnings)
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]
    meters.shutdown()
    logs.shutdown()


def test_an_endpoint_that_takes_metrics_and_logs_still_gets_them(caplog: pytest.LogCaptureFixture) -> None:
    """The same wrappers in front of a full OTLP receiver: nothing refused, every batch delivered."""
    caplog.set_level(logging.WARNING)
    with OtlpReceiver() as receiver:
        metric_exporter = QuietMetricExporter(OTLPMetricExporter(endpoint=receiver.url("metrics")))
        meters = MeterProvider(metric_readers=[PeriodicExportingMetricReader(metric_exporter, 3_600_000)])
        log_exporter = QuietLogExporter(OTLPLogExporter(endpoint=receiver.url("logs")))
        logs = LoggerProvider()
        logs.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
        meters.get_meter("test").create_counter("test.counter").add(5)
        assert meters.force_flush(10_000)
        logs.get_logger("test").emit(body="an evaluation event")
        assert (metric_exporter.probe.refused, log_exporter.probe.refused) == (None, None)
        assert [m.name for m in receiver.metrics()] == ["test.counter"]
        assert len(receiver.log_records()) == 1
        meters.shutdown()
        logs.shutdown()
    assert not [r for r in caplog.records if r.name == "cp_observe"]


def test_cp_observe_serve_annotates_the_spans_it_scores(
    phoenix: PhoenixServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The same spans go to Phoenix and to ``cp-observe serve --phoenix-url``: each scored one gets its annotations."""
    from cp_observe.serve import ScorerService, ServeSettings
    from tests.serve_support import post, retrieval_spans

    caplog.set_level(logging.WARNING)
    spans = retrieval_spans(3)
    body = bytes(encode_spans(spans).SerializeToString())
    ids = [f"{s.context.span_id:016x}" for s in spans]
    settings = ServeSettings.resolve(
        {"judge": "lexical", "listen_host": "127.0.0.1", "grpc_port": 0, "http_port": 0, "admin_port": 0,
         "otlp_endpoint": phoenix.url, "phoenix_url": phoenix.url},
        environ={},
    )
    assert post(f"{phoenix.url}/v1/traces", body)[0] == 200  # the app's spans, as a Collector fans them out
    with ScorerService(settings) as service:
        assert post(f"http://127.0.0.1:{service.port('http')}/v1/traces", body)[0] == 200
        assert service.flush(60)
        assert service.processor.stats()["scored"] == 3
        [runner] = ProcessorProbe(service.processor).sinks
        assert runner.flush(60)  # and the retries of spans Phoenix had not ingested yet
        assert service.processor.sink_stats()[n.SINK_PHOENIX]["sent"] == 3
    annotations = phoenix.get_json("/v1/projects/default/span_annotations", span_ids=ids, limit=100)["data"]
    assert sorted(a["span_id"] for a in annotations) == sorted(ids)
    assert {(a["name"], a["annotator_kind"]) for a in annotations} == {(n.EVALUATION_NAME, n.ANNOTATOR_CODE)}
    for span_id in ids:
        got = _documents(phoenix, span_id)
        assert got["numDocuments"] == 2
        assert sorted(d["documentPosition"] for d in got["documentEvaluations"]) == [0, 1]
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]  # metrics and logs: refused quietly
    assert sum("refuses metrics" in r.getMessage() for r in caplog.records) == 1
