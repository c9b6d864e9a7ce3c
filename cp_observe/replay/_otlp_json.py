"""OTLP/JSON as the Collector's ``file`` exporter writes it: one ``ExportTraceServiceRequest`` per line.

The shape (OTLP specification, "JSON Protobuf Encoding", and the ``file`` exporter's ``format: json``):
the proto3 JSON mapping with lowerCamelCase keys, trace and span ids as lowercase hex (not base64), enums
as integers, 64-bit integers as decimal strings, one request object per line, ``\\n`` after each.
Reading goes through the same decoder as ``cp-observe serve``'s OTLP/HTTP JSON front door.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from google.protobuf import json_format  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from cp_observe.serve._otlp import JSON, decode_body

__all__ = ["JsonLinesSpanExporter", "decode_json_line", "request_to_json_line"]

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def decode_json_line(line: bytes, max_bytes: int) -> ExportTraceServiceRequest:
    """Decode one line (hex or base64 ids); raises ``ValueError`` (``BadRequest``) with what is wrong."""
    return decode_body(line, JSON, "", max_bytes)


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
