"""``cp-observe serve``: OTLP in (gRPC, HTTP protobuf, HTTP JSON), the library's processor, evaluations out."""

from __future__ import annotations

import gzip
import json
import subprocess
import urllib.error
import urllib.request
import zlib
from collections import Counter
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from cp_observe import _names as n
from cp_observe.serve import spans_from_request
from cp_observe.serve._otlp import BadRequest, decode_body
from cp_observe.testing import FakeJudge
from tests.serve_support import (
    DOCS,
    OtlpSink,
    app_command,
    post,
    produced,
    start_service,
    subprocess_env,
    to_otlp_json,
)

APP_TIMEOUT_S = 60


#: Each test restores the process-wide runtime a service installs (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("serve_state_restored")


@pytest.mark.parametrize("protocol", ["http", "grpc", "json"])
def test_capture_only_app_is_scored_through_each_front_door(
    protocol: str, sink: OtlpSink, cp_observe_judge: FakeJudge, tmp_path: Path
) -> None:
    """A capture-only app's spans, sent by the real OTLP exporter, are judged from their attributes and exported."""
    with start_service(sink, cp_observe_judge) as service:
        port = service.port("grpc" if protocol == "grpc" else "http")
        out = tmp_path / "spans.json"
        app = subprocess.run(app_command(f"http://127.0.0.1:{port}", protocol, out, turns=10),
                             env=subprocess_env(), capture_output=True, text=True, timeout=APP_TIMEOUT_S, check=False)
        assert app.returncode == 0, app.stderr
        retrievals = produced(out)
        assert len(retrievals) == 10 and all(r["sampled"] for r in retrievals)
        assert service.flush(30)
        assert sink.wait_for(lambda s: len(s.evaluations) >= 10 and len(s.logs) >= 10)
        stats = service.stats()

    by_parent = {e.parent_span_id: e for e in sink.evaluations}
    assert Counter(e.parent_span_id for e in sink.evaluations) == Counter(r["span_id"] for r in retrievals)
    for retrieval in retrievals:
        evaluation = by_parent[retrieval["span_id"]]
        assert evaluation.trace_id == retrieval["trace_id"]
        assert evaluation.resource["service.name"] == "cp-observe-scorer"
    references = Counter(e.attributes[n.CP_REFERENCE] for e in sink.evaluations)
    assert references == {"output": 8, "query": 2}  # turns 4 and 9 retrieve without an agent
    agent_scored = [e for e in sink.evaluations if e.attributes[n.CP_REFERENCE] == "output"]
    assert {e.attributes[n.GEN_AI_EVALUATION_SCORE_VALUE] for e in agent_scored} == {0.83}
    assert {e.attributes[n.GEN_AI_AGENT_NAME] for e in agent_scored} == {"helper"}
    # The content came from the span attributes: nothing of the app's memory exists in this process.
    assert all(list(call.contexts) == DOCS for call in cp_observe_judge.calls)
    assert {log["event_name"] for log in sink.logs} == {n.GEN_AI_EVALUATION_RESULT_EVENT}
    assert (stats["sampled"], stats["scored"], stats["dropped"], stats["pending"]) == (10, 10, 0, 0)
    assert all(key.startswith(("grpc" if protocol == "grpc" else "http") + ":accepted") for key in stats["requests"])
    instance = evaluation.resource["service.instance.id"]
    assert sink.totals(n.METRIC_EVALUATIONS, by=n.OUTCOME) == {(instance, "scored"): 10}


def _sdk_spans() -> tuple[list[ReadableSpan], Resource]:
    """A trace made with the real SDK: a remote-parented server span, a retrieval with arrays, an event, a link."""
    exporter = InMemorySpanExporter()
    resource = Resource.create({"service.name": "shop", "deployment.environment": "test"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("shop.rag", "1.2.3", schema_url="https://opentelemetry.io/schemas/1.30.0")
    remote = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0x00F067AA0BA902B7, True, TraceFlags(1))
    upstream = trace.set_span_in_context(trace.NonRecordingSpan(remote))
    attributes = {"tags": ["a", "b"], "scores": [0.5, 0.25], "flags": [True, False], "count": 3}
    with (
        tracer.start_as_current_span("GET /ask", context=upstream, kind=SpanKind.SERVER),
        tracer.start_as_current_span("retrieval kb", attributes=attributes,
                                     links=[Link(remote, {"link.type": "follows"})]) as span,
    ):
        span.add_event("ranked", {"k": 3})
        span.set_status(Status(StatusCode.ERROR, "boom"))
    return list(exporter.get_finished_spans()), resource


def test_conversion_keeps_what_the_sdk_saw() -> None:
    """Ids, parent is_remote, kind, status, attributes, events, links, resource and scope survive the round trip."""
    originals, resource = _sdk_spans()
    request = encode_spans(originals)
    for decoded in (request, decode_body(json.dumps(to_otlp_json(request)).encode(), "application/json", "", 1 << 20)):
        converted = spans_from_request(decoded)
        assert converted.rejected == 0
        assert [s.name for s in converted.spans] == ["retrieval kb", "GET /ask"]  # end-time order
        for got in converted.spans:
            want = next(s for s in originals if s.name == got.name)
            assert got.context is not None and want.context is not None
            assert (got.context.trace_id, got.context.span_id) == (want.context.trace_id, want.context.span_id)
            assert got.parent is not None and want.parent is not None
            assert (got.parent.span_id, got.parent.is_remote) == (want.parent.span_id, want.parent.is_remote)
            assert got.kind == want.kind
            assert got.status.status_code == want.status.status_code
            assert dict(got.attributes or {}) == dict(want.attributes or {})
            assert (got.start_time, got.end_time) == (want.start_time, want.end_time)
            assert got.resource.attributes == resource.attributes
            scope = got.instrumentation_scope
            assert scope is not None and (scope.name, scope.version, scope.schema_url) == (
                "shop.rag", "1.2.3", "https://opentelemetry.io/schemas/1.30.0")
        retrieval = converted.spans[0]
        assert retrieval.attributes == {"tags": ("a", "b"), "scores": (0.5, 0.25), "flags": (True, False), "count": 3}
        assert [(e.name, dict(e.attributes or {})) for e in retrieval.events] == [("ranked", {"k": 3})]
        assert [(link.context.span_id, dict(link.attributes or {})) for link in retrieval.links] == [
            (0x00F067AA0BA902B7, {"link.type": "follows"})]
        assert retrieval.status.description == "boom"
        assert retrieval.parent is not None and not retrieval.parent.is_remote
        server = converted.spans[1]
        assert server.parent is not None and server.parent.is_remote  # a local root, as in the app
        assert server.context is not None and server.context.trace_flags.sampled


def test_local_root_rule_without_is_remote_flags() -> None:
    """Without flags: other resource => remote; parent outside the request => not a local root; no parent => root."""
    originals, _ = _sdk_spans()
    request = encode_spans(originals)
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                span.flags = 0  # a sender that does not say
    server = request.resource_spans[0].scope_spans[0].spans[1]
    assert server.name == "GET /ask"
    converted = {s.name: s for s in spans_from_request(request).spans}
    assert converted["GET /ask"].parent is not None and not converted["GET /ask"].parent.is_remote
    assert converted["retrieval kb"].parent is not None and not converted["retrieval kb"].parent.is_remote
    # The same parent, sent by another process in the same request: remote.
    upstream = request.resource_spans.add()
    upstream.resource.attributes.add(key="service.name").value.string_value = "gateway"
    parent = upstream.scope_spans.add().spans.add()
    parent.trace_id, parent.span_id, parent.name = server.trace_id, server.parent_span_id, "proxy"
    converted = {s.name: s for s in spans_from_request(request).spans}
    assert converted["GET /ask"].parent is not None and converted["GET /ask"].parent.is_remote
    assert converted["proxy"].parent is None


def test_otlp_json_with_hex_ids_as_the_spec_writes_it() -> None:
    """Hex ids, string int64s, enum numbers, kvlist and bytes values decode; a bad id is rejected as partial success."""
    document = {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "js-app"}}]},
        "scopeSpans": [{"scope": {"name": "browser"}, "spans": [
            {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
             "parentSpanId": "eee19b7ec3c1b173", "name": "retrieval docs", "kind": 3,
             "startTimeUnixNano": "1544712660000000000", "endTimeUnixNano": "1544712661000000000",
             "attributes": [
                 {"key": "n", "value": {"intValue": "42"}},
                 {"key": "meta", "value": {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": True}}]}}},
                 {"key": "blob", "value": {"bytesValue": "AQI="}}]},
            {"traceId": "00", "spanId": "eee19b7ec3c1b175", "name": "broken"}]}]}]}
    request = decode_body(json.dumps(document).encode(), "application/json; charset=utf-8", "", 1 << 20)
    converted = spans_from_request(request)
    assert converted.rejected == 1 and "trace id" in converted.error
    [span] = converted.spans
    assert span.context is not None and f"{span.context.trace_id:032x}" == "5b8efff798038103d269b633813fc60c"
    assert span.parent is not None and f"{span.parent.span_id:016x}" == "eee19b7ec3c1b173"
    assert span.kind is SpanKind.CLIENT
    assert span.attributes == {"n": 42, "meta": {"k": True}, "blob": b"\x01\x02"}
    assert span.resource.attributes["service.name"] == "js-app"


def test_unreadable_bodies_are_refused() -> None:
    """Unknown media types, bad gzip and garbage are refused with the right status; gzip and deflate are read."""
    body = encode_spans(_sdk_spans()[0]).SerializeToString()
    assert decode_body(gzip.compress(body), "application/x-protobuf", "gzip", 1 << 20).resource_spans
    assert decode_body(zlib.compress(body), "application/x-protobuf", "deflate", 1 << 20).resource_spans
    cases = [
        (body, "text/plain", "", 415),
        (body, "application/x-protobuf", "br", 415),
        (b"not gzip", "application/x-protobuf", "gzip", 400),
        (b"\xff\xff\xff", "application/x-protobuf", "", 400),
        (b"[1, 2]", "application/json", "", 400),
        (gzip.compress(b"\0" * 4096), "application/x-protobuf", "gzip", 413),
    ]
    for payload, media, encoding, status in cases:
        with pytest.raises(BadRequest) as refused:
            decode_body(payload, media, encoding, 2048)
        assert refused.value.status == status, (media, encoding)


def test_http_front_door_statuses(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """200 with the request's encoding, 404 for other paths, 405 for GET, 415 and 400 with a Status body."""
    body = encode_spans(_sdk_spans()[0]).SerializeToString()
    with start_service(sink, cp_observe_judge) as service:
        base = f"http://127.0.0.1:{service.port('http')}"
        assert post(f"{base}/v1/traces", body)[0] == 200
        status, headers, answer = post(f"{base}/v1/traces", json.dumps(to_otlp_json(
            ExportTraceServiceRequest.FromString(body))).encode(), "application/json")
        assert (status, headers["Content-Type"], json.loads(answer)) == (200, "application/json", {})
        assert post(f"{base}/v1/metrics", body)[0] == 404
        assert post(f"{base}/v1/traces", body, "text/plain")[0] == 415
        status, _, answer = post(f"{base}/v1/traces", b"{", "application/json")
        assert status == 400 and "invalid JSON" in json.loads(answer)["message"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/v1/traces", timeout=10)
        assert refused.value.code == 405


def test_span_marked_sampled_by_the_app_is_scored_even_outside_the_scorer_ratio(
    sink: OtlpSink, cp_observe_judge: FakeJudge
) -> None:
    """``force_evaluation()`` in the app (the sampled mark) wins over a scorer sample rate of 0."""
    originals, _ = _sdk_spans()
    request = encode_spans(originals)
    retrieval = request.resource_spans[0].scope_spans[0].spans[0]
    retrieval.ClearField("status")
    for key, value in ((n.OPENINFERENCE_SPAN_KIND, "RETRIEVER"), (n.document_attribute(0, "content"), DOCS[0]),
                       (n.INPUT_VALUE, "capital of France")):
        retrieval.attributes.add(key=key).value.string_value = value
    retrieval.attributes.add(key=n.CP_SAMPLED).value.bool_value = True
    with start_service(sink, cp_observe_judge, sample_rate=0.0) as service:
        assert post(f"http://127.0.0.1:{service.port('http')}/v1/traces", request.SerializeToString())[0] == 200
        assert service.flush(30)
        stats = service.stats()
    assert (stats["sampled"], stats["scored"]) == (1, 1)
    assert sink.wait_for(lambda s: len(s.evaluations) == 1)
    assert sink.evaluations[0].attributes[n.CP_SAMPLING_REASON] == "forced"
