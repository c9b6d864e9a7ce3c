"""The one OTLP/JSON decoder against protobuf's own JSON parser, in every spelling OTLP/JSON senders use."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from cp_observe._traces._otlp_json import decode_json, decode_json_line, request_to_json_line
from cp_observe.serve._otlp import JSON, BadRequest, decode_body


def _request() -> ExportTraceServiceRequest:
    """A request the real SDK encodes: remote parent, arrays, a nested value, bytes, an event, a link, an error."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("shop.rag", "1.2.3", schema_url="https://opentelemetry.io/schemas/1.30.0")
    remote = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0x00F067AA0BA902B7, True, TraceFlags(1))
    attributes = {"tags": ["a", "b"], "scores": [0.5, 0.25], "flags": [True, False], "count": 3, "ratio": 0.75}
    with (
        tracer.start_as_current_span("GET /ask", context=trace.set_span_in_context(trace.NonRecordingSpan(remote)),
                                     kind=SpanKind.SERVER),
        tracer.start_as_current_span("retrieval kb", attributes=attributes,
                                     links=[Link(remote, {"link.type": "follows"})]) as span,
    ):
        span.add_event("ranked", {"k": 3})
        span.set_status(Status(StatusCode.ERROR, "boom"))
    request = encode_spans(exporter.get_finished_spans())
    value = request.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="blob")
    value.value.bytes_value = b"\x00\x01\xfe"
    nested = request.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="meta")
    nested.value.kvlist_value.values.add(key="inner").value.array_value.values.add().string_value = "x"
    return request


def _spellings(request: ExportTraceServiceRequest) -> dict[str, bytes]:
    """The same request as OTLP/JSON in each spelling a sender may use."""
    camel_b64 = json_format.MessageToDict(request, use_integers_for_enums=True)
    snake_names = json_format.MessageToDict(request, preserving_proto_field_name=True)
    url_safe: Any = json.loads(json.dumps(camel_b64))
    for span in url_safe["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        span["spanId"] = base64.urlsafe_b64encode(base64.b64decode(span["spanId"])).decode().rstrip("=")
    return {
        "hex ids (the OTLP spec, the Collector's file exporter)": request_to_json_line(request).encode(),
        "base64 ids, lowerCamelCase, enum numbers": json.dumps(camel_b64).encode(),
        "snake_case keys, enum names": json.dumps(snake_names).encode(),
        "URL-safe base64 without padding": json.dumps(url_safe).encode(),
    }


@pytest.mark.parametrize("spelling", list(_spellings(_request())))
def test_every_spelling_decodes_to_the_request(spelling: str) -> None:
    """Each spelling decodes to the request the SDK encoded, for files and for serve's OTLP/HTTP JSON alike."""
    request = _request()
    body = _spellings(request)[spelling]
    assert decode_json(body) == request
    assert decode_json_line(body, 1 << 20) == request
    assert decode_body(body, JSON, "", 1 << 20) == request


def test_the_decoder_agrees_with_protobufs_json_parser() -> None:
    """On the proto3 JSON mapping (base64 ids) the direct decoder builds what json_format.Parse builds."""
    request = _request()
    body = json_format.MessageToJson(request)
    assert decode_json(body.encode()) == json_format.Parse(body, ExportTraceServiceRequest())


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "invalid JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"kind": "SPAN_KIND_NEW"}]}]}]}', "unknown enum value"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}', "invalid OTLP/JSON"),
    (b'{"resourceSpans": "many"}', "invalid OTLP/JSON"),
])
def test_bad_bodies_get_one_clear_error(body: bytes, message: str) -> None:
    """Malformed JSON or OTLP is a ValueError naming what is wrong; serve answers it as a 400 with that text."""
    with pytest.raises(ValueError, match=message):
        decode_json(body)
    with pytest.raises(BadRequest, match=message) as refused:
        decode_body(body, JSON, "", 1 << 20)
    assert refused.value.status == 400


def test_a_line_over_the_bound_is_refused_before_parsing() -> None:
    """A trace-file line larger than its bound is an error without being parsed."""
    with pytest.raises(ValueError, match="larger than 10 bytes"):
        decode_json_line(b'{"resourceSpans": []}', 10)
