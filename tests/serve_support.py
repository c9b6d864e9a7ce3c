"""Test parts for ``cp-observe serve``: an OTLP sink, an OTLP/JSON span exporter, a trace-id router, and an app.

- ``OtlpSink``: a real OTLP/HTTP receiver (traces, metrics, logs; protobuf) where scorers export their
  evaluation spans, events and metrics; tests wait on it with a condition, never a sleep.
- ``OtlpJsonSpanExporter``: the SDK's own OTLP encoder, written as OTLP/JSON (hex ids) and POSTed. The Python
  SDK has no JSON exporter; this is what a JSON sender (the Collector's ``otlphttp`` with ``encoding: json``,
  a browser SDK) puts on the wire.
- ``TraceRouter``: a stand-in for the Collector gateway's ``loadbalancing`` exporter (``routing_key: traceID``,
  static resolver), which cannot run here: same hash ring (CRC-32 of the trace id on 36,000 positions, 100
  points per backend), per-backend sending queues, and retries that honour ``RetryInfo``.
- ``python -m tests.serve_support app ...``: a decorated RAG app in capture-only mode exporting through the
  real OTLP exporters; it writes the retrieval spans it produced (and whether they were sampled) to a file.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from tests.turn_support import TURN_ANSWER, TURN_DOCS, TURN_QUERY, make_turn

ROOT = Path(__file__).resolve().parent.parent
EVALUATION_SPAN = "evaluation context_precision"


def free_port() -> int:
    """A free TCP port on loopback (bound and released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def attributes(pairs: Sequence[KeyValue]) -> dict[str, Any]:
    """OTLP key-values as a dict."""
    from cp_observe._traces._convert import any_value  # lazily: the app processes never need the service

    return {kv.key: any_value(kv.value) for kv in pairs}


# --- the sink --------------------------------------------------------------------------------------------------
@dataclass
class EvaluationSpan:
    """An evaluation span as it reached the sink."""

    trace_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]


class OtlpSink:
    """A real OTLP/HTTP receiver on loopback: keeps evaluation spans, log records and metric data points."""

    def __init__(self) -> None:
        self._cond = threading.Condition()  # guards everything below
        self.evaluations: list[EvaluationSpan] = []
        self.logs: list[dict[str, Any]] = []
        # (instance, metric, sorted attribute items) -> (time, value): cumulative sums, latest wins
        self._sums: dict[tuple[str, str, tuple[tuple[str, Any], ...]], tuple[int, float]] = {}
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                elif self.headers.get("Content-Encoding") == "deflate":
                    body = zlib.decompress(body)
                sink._receive(self.path, body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The base URL (exporters add ``/v1/traces`` etc.)."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        """Stop serving."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def _receive(self, path: str, body: bytes) -> None:
        with self._cond:
            if path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    resource = attributes(resource_spans.resource.attributes)
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            if span.name == EVALUATION_SPAN:
                                self.evaluations.append(EvaluationSpan(
                                    span.trace_id.hex(), span.parent_span_id.hex(), attributes(span.attributes),
                                    resource,
                                ))
            elif path == "/v1/logs":
                logs = ExportLogsServiceRequest.FromString(body)
                for resource_logs in logs.resource_logs:
                    for scope_logs in resource_logs.scope_logs:
                        for record in scope_logs.log_records:
                            self.logs.append({"event_name": record.event_name, "span_id": record.span_id.hex(),
                                              **attributes(record.attributes)})
            elif path == "/v1/metrics":
                self._metrics(ExportMetricsServiceRequest.FromString(body))
            self._cond.notify_all()

    def _metrics(self, request: ExportMetricsServiceRequest) -> None:
        for resource_metrics in request.resource_metrics:
            instance = str(attributes(resource_metrics.resource.attributes).get("service.instance.id", ""))
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.WhichOneof("data") != "sum":
                        continue
                    for point in metric.sum.data_points:
                        key = (instance, metric.name, tuple(sorted(attributes(point.attributes).items())))
                        value = point.as_int if point.WhichOneof("value") == "as_int" else point.as_double
                        previous = self._sums.get(key)
                        if previous is None or point.time_unix_nano >= previous[0]:
                            self._sums[key] = (point.time_unix_nano, value)

    def wait_for(self, predicate: Callable[[OtlpSink], bool], timeout: float = 20.0) -> bool:
        """Block until ``predicate(sink)`` holds (re-checked on every receipt); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout)

    def points(self, metric: str) -> list[dict[str, Any]]:
        """The attributes of every sum data point of ``metric`` received (one per series and instance)."""
        with self._cond:
            return [dict(attrs) for (_, name, attrs) in self._sums if name == metric]

    def totals(self, metric: str, by: str | None = None) -> dict[tuple[str, str], float]:
        """Latest cumulative value per (instance, value of attribute ``by``), summed over other attributes."""
        out: dict[tuple[str, str], float] = defaultdict(float)
        with self._cond:
            for (instance, name, attrs), (_, value) in self._sums.items():
                if name == metric:
                    out[(instance, str(dict(attrs).get(by, "")) if by else "")] += value
        return dict(out)


# --- OTLP/JSON ----------------------------------------------------------------------------------------------------
def to_otlp_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """The OTLP/JSON form of a request: proto3 JSON with lowerCamelCase keys and hex trace/span ids."""
    document: dict[str, Any] = json_format.MessageToDict(request)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for holder in (span, *span.get("links", [])):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in holder:
                            holder[key] = base64.b64decode(holder[key]).hex()
    return document


class OtlpJsonSpanExporter(SpanExporter):
    """Exports spans as OTLP/JSON over HTTP: the SDK's encoder, hex ids, ``Content-Type: application/json``."""

    def __init__(self, endpoint: str, timeout: float = 10.0) -> None:
        self._endpoint = endpoint
        self._timeout = timeout

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        body = json.dumps(to_otlp_json(encode_spans(spans))).encode()
        deadline = time.monotonic() + self._timeout
        while True:
            request = urllib.request.Request(self._endpoint, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self._timeout) as response:
                    response.read()
                    return SpanExportResult.SUCCESS
            except urllib.error.HTTPError as error:
                retry = error.headers.get("Retry-After")
                if error.code not in (429, 503) or retry is None or time.monotonic() + float(retry) > deadline:
                    return SpanExportResult.FAILURE
                time.sleep(float(retry))  # what the server asked for

    def shutdown(self) -> None:
        pass


# --- scorers in this process, judges and requests -----------------------------------------------------------------
def start_service(sink: OtlpSink, judge: Any, **settings: Any) -> Any:
    """A started ``ScorerService`` on free loopback ports exporting to ``sink``; no environment is read."""
    from cp_observe.serve import ScorerService, ServeSettings

    explicit = {"listen_host": "127.0.0.1", "grpc_port": 0, "http_port": 0, "admin_port": 0,
                "otlp_endpoint": sink.url, **settings}
    return ScorerService(ServeSettings.resolve(explicit, environ={}), judge=judge).start()


def post(url: str, body: bytes, content_type: str = "application/x-protobuf") -> tuple[int, dict[str, str], bytes]:
    """POST and return (status, headers, body), error statuses included."""
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def get(url: str) -> tuple[int, str]:
    """GET and return (status, text), error statuses included."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class GatedJudge:
    """A judge that answers only once ``gate`` is set, so a test can hold the queue full for as long as it needs."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)  # released once per judge call that started

    @property
    def model(self) -> str:
        return "gated"

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Any:
        import asyncio

        from cp_observe import Judgement, Usage, Verdict

        self.entered.release()
        await asyncio.get_running_loop().run_in_executor(None, self.gate.wait, 30.0)
        return Judgement(tuple(Verdict(i, True, "gate") for i in range(len(contexts))), "gated", Usage(1, 1, 1))


def retrieval_spans(count: int) -> list[ReadableSpan]:
    """``count`` retrievals, each alone in its own trace (one queue item each), made by the real SDK."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from cp_observe import _names as n

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for i in range(count):
        with tracer.start_as_current_span("retrieval kb", attributes={
            n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL,
            n.GEN_AI_DATA_SOURCE_ID: "kb", n.INPUT_VALUE: f"capital of France {i}",
            n.document_attribute(0, "content"): DOCS[0], n.document_attribute(1, "content"): DOCS[1],
        }):
            pass
    return list(exporter.get_finished_spans())


def retrieval_request(count: int) -> bytes:
    """An OTLP/protobuf request body with ``count`` lone retrievals."""
    return bytes(encode_spans(retrieval_spans(count)).SerializeToString())


# --- the router -------------------------------------------------------------------------------------------------
_MAX_POSITIONS = 36_000
_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED,
                        grpc.StatusCode.DEADLINE_EXCEEDED})
_POINTS = 100


class HashRing:
    """The loadbalancing exporter's consistent-hash ring (``consistent_hashing.go``)."""

    def __init__(self, endpoints: Sequence[str]) -> None:
        used: set[int] = set()
        items: list[tuple[int, str]] = []
        for endpoint in sorted(endpoints):
            for i in range(_POINTS):
                position = zlib.crc32(endpoint.encode() + bytes([i])) % _MAX_POSITIONS
                if position not in used:
                    used.add(position)
                    items.append((position, endpoint))
        self._items = sorted(items)

    def endpoint_for(self, trace_id: bytes) -> str:
        """The backend of a trace: the first ring position at or after the trace id's CRC-32."""
        position = zlib.crc32(trace_id) % _MAX_POSITIONS
        for item_position, endpoint in self._items:
            if item_position >= position:
                return endpoint
        return self._items[0][1]


@dataclass
class _Backend:
    endpoint: str
    queue: queue.Queue[ExportTraceServiceRequest | None] = field(default_factory=queue.Queue)
    delivered: int = 0
    lost: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    failed: threading.Event = field(default_factory=threading.Event)


class TraceRouter:
    """OTLP/HTTP in, split by trace id onto a hash ring, OTLP/gRPC out with per-backend queues and retries.

    It answers the application as soon as a request is queued, like the Collector; the queues retry
    ``RESOURCE_EXHAUSTED`` (after the ``RetryInfo`` delay) and ``UNAVAILABLE`` (briefly) until delivered.
    """

    def __init__(self, endpoints: Sequence[str], *, retry_s: float = 0.1) -> None:
        self._ring = HashRing(endpoints)
        self._retry_s = retry_s
        self._stop = threading.Event()
        self._pending = 0
        self._cond = threading.Condition()  # guards _pending
        self.backends = {endpoint: _Backend(endpoint) for endpoint in endpoints}
        self._threads = [threading.Thread(target=self._send, args=(b,), daemon=True) for b in self.backends.values()]
        for thread in self._threads:
            thread.start()
        router = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path == "/v1/traces":
                    router.route(ExportTraceServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        """Where applications export (OTLP/HTTP base URL)."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def route(self, request: ExportTraceServiceRequest) -> None:
        """Split one request by trace id and queue each part for its backend."""
        parts: dict[str, ExportTraceServiceRequest] = {}
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    endpoint = self._ring.endpoint_for(span.trace_id)
                    part = parts.setdefault(endpoint, ExportTraceServiceRequest())
                    target = _holder(part, resource_spans, scope_spans)
                    target.spans.append(span)
        with self._cond:
            self._pending += len(parts)
        for endpoint, part in parts.items():
            self.backends[endpoint].queue.put(part)

    def _send(self, backend: _Backend) -> None:
        options = [("grpc.initial_reconnect_backoff_ms", 50), ("grpc.min_reconnect_backoff_ms", 50),
                   ("grpc.max_reconnect_backoff_ms", 200)]
        with grpc.insecure_channel(backend.endpoint, options=options) as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            while True:
                request = backend.queue.get()
                if request is None:
                    return
                while not self._stop.is_set():
                    try:
                        stub.Export(request, timeout=10.0)
                    except grpc.RpcError as error:
                        backend.failures[error.code().name] += 1
                        backend.failed.set()
                        if error.code() not in _RETRYABLE:
                            backend.lost += 1  # what the Collector would drop
                            break
                        self._stop.wait(_retry_delay(error) or self._retry_s)
                        continue
                    backend.delivered += 1
                    break
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()

    def drain(self, timeout: float = 30.0) -> bool:
        """Block until every queued part was delivered; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        """Stop routing (undelivered parts are abandoned)."""
        self._stop.set()
        for backend in self.backends.values():
            backend.queue.put(None)
        self._httpd.shutdown()
        self._httpd.server_close()


def _holder(part: ExportTraceServiceRequest, resource_spans: Any, scope_spans: Any) -> Any:
    """The scope-spans entry of ``part`` for this resource and scope (created on first use)."""
    if not part.resource_spans or part.resource_spans[-1].resource != resource_spans.resource:
        added = part.resource_spans.add()
        added.resource.CopyFrom(resource_spans.resource)
        added.schema_url = resource_spans.schema_url
    current = part.resource_spans[-1]
    if not current.scope_spans or current.scope_spans[-1].scope != scope_spans.scope:
        added_scope = current.scope_spans.add()
        added_scope.scope.CopyFrom(scope_spans.scope)
        added_scope.schema_url = scope_spans.schema_url
    return current.scope_spans[-1]


def _retry_delay(error: grpc.RpcError) -> float | None:
    """The ``RetryInfo`` delay in ``grpc-status-details-bin``, as the Collector's OTLP exporter reads it."""
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = RpcStatus.FromString(value)
            for detail in status.details:
                info = RetryInfo()
                if detail.Unpack(info):
                    return float(info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
    return None


# --- scorer replicas as processes -----------------------------------------------------------------------------
@dataclass
class Replica:
    """A ``python -m cp_observe.serve`` process on fixed loopback ports (so a restart keeps its address)."""

    grpc_port: int
    admin_port: int
    args: list[str]
    env: dict[str, str]
    process: subprocess.Popen[str] | None = None

    @property
    def endpoint(self) -> str:
        """host:port of its OTLP/gRPC front door."""
        return f"127.0.0.1:{self.grpc_port}"

    def start(self) -> Replica:
        """Start the process."""
        command = [sys.executable, "-m", "cp_observe.serve", "--listen-host", "127.0.0.1",
                   "--grpc-port", str(self.grpc_port), "--http-port", "0", "--admin-port", str(self.admin_port),
                   *self.args]
        self.process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Poll ``/readyz`` until it answers 200 (the process is another program: there is no event to await)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None and self.process.poll() is None, self.output()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/readyz", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"replica {self.endpoint} not ready: {self.output()}")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (graceful drain), wait for the exit; returns the exit code."""
        assert self.process is not None
        self.process.terminate()
        return self.process.wait(timeout)

    def output(self) -> str:
        """What the process printed (once it has exited)."""
        if self.process is None or self.process.poll() is None or self.process.stdout is None:
            return ""
        return self.process.stdout.read()


def subprocess_env(**extra: str) -> dict[str, str]:
    """The test process's environment, loopback-only, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_"))}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(ROOT), NO_PROXY="*", no_proxy="*")
    # A durable store of its own (a replica restarted with this environment resumes it).
    env["CP_OBSERVE_DATA_DIR"] = tempfile.mkdtemp(prefix="cp-observe-data-")
    env.update(extra)
    return env


# --- the application ----------------------------------------------------------------------------------------------
DOCS = list(TURN_DOCS)
QUESTION = TURN_QUERY
ANSWER = TURN_ANSWER


def run_app(args: argparse.Namespace) -> int:
    """A decorated RAG app, capture-only, exporting over the real OTLP exporter chosen by ``--protocol``."""
    os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc" if args.protocol == "grpc" else "http/protobuf"
    os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", "100")
    os.environ.setdefault("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64")
    from opentelemetry import trace
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    import cp_observe
    from cp_observe import _names as n

    quiet = {"meter_provider": MeterProvider(), "logger_provider": LoggerProvider()}  # spans are what we test
    if args.protocol == "json":
        provider = TracerProvider(resource=Resource.create({"service.name": args.service}))
        provider.add_span_processor(BatchSpanProcessor(OtlpJsonSpanExporter(f"{args.endpoint}/v1/traces")))
        assert cp_observe.configure(capture_only=True, sample_rate=args.sample_rate, tracer_provider=provider,
                                    **quiet) is None
    else:
        assert cp_observe.configure(capture_only=True, sample_rate=args.sample_rate, otlp_endpoint=args.endpoint,
                                    service_name=args.service, **quiet) is None
        provider = trace.get_tracer_provider()  # type: ignore[assignment]
    produced: list[dict[str, Any]] = []

    class Recorder(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            for span in spans:
                if span.name.startswith("retrieval") and span.context is not None:
                    produced.append({"trace_id": f"{span.context.trace_id:032x}",
                                     "span_id": f"{span.context.span_id:016x}",
                                     "sampled": bool((span.attributes or {}).get(n.CP_SAMPLED))})
            return SpanExportResult.SUCCESS

    provider.add_span_processor(SimpleSpanProcessor(Recorder()))

    turn = make_turn(docs=DOCS)
    search, answer = turn.search, turn.ask

    def turns(first: int, last: int) -> None:
        for i in range(first, last):
            if i % 5 == 4:
                search(f"capital cities {i}")  # no agent: judged against its query
            else:
                answer(QUESTION)
            if args.pace:
                time.sleep(args.pace)  # simulated traffic, not a wait for anything

    half = args.turns // 2
    turns(0, half)
    if args.pause:
        provider.force_flush()
        print("half", flush=True)
        sys.stdin.readline()
    turns(half, args.turns)
    provider.shutdown()  # flushes the batch processor through the real exporter
    Path(args.out).write_text(json.dumps(produced))
    print("done", flush=True)
    return 0


def app_command(endpoint: str, protocol: str, out: Path, *, turns: int = 10, sample_rate: float = 1.0,
                service: str = "rag-app", pace: float = 0.0, pause: bool = False) -> list[str]:
    """The command line of one app process."""
    command = [sys.executable, "-m", "tests.serve_support", "app", "--endpoint", endpoint, "--protocol", protocol,
               "--out", str(out), "--turns", str(turns), "--sample-rate", str(sample_rate), "--service", service,
               "--pace", str(pace)]
    return [*command, "--pause"] if pause else command


def produced(path: Path) -> list[dict[str, Any]]:
    """The retrieval spans an app wrote."""
    return list(json.loads(path.read_text()))


def stop_by_signal(process: subprocess.Popen[str], sig: int, ready: Callable[[], None]) -> tuple[str, str, float]:
    """Wait for ``ready()``, send ``sig``, and return the process's stdout, stderr and seconds to exit.

    The process is killed if anything fails on the way, so a test never leaves it running.
    """
    try:
        ready()
        sent = time.monotonic()
        process.send_signal(sig)
        out, err = process.communicate(timeout=30)
        return out, err, time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def read_line(process: subprocess.Popen[str]) -> str:
    """The next line a process prints (blocks until it does)."""
    assert process.stdout is not None
    return process.stdout.readline()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.serve_support app ...``."""
    parser = argparse.ArgumentParser(prog="tests.serve_support")
    commands = parser.add_subparsers(dest="command", required=True)
    app = commands.add_parser("app")
    app.add_argument("--endpoint", required=True)
    app.add_argument("--protocol", choices=("http", "grpc", "json"), required=True)
    app.add_argument("--out", required=True)
    app.add_argument("--turns", type=int, default=10)
    app.add_argument("--sample-rate", type=float, default=1.0)
    app.add_argument("--service", default="rag-app")
    app.add_argument("--pace", type=float, default=0.0)
    app.add_argument("--pause", action="store_true")
    return run_app(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
