"""Misrouting is visible: replicas behind a round-robin splitter count retrievals whose parent never arrived.

Two real ``python -m cp_observe.serve`` replicas sit behind a small loopback OTLP/HTTP proxy written here. The
application's batches cut its traces where a batch span processor does: batch k holds the retrieval of trace k and
the answering agent of trace k-1. A round-robin splitter (what a plain L4/L7 load balancer does) sends each batch to
the next replica, so every retrieval reaches one replica and its answer the other: each replica skips what it got
as ``parent_missing``. The same batches behind a trace-id splitter (the Collector's ``loadbalancing`` exporter with
``routing_key: traceID``) reach one replica per trace: every retrieval is scored against its answer, nothing counted.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cp_observe import _names as n
from cp_observe.testing import FakeJudge
from tests.serve_support import DOCS, OtlpSink, Replica, free_port, post, start_service, subprocess_env

TRACES = 6
TURN_TIMEOUT_S = 1.0


def _turns(count: int) -> list[tuple[ReadableSpan, ReadableSpan]]:
    """``count`` traces made by the real SDK: an agent (the local root, carrying the answer) around a retrieval."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    for i in range(count):
        with tracer.start_as_current_span("agent", attributes={
            n.OPENINFERENCE_SPAN_KIND: n.KIND_AGENT, n.GEN_AI_AGENT_NAME: "bot",
            n.INPUT_VALUE: f"What is the capital of France? ({i})", n.OUTPUT_VALUE: "Paris is the capital of France.",
        }), tracer.start_as_current_span("retrieval kb", attributes={
            n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL,
            n.GEN_AI_DATA_SOURCE_ID: "kb", n.INPUT_VALUE: f"capital of France {i}",
            n.document_attribute(0, "content"): DOCS[0], n.document_attribute(1, "content"): DOCS[1],
        }):
            pass
    spans = list(exporter.get_finished_spans())  # in end order: retrieval, agent, retrieval, agent, ...
    return [(spans[2 * i], spans[2 * i + 1]) for i in range(count)]


def _batches(turns: list[tuple[ReadableSpan, ReadableSpan]]) -> list[bytes]:
    """Batch k: the retrieval of trace k and the agent of trace k-1 (a batch processor cuts traces anywhere)."""
    out = []
    for k in range(len(turns) + 1):
        spans = ([turns[k][0]] if k < len(turns) else []) + ([turns[k - 1][1]] if k > 0 else [])
        out.append(bytes(encode_spans(spans).SerializeToString()))
    return out


class Splitter:
    """A loopback OTLP/HTTP proxy in front of replicas: ``round_robin`` per request, or ``trace_id`` per span."""

    def __init__(self, ports: list[int], mode: str) -> None:
        self.ports = ports
        self.mode = mode
        self._next = 0
        self._lock = threading.Lock()  # guards _next
        splitter = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = 200 if all(code == 200 for code in splitter.forward(body)) else 503
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def forward(self, body: bytes) -> list[int]:
        """Send ``body`` on: whole to the next replica, or split so that each trace goes to one replica."""
        if self.mode == "round_robin":
            with self._lock:
                port, self._next = self.ports[self._next], (self._next + 1) % len(self.ports)
            return [post(f"http://127.0.0.1:{port}/v1/traces", body)[0]]
        request = ExportTraceServiceRequest.FromString(body)
        codes = []
        for index, port in enumerate(self.ports):
            part = ExportTraceServiceRequest()
            part.CopyFrom(request)
            kept = 0
            for resource_spans in part.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    mine = [s for s in scope_spans.spans if zlib.crc32(s.trace_id) % len(self.ports) == index]
                    del scope_spans.spans[:]
                    scope_spans.spans.extend(mine)
                    kept += len(mine)
            if kept:
                codes.append(post(f"http://127.0.0.1:{port}/v1/traces", part.SerializeToString())[0])
        return codes

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


def _stats(replica: Replica) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{replica.admin_port}/stats", timeout=10) as response:
        return dict(json.loads(response.read()))


def _metrics(replica: Replica) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{replica.admin_port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def _settled(replicas: list[Replica], sampled: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Poll the replicas' /stats until ``sampled`` retrievals are sampled in all and none is pending.

    The replicas are other processes: there is nothing to await but their counts.
    """
    deadline = time.monotonic() + timeout
    while True:
        stats = [_stats(replica) for replica in replicas]
        if sum(s["sampled"] for s in stats) == sampled and all(s["pending"] == 0 for s in stats) and \
                sum(s["scored"] + s["skipped"] + s["failed"] + s["dropped"] for s in stats) == sampled:
            return stats
        assert time.monotonic() < deadline, stats
        time.sleep(0.1)


@contextmanager
def _cluster(sink: OtlpSink, mode: str) -> Iterator[tuple[list[Replica], Splitter]]:
    args = ["--judge", "lexical", "--sample-rate", "1", "--turn-timeout-s", str(TURN_TIMEOUT_S), "--no-durable",
            "--otlp-endpoint", sink.url]
    http_ports = [free_port(), free_port()]
    replicas = [Replica(free_port(), free_port(), [*args, "--http-port", str(port)], subprocess_env())
                for port in http_ports]
    splitter: Splitter | None = None
    try:
        for replica in replicas:
            replica.start()
        for replica in replicas:
            replica.wait_ready()
        splitter = Splitter(http_ports, mode)
        yield replicas, splitter
    finally:
        if splitter is not None:
            splitter.close()
        for replica in replicas:
            if replica.process is not None and replica.process.poll() is None:
                replica.stop()


def _reason(stats: list[dict[str, Any]], key: str) -> int:
    return sum(s["reasons"].get(key, 0) for s in stats)


@pytest.mark.parametrize(("mode", "check"), [
    ("round_robin", lambda stats, text: _reason(stats, "skipped:parent_missing") == TRACES
     and _reason(stats, "scored:ok") == 0 and 'reason="parent_missing"' in text),
    ("trace_id", lambda stats, text: _reason(stats, "scored:ok") == TRACES
     and _reason(stats, "skipped:parent_missing") == 0 and "parent_missing" not in text),
])
def test_two_replicas_count_misrouted_retrievals_and_stay_clean_when_routed_by_trace_id(
    sink: OtlpSink, mode: str, check: Callable[[list[dict[str, Any]], str], bool]
) -> None:
    """Round-robin: every retrieval is skipped as parent_missing (and in /metrics); by trace id: all scored."""
    with _cluster(sink, mode) as (replicas, splitter):
        for body in _batches(_turns(TRACES)):
            assert post(splitter.url, body)[0] == 200
        stats = _settled(replicas, TRACES)
        text = "".join(_metrics(replica) for replica in replicas)
    assert check(stats, text), (stats, [line for line in text.splitlines() if "evaluations_total" in line])
    assert sum(s["split_traces"] for s in stats) == 0  # each replica saw its spans of a trace at once


def test_a_trace_whose_spans_arrive_far_apart_is_counted_split(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """One replica: the answer arriving after turn_timeout_s leaves its retrieval parent_missing and the trace split."""
    (retrieval, agent), = _turns(1)
    with start_service(sink, cp_observe_judge, turn_timeout_s=0.3) as service:
        url = f"http://127.0.0.1:{service.port('http')}/v1/traces"
        assert post(url, bytes(encode_spans([retrieval]).SerializeToString()))[0] == 200
        deadline = time.monotonic() + 30
        while service.stats()["reasons"].get("skipped:parent_missing") != 1:
            assert time.monotonic() < deadline, service.stats()
            time.sleep(0.05)  # the evaluator thread releases it at its deadline: nothing to await from here
        assert post(url, bytes(encode_spans([agent]).SerializeToString()))[0] == 200
        assert service.flush(30)
        stats = service.stats()
    assert stats["split_traces"] == 1 and stats["scored"] == 0 and stats["skipped"] == 1
