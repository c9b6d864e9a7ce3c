"""OTLP trace data to SDK ``ReadableSpan`` objects, so received spans take the in-process code path.

Each OTLP span becomes the ``ReadableSpan`` the application's own SDK handed to its span processors:
ids, name, kind, times, status, attributes (``AnyValue`` decoded: arrays become tuples, key-value lists
dicts, bytes stay bytes), events, links, its resource and its instrumentation scope. Dropped-attribute
counts have no place on a ``ReadableSpan`` and are not carried. Exported spans were recorded, so the
sampled trace flag is always set: the evaluation span the scorer starts under a received span must be
sampled too, whatever the sender wrote in the low byte of ``flags``.

Local roots. The evaluator judges a lone retrieval against its query when the *local root* of its trace
ends, i.e. the first span of the trace in the sending process (no parent, or a remote parent). In order:

1. ``flags`` says so (``SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE``, set by current SDKs and kept by the Collector):
   the parent's ``is_remote`` is exactly what the application's in-process processor saw.
2. No parent span id: a root.
3. The parent is in the same request: remote when it comes from another resource (another process).
4. The parent is not in the request: *not* remote. Batching (the SDK's batch processor, the Collector's
   ``batch``, the load balancer splitting by trace) cuts traces at arbitrary places, so "parent not in this
   request" says nothing about processes. Calling such a span a local root would judge the retrievals of
   its trace against their queries before their agent's answer arrives; missing a real local root only
   waits for the agent or for ``turn_timeout_s``. A late score beats a wrong one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import SpanFlags
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

__all__ = ["Converted", "any_value", "spans_from_request"]

_HAS_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_TRACE_FLAGS_MASK = SpanFlags.SPAN_FLAGS_TRACE_FLAGS_MASK
_KINDS = {
    PbSpan.SPAN_KIND_SERVER: SpanKind.SERVER,
    PbSpan.SPAN_KIND_CLIENT: SpanKind.CLIENT,
    PbSpan.SPAN_KIND_PRODUCER: SpanKind.PRODUCER,
    PbSpan.SPAN_KIND_CONSUMER: SpanKind.CONSUMER,
}
_STATUS = {1: StatusCode.OK, 2: StatusCode.ERROR}


@dataclass(slots=True)
class Converted:
    """The spans of one request in end-time order, and the spans refused as malformed (with the first reason)."""

    spans: list[ReadableSpan] = field(default_factory=list)
    rejected: int = 0
    error: str = ""


def spans_from_request(request: ExportTraceServiceRequest) -> Converted:
    """Convert every span of an OTLP trace request; spans with invalid ids are counted as rejected.

    The spans come back sorted by end time, the order in which the application's processors saw them end,
    so a retrieval reaches turn assembly before the agent span that encloses it.
    """
    out = Converted()
    origin: dict[tuple[bytes, bytes], bytes] = {}  # (trace id, span id) -> identity of its resource
    identities: list[bytes] = []
    for resource_spans in request.resource_spans:
        identity = resource_spans.resource.SerializeToString(deterministic=True)
        identities.append(identity)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                origin[(span.trace_id, span.span_id)] = identity
    for resource_spans, identity in zip(request.resource_spans, identities, strict=True):
        resource = Resource(_attributes(resource_spans.resource.attributes), resource_spans.schema_url or None)
        for scope_spans in resource_spans.scope_spans:
            pb_scope = scope_spans.scope
            scope = InstrumentationScope(
                pb_scope.name,
                pb_scope.version or None,
                scope_spans.schema_url or None,
                _attributes(pb_scope.attributes) or None,
            )
            for span in scope_spans.spans:
                problem = _invalid(span)
                if problem:
                    out.rejected += 1
                    out.error = out.error or problem
                    continue
                parent_origin = origin.get((span.trace_id, span.parent_span_id))
                out.spans.append(_span(span, resource, scope, parent_origin is not None and parent_origin != identity))
    out.spans.sort(key=lambda s: s.end_time or 0)
    return out


def _invalid(span: PbSpan) -> str:
    if len(span.trace_id) != 16 or not any(span.trace_id):
        return "span with an invalid trace id"
    if len(span.span_id) != 8 or not any(span.span_id):
        return "span with an invalid span id"
    if span.parent_span_id and len(span.parent_span_id) != 8:
        return "span with an invalid parent span id"
    return ""


def _span(span: PbSpan, resource: Resource, scope: InstrumentationScope, other_process_parent: bool) -> ReadableSpan:
    trace_id = int.from_bytes(span.trace_id, "big")
    flags = TraceFlags((span.flags & _TRACE_FLAGS_MASK) | TraceFlags.SAMPLED)
    state = TraceState.from_header([span.trace_state]) if span.trace_state else None
    context = SpanContext(trace_id, int.from_bytes(span.span_id, "big"), False, flags, state)
    parent = None
    if span.parent_span_id and any(span.parent_span_id):
        remote = bool(span.flags & _IS_REMOTE) if span.flags & _HAS_IS_REMOTE else other_process_parent
        parent = SpanContext(trace_id, int.from_bytes(span.parent_span_id, "big"), remote, flags, state)
    code = _STATUS.get(span.status.code, StatusCode.UNSET)
    return ReadableSpan(
        name=span.name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=_attributes(span.attributes),
        events=[Event(e.name, _attributes(e.attributes), e.time_unix_nano or None) for e in span.events],
        links=[_link(link) for link in span.links if len(link.trace_id) == 16 and len(link.span_id) == 8],
        kind=_KINDS.get(span.kind, SpanKind.INTERNAL),
        status=Status(code, span.status.message or None) if code is StatusCode.ERROR else Status(code),
        start_time=span.start_time_unix_nano,
        end_time=span.end_time_unix_nano,
        instrumentation_scope=scope,
    )


def _link(link: PbSpan.Link) -> Link:
    flags = TraceFlags(link.flags & _TRACE_FLAGS_MASK)
    remote = bool(link.flags & _IS_REMOTE)
    state = TraceState.from_header([link.trace_state]) if link.trace_state else None
    trace_id, span_id = int.from_bytes(link.trace_id, "big"), int.from_bytes(link.span_id, "big")
    return Link(SpanContext(trace_id, span_id, remote, flags, state), _attributes(link.attributes))


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        value = any_value(pair.value)
        if value is not None:
            out[pair.key] = value
    return out


def any_value(value: AnyValue) -> Any:
    """Decode an OTLP ``AnyValue``: scalars as Python scalars, arrays as tuples, key-value lists as dicts."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "int_value":
        return value.int_value
    if kind == "double_value":
        return value.double_value
    if kind == "bytes_value":
        return bytes(value.bytes_value)
    if kind == "array_value":
        return tuple(any_value(item) for item in value.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return None
