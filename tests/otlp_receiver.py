"""A small, real OTLP/HTTP receiver on loopback, for tests that export through the real OTLP exporters.

``OtlpReceiver`` is a ``ThreadingHTTPServer`` bound to 127.0.0.1 that accepts ``POST /v1/traces``,
``/v1/metrics`` and ``/v1/logs`` with ``application/x-protobuf`` (or ``application/json``) bodies, optionally
gzip- or deflate-compressed, decodes them with opentelemetry-proto's ``Export*ServiceRequest`` messages and
answers with the matching ``Export*ServiceResponse``. It keeps every raw body and every decoded message, so a
test can ask both "what arrived" (spans, metrics, log records) and "does this byte string appear anywhere in
what was sent" (canary checks). Standard library plus opentelemetry-proto only.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span

__all__ = ["OtlpReceiver", "Received", "any_value", "attributes_of"]

_SIGNALS: dict[str, tuple[type[Message], type[Message]]] = {
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
    "/v1/logs": (ExportLogsServiceRequest, ExportLogsServiceResponse),
}


@dataclass(frozen=True)
class Received:
    """One accepted export request.

    Attributes:
        path: ``/v1/traces``, ``/v1/metrics`` or ``/v1/logs``.
        headers: request headers, keys lower-cased.
        wire: the body as it came over the wire (possibly compressed).
        body: the decompressed body.
        message: the decoded ``Export*ServiceRequest``.
    """

    path: str
    headers: dict[str, str]
    wire: bytes
    body: bytes
    message: Any


def any_value(value: AnyValue) -> Any:
    """Convert an OTLP ``AnyValue`` into the Python value it holds (arrays as tuples, kvlists as dicts)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return tuple(any_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def attributes_of(item: Any) -> dict[str, Any]:
    """The attributes of a decoded span, log record or data point as a plain dict."""
    return {kv.key: any_value(kv.value) for kv in item.attributes}


class OtlpReceiver:
    """An OTLP/HTTP receiver on 127.0.0.1; use as a context manager or call ``start``/``stop``.

    Point exporters at ``receiver.url("traces")`` (and ``"metrics"``, ``"logs"``). ``status`` (default 200)
    can be changed to make the receiver refuse exports, e.g. 503 to exercise exporter retries.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._address = (host, port)
        self._lock = threading.Lock()  # guards _received and _errors
        self._arrived = threading.Condition(self._lock)
        self._received: list[Received] = []
        self._errors: list[str] = []
        self.status = 200
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> OtlpReceiver:
        """Bind and serve in a daemon thread."""
        if self._httpd is not None:
            raise RuntimeError("OtlpReceiver is already running")
        owner = self

        class Handler(_Handler):
            receiver = owner

        httpd = _Server(self._address, Handler)
        thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="otlp-receiver", daemon=True
        )
        thread.start()
        self._httpd, self._thread = httpd, thread
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; idempotent."""
        httpd, thread = self._httpd, self._thread
        self._httpd = self._thread = None
        if httpd is None or thread is None:
            return
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:4318`` (what ``OTEL_EXPORTER_OTLP_ENDPOINT`` would hold)."""
        if self._httpd is None:
            raise RuntimeError("OtlpReceiver is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, signal: str) -> str:
        """The full URL of one signal: ``traces``, ``metrics`` or ``logs``."""
        return f"{self.endpoint}/v1/{signal}"

    # --- what arrived --------------------------------------------------------------------------------------
    @property
    def received(self) -> list[Received]:
        """Every accepted request, oldest first."""
        with self._lock:
            return list(self._received)

    @property
    def errors(self) -> list[str]:
        """Requests that could not be decoded (the receiver answered 400)."""
        with self._lock:
            return list(self._errors)

    def messages(self, signal: str) -> list[Any]:
        """Decoded requests of one signal."""
        path = f"/v1/{signal}"
        return [r.message for r in self.received if r.path == path]

    def spans(self) -> list[Span]:
        """Every span received, in arrival order."""
        return [
            span
            for message in self.messages("traces")
            for resource in message.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def metrics(self) -> list[Metric]:
        """Every metric received (one entry per metric per export)."""
        return [
            metric
            for message in self.messages("metrics")
            for resource in message.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        ]

    def log_records(self) -> list[LogRecord]:
        """Every log record received."""
        return [
            record
            for message in self.messages("logs")
            for resource in message.resource_logs
            for scope in resource.scope_logs
            for record in scope.log_records
        ]

    def span_names(self) -> list[str]:
        """Names of the spans received."""
        return [span.name for span in self.spans()]

    def metric_names(self) -> set[str]:
        """Names of the metrics received."""
        return {metric.name for metric in self.metrics()}

    def contains(self, needle: str | bytes) -> bool:
        """Whether ``needle`` occurs in any raw body (UTF-8) or in the text form of any decoded message."""
        raw = needle.encode("utf-8") if isinstance(needle, str) else needle
        text = needle if isinstance(needle, str) else needle.decode("utf-8", "replace")
        for received in self.received:
            if raw in received.body or raw in received.wire or text in str(received.message):
                return True
        return False

    def wait_for(self, predicate: Callable[[OtlpReceiver], bool], timeout: float = 5.0) -> bool:
        """Wait (bounded, woken by each arrival) until ``predicate(self)`` holds; False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            if predicate(self):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._arrived:
                self._arrived.wait(min(remaining, 0.1))

    def clear(self) -> None:
        """Forget everything received."""
        with self._lock:
            self._received.clear()
            self._errors.clear()

    def __iter__(self) -> Iterator[Received]:
        return iter(self.received)

    # --- called by the handler ------------------------------------------------------------------------------
    def _record(self, received: Received | None, error: str | None) -> None:
        with self._arrived:
            if received is not None:
                self._received.append(received)
            if error is not None:
                self._errors.append(error)
            self._arrived.notify_all()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self) -> None:
        # No reverse DNS lookup of the host name: a loopback receiver needs none.
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    receiver: OtlpReceiver

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests read the receiver instead

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        wire = self.rfile.read(length) if length > 0 else b""
        signal = _SIGNALS.get(path)
        if signal is None:
            self._answer(404, b"", "text/plain")
            return
        request_type, response_type = signal
        headers = {key.lower(): value for key, value in self.headers.items()}
        try:
            body = _decompress(wire, headers.get("content-encoding", ""))
            message = request_type()
            if headers.get("content-type", "").startswith("application/json"):
                json_format.Parse(body.decode("utf-8"), message)
            else:
                message.ParseFromString(body)
        except (DecodeError, json_format.ParseError, OSError, ValueError, zlib.error) as exc:
            self.receiver._record(None, f"{path}: {type(exc).__name__}: {exc}")
            self._answer(400, b"", "text/plain")
            return
        self.receiver._record(Received(path, headers, wire, body, message), None)
        status = self.receiver.status
        self._answer(status, response_type().SerializeToString() if status == 200 else b"", "application/x-protobuf")

    def _answer(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _decompress(data: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding == "gzip":
        return gzip.decompress(data)
    if encoding == "deflate":
        return zlib.decompress(data)
    return data
