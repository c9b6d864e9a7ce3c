"""Traces through the real OTLP exporters (HTTP and gRPC) into a real Arize Phoenix on loopback, read back by its API.

A decorated agent with a retriever inside answers two questions; a ``ContextPrecisionProcessor`` with the offline
lexical judge scores both retrievals. The spans leave through the SDK's own ``OTLPSpanExporter`` (a
``RecordingExporter`` keeps what each batch held and what the exporter returned), Phoenix ingests them, and the
tests read them back through ``GET /v1/projects/{project}/spans``. Phoenix drops span links (see
``tests/phoenix_support.py``), so the link is checked in the OTLP request the exporter put on the wire.

Needs ``.venv-phoenix`` (``scripts/install-phoenix.sh``); without it the module is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import cp_observe
from cp_observe import _names as n
from cp_observe.testing import IsolatedRuntime
from tests.phoenix_support import INSTALL_HINT, PHOENIX_EXECUTABLE, PhoenixServer, RecordingExporter

pytestmark = pytest.mark.skipif(not PHOENIX_EXECUTABLE.exists(), reason=INSTALL_HINT)

PROTOCOLS = ("http/protobuf", "grpc")
#: Phoenix files spans under the project named by this resource attribute (OpenInference's ``PROJECT_NAME``).
PROJECT_ATTRIBUTE = "openinference.project.name"

DOCS = [
    "Bananas are rich in potassium.",
    "Paris is the capital of France and its largest city.",
    "The Eiffel Tower stands in Paris.",
    "France borders Spain, Italy and Germany.",
]
#: question -> the agent's answer; the lexical judge finds one relevant context for each, at different ranks,
#: so the two evaluations differ in score (0.5 and 0.25) and in label (pass and fail).
ANSWERS = {
    "What is the capital of France?": "Paris is the capital of France.",
    "Which countries border France?": "France borders Spain, Italy and Germany.",
}


@cp_observe.retriever(name="kb")
def search(query: str) -> list[str]:
    """The retriever: always the same four documents."""
    return DOCS


@cp_observe.agent(name="helper")
def answer(question: str) -> str:
    """The agent: retrieve, then answer."""
    search(question)
    return ANSWERS[question]


@dataclass
class Shipped:
    """One protocol's run: what the exporter sent (and returned) and what Phoenix holds for that project."""

    protocol: str
    project: str
    server: PhoenixServer
    exporter: RecordingExporter
    received: dict[str, dict[str, Any]]  # Phoenix's spans by hex span id

    @property
    def sent(self) -> list[ReadableSpan]:
        return self.exporter.spans

    def sent_named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.sent if s.name.startswith(prefix)]


def _hex_span(span_id: int) -> str:
    return format(span_id, "016x")


def _hex_trace(trace_id: int) -> str:
    return format(trace_id, "032x")


def _otlp_exporter(protocol: str, server: PhoenixServer) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        return GrpcSpanExporter(endpoint=f"127.0.0.1:{server.grpc_port}", insecure=True)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=f"{server.url}/v1/traces")


@pytest.fixture(scope="module", params=PROTOCOLS)
def shipped(request: pytest.FixtureRequest, phoenix: PhoenixServer) -> Iterator[Shipped]:
    """Run the agent with scoring on, export over one protocol, and wait until Phoenix holds every span sent."""
    protocol: str = request.param
    project = f"cp-observe-otlp-{protocol.replace('/', '-')}"
    provider = TracerProvider(resource=Resource.create({PROJECT_ATTRIBUTE: project, "service.name": "cp-observe-test"}))
    exporter = RecordingExporter(_otlp_exporter(protocol, phoenix))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    processor = cp_observe.ContextPrecisionProcessor(cp_observe.LexicalJudge(), tracer_provider=provider)
    provider.add_span_processor(processor)
    try:
        with IsolatedRuntime(tracer_provider=provider):
            for question, expected in ANSWERS.items():
                assert answer(question) == expected
        assert processor.force_flush(30_000)
        assert provider.force_flush(30_000)
        assert processor.stats()["scored"] == len(ANSWERS)
        sent_ids = {_hex_span(s.context.span_id) for s in exporter.spans}
        spans = phoenix.wait_for_spans(project, lambda got: sent_ids <= {s["context"]["span_id"] for s in got})
        yield Shipped(protocol, project, phoenix, exporter, {s["context"]["span_id"]: s for s in spans})
    finally:
        processor.shutdown()
        provider.shutdown()


def _expected_attributes(span: ReadableSpan) -> dict[str, Any]:
    """The span's attributes as Phoenix's REST API returns them: sequences as lists, the span kind moved out."""
    attributes = dict(span.attributes or {})
    attributes.pop(n.OPENINFERENCE_SPAN_KIND, None)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in attributes.items()}


def test_every_batch_was_accepted(shipped: Shipped) -> None:
    """The real exporter reported success for every batch, and sent agent, retrieval and evaluation per question."""
    assert shipped.exporter.batches
    assert all(result is SpanExportResult.SUCCESS for _, result in shipped.exporter.batches)
    assert sorted(s.name for s in shipped.sent) == sorted(
        ["invoke_agent helper", "retrieval kb", n.EVALUATION_SPAN_NAME] * len(ANSWERS)
    )


def test_spans_arrive_with_ids_parents_kinds_and_attributes(shipped: Shipped) -> None:
    """Every span sent is in Phoenix's project with the same trace id, parent, name, kind and attributes."""
    assert len(shipped.received) == len(shipped.sent)
    for span in shipped.sent:
        got = shipped.received[_hex_span(span.context.span_id)]
        assert got["name"] == span.name
        assert got["context"]["trace_id"] == _hex_trace(span.context.trace_id)
        assert got["parent_id"] == (_hex_span(span.parent.span_id) if span.parent else None)
        assert got["span_kind"] == (span.attributes or {})[n.OPENINFERENCE_SPAN_KIND]
        assert got["status_code"] == span.status.status_code.name
        expected = _expected_attributes(span)
        assert {k: got["attributes"].get(k) for k in expected} == expected, span.name


def test_evaluation_span_is_a_child_of_the_retrieval_with_its_score_intact(shipped: Shipped) -> None:
    """Each evaluation span sits under its retrieval span in Phoenix and carries the score the processor computed."""
    evaluations = shipped.sent_named(n.EVALUATION_SPAN_NAME)
    assert len(evaluations) == len(ANSWERS)
    retrievals = {_hex_span(s.context.span_id): s for s in shipped.sent_named("retrieval kb")}
    outcomes: dict[str, tuple[float, str]] = {}
    for evaluation in evaluations:
        computed: dict[str, Any] = dict(evaluation.attributes or {})
        got = shipped.received[_hex_span(evaluation.context.span_id)]
        retrieval = retrievals[got["parent_id"]]
        assert shipped.received[got["parent_id"]]["span_kind"] == n.KIND_RETRIEVER
        assert got["context"]["trace_id"] == _hex_trace(retrieval.context.trace_id)
        assert got["span_kind"] == n.KIND_EVALUATOR
        a = got["attributes"]
        score = a[n.GEN_AI_EVALUATION_SCORE_VALUE]
        assert isinstance(score, float) and score == computed[n.GEN_AI_EVALUATION_SCORE_VALUE]
        assert a[n.OI_EVALUATION_SCORE] == score
        label = a[n.GEN_AI_EVALUATION_SCORE_LABEL]
        assert label == a[n.OI_EVALUATION_LABEL] == computed[n.GEN_AI_EVALUATION_SCORE_LABEL]
        assert a[n.CP_VERDICTS] == list(computed[n.CP_VERDICTS])
        assert all(isinstance(v, bool) for v in a[n.CP_VERDICTS])
        assert len(a[n.CP_VERDICTS]) == len(DOCS)
        assert a[n.GEN_AI_EVALUATION_NAME] == a[n.OI_EVALUATION_NAME] == n.EVALUATION_NAME
        assert a[n.CP_JUDGE_MODEL] == "lexical"
        assert a[n.CP_REFERENCE] == n.REFERENCE_OUTPUT
        assert a[n.GEN_AI_DATA_SOURCE_ID] == "kb"
        assert a[n.GEN_AI_AGENT_NAME] == "helper"
        query = shipped.received[got["parent_id"]]["attributes"][n.INPUT_VALUE]
        outcomes[query] = (score, label)
    assert outcomes == {
        "What is the capital of France?": (0.5, n.LABEL_PASS),
        "Which countries border France?": (0.25, n.LABEL_FAIL),
    }


def test_link_to_the_retrieval_is_on_the_wire_and_phoenix_drops_it(shipped: Shipped) -> None:
    """The OTLP request carries the evaluation span's one link to its retrieval; Phoenix 20.26 keeps no links."""
    request = encode_spans(shipped.sent)  # what both OTLP exporters serialise and send
    wire = [
        span
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
        if span.name == n.EVALUATION_SPAN_NAME
    ]
    assert len(wire) == len(ANSWERS)
    for span in wire:
        [link] = span.links
        assert link.span_id == span.parent_span_id
        assert link.trace_id == span.trace_id
        assert shipped.received[link.span_id.hex()]["name"] == "retrieval kb"

    views = shipped.server.get_json(
        f"/v1/projects/{shipped.project}/spans/otlpv1", name=n.EVALUATION_SPAN_NAME, limit=100
    )["data"]
    assert sorted(v["span_id"] for v in views) == sorted(span.span_id.hex() for span in wire)
    # Tripwire: if a Phoenix upgrade starts keeping links, assert here that they point at the retrieval span.
    assert all(not v.get("links") for v in views), "Phoenix now keeps span links: check them against the wire"
