"""OTLP/JSON as the Collector's ``file`` exporter writes it: one ``ExportTraceServiceRequest`` per line.

The shape (OTLP specification, "JSON Protobuf Encoding", and the ``file`` exporter's ``format: json``):
the proto3 JSON mapping with lowerCamelCase keys, trace and span ids as lowercase hex (not base64), enums
as integers, 64-bit integers as decimal strings, one request object per line, a newline after each.
Reading builds the protobuf request straight from the parsed JSON (``request_from_document``): the
generic ``json_format`` parser costs 8 to 30 times as much per span (``benchmarks/serve/bench_otlp_decode.py``),
which is minutes per gigabyte, so trace files, the query APIs and ``serve``'s OTLP/HTTP port all decode here.
It accepts what that parser accepts for trace requests -- lowerCamelCase or
snake_case keys, hex or base64 ids, enums as integers or names, 64-bit integers as strings or numbers --
and ignores unknown fields, as OTLP receivers must.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from google.protobuf import json_format  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["JsonLinesSpanExporter", "decode_json", "decode_json_line", "request_from_document", "request_to_json_line"]

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def decode_json_line(line: bytes, max_bytes: int) -> ExportTraceServiceRequest:
    """Decode one line (hex or base64 ids); raises ``ValueError`` with what is wrong."""
    if len(line) > max_bytes:
        raise ValueError(f"line larger than {max_bytes} bytes")
    return decode_json(line)


def decode_json(body: bytes) -> ExportTraceServiceRequest:
    """Decode one OTLP/JSON request body (a trace file's line, an OTLP/HTTP body); ``ValueError`` says what is wrong.

    Nesting too deep for the parser (a hostile ``arrayValue`` or ``kvlistValue`` chain) is an error like any other.
    """
    try:
        document = json.loads(body)
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"invalid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ValueError("not a JSON object: an OTLP/JSON request is one object (ExportTraceServiceRequest)")
    try:
        return request_from_document(document)
    except RecursionError:
        raise ValueError("invalid OTLP/JSON: nested too deeply") from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ValueError(f"invalid OTLP/JSON: {type(exc).__name__}: {exc}") from None


def _get(node: dict[str, Any], camel: str, snake: str) -> Any:
    value = node.get(camel)
    return node.get(snake) if value is None else value


def _id(value: Any, size: int) -> bytes:
    if not value:
        return b""
    text = str(value)
    if len(text) == size * 2:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    return _bytes(text)


def _bytes(text: str) -> bytes:
    """Base64 as protobuf's JSON mapping reads it: standard or URL-safe alphabet, padding optional.

    A value of the wrong length still decodes; the conversion to SDK spans then rejects that span alone
    (counted as partial success), as it did when ``json_format`` parsed the bodies.
    """
    encoded = text.encode("utf-8")
    return base64.urlsafe_b64decode(encoded + b"=" * (-len(encoded) % 4))


def _enum(value: Any, names: dict[str, int]) -> int:
    if value is None:
        return 0
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        if value not in names:
            raise ValueError(f"unknown enum value {value!r}")
        return names[value]
    return int(value)


_KIND_NAMES = {name: number for number, name in enumerate(
    ("SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER", "SPAN_KIND_CLIENT", "SPAN_KIND_PRODUCER",
     "SPAN_KIND_CONSUMER"))}
_STATUS_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


#: The scalar kinds of ``AnyValue``, in the order they are looked for: JSON name, field name, conversion.
_SCALARS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("stringValue", "string_value", lambda value: value), ("boolValue", "bool_value", bool),
    ("intValue", "int_value", int), ("doubleValue", "double_value", float),
    ("bytesValue", "bytes_value", lambda value: _bytes(str(value))),
)


def _value(target: Any, node: dict[str, Any]) -> None:
    """Fill an ``AnyValue`` from its JSON form (each kind under its camelCase name, else its field name)."""
    for camel, field, convert in _SCALARS:
        for key in (camel, field):
            if key in node:
                setattr(target, field, convert(node[key]))
                return
    for key in ("arrayValue", "array_value"):
        if key in node:
            values = target.array_value.values
            for item in (node[key] or {}).get("values") or ():
                _value(values.add(), item)
            return
    for key in ("kvlistValue", "kvlist_value"):
        if key in node:
            _attributes(target.kvlist_value.values, (node[key] or {}).get("values"))
            return


def _attributes(target: Any, pairs: Any) -> None:
    for pair in pairs or ():
        added = target.add()
        added.key = pair["key"]
        value = pair.get("value")
        if value:
            _value(added.value, value)


def request_from_document(document: dict[str, Any]) -> ExportTraceServiceRequest:
    """An ``ExportTraceServiceRequest`` from its OTLP/JSON document (see the module docstring)."""
    request = ExportTraceServiceRequest()
    for resource_node in _get(document, "resourceSpans", "resource_spans") or ():
        resource_spans = request.resource_spans.add()
        resource = resource_node.get("resource")
        if resource:
            _attributes(resource_spans.resource.attributes, resource.get("attributes"))
        resource_spans.schema_url = _get(resource_node, "schemaUrl", "schema_url") or ""
        for scope_node in _get(resource_node, "scopeSpans", "scope_spans") or ():
            scope_spans = resource_spans.scope_spans.add()
            scope = scope_node.get("scope")
            if scope:
                scope_spans.scope.name = scope.get("name") or ""
                scope_spans.scope.version = scope.get("version") or ""
                _attributes(scope_spans.scope.attributes, scope.get("attributes"))
            scope_spans.schema_url = _get(scope_node, "schemaUrl", "schema_url") or ""
            for node in scope_node.get("spans") or ():
                _span(scope_spans.spans.add(), node)
    return request


def _span(span: Any, node: dict[str, Any]) -> None:
    span.trace_id = _id(_get(node, "traceId", "trace_id"), 16)
    span.span_id = _id(_get(node, "spanId", "span_id"), 8)
    span.parent_span_id = _id(_get(node, "parentSpanId", "parent_span_id"), 8)
    span.trace_state = _get(node, "traceState", "trace_state") or ""
    span.flags = int(node.get("flags") or 0)
    span.name = node.get("name") or ""
    span.kind = _enum(node.get("kind"), _KIND_NAMES)
    span.start_time_unix_nano = int(_get(node, "startTimeUnixNano", "start_time_unix_nano") or 0)
    span.end_time_unix_nano = int(_get(node, "endTimeUnixNano", "end_time_unix_nano") or 0)
    _attributes(span.attributes, node.get("attributes"))
    for event_node in node.get("events") or ():
        event = span.events.add()
        event.name = event_node.get("name") or ""
        event.time_unix_nano = int(_get(event_node, "timeUnixNano", "time_unix_nano") or 0)
        _attributes(event.attributes, event_node.get("attributes"))
    for link_node in node.get("links") or ():
        link = span.links.add()
        link.trace_id = _id(_get(link_node, "traceId", "trace_id"), 16)
        link.span_id = _id(_get(link_node, "spanId", "span_id"), 8)
        link.trace_state = _get(link_node, "traceState", "trace_state") or ""
        link.flags = int(link_node.get("flags") or 0)
        _attributes(link.attributes, link_node.get("attributes"))
    status = node.get("status")
    if status is not None:
        span.status.SetInParent()
    if status:
        span.status.code = _enum(status.get("code"), _STATUS_NAMES)
        span.status.message = status.get("message") or ""


def request_to_json_line(request: ExportTraceServiceRequest) -> str:
    """One request as one line of OTLP/JSON in the Collector ``file`` exporter's shape (no newline)."""
    document: dict[str, Any] = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                _hex_ids(span)
                for link in span.get("links", ()):
                    _hex_ids(link)
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def _hex_ids(node: dict[str, Any]) -> None:
    for key in _ID_KEYS:
        value = node.get(key)
        if isinstance(value, str):
            node[key] = base64.b64decode(value).hex()


class JsonLinesSpanExporter(SpanExporter):
    """Appends each batch of spans as one OTLP/JSON line to a file (what the Collector's ``file`` exporter does).

    Thread-safe: the replay writes the spans it scored from its own thread while the batch processor writes
    evaluation spans from its worker.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: IO[str] | None = self.path.open("w", encoding="utf-8")
        self._lock = threading.Lock()  # guards _file and the lines written
        self.lines = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write ``spans`` as one line; FAILURE once shut down."""
        if not spans:
            return SpanExportResult.SUCCESS
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        line = request_to_json_line(encode_spans(spans))
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            self._file.write(line + "\n")
            self.lines += 1
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Flush the file buffer."""
        with self._lock:
            if self._file is not None:
                self._file.flush()
        return True

    def shutdown(self) -> None:
        """Close the file."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
