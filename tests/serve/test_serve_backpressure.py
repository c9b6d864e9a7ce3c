"""Backpressure, draining, health and readiness of ``cp-observe serve``: refuse whole requests, drop none accepted."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult

from cp_observe import Judgement, Usage, Verdict
from tests.serve_support import GatedJudge, OtlpSink, get, post, retrieval_request, retrieval_spans, start_service

#: Each test restores the process-wide runtime a service installs (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("serve_state_restored")


@pytest.fixture
def gated() -> Iterator[GatedJudge]:
    """A judge held until the test opens its gate (always opened at the end, so nothing hangs)."""
    judge = GatedJudge()
    yield judge
    judge.gate.set()


def _refusal_seen(service: Any, result: str) -> threading.Event:
    """An event set when the service counts a request with ``result`` (wraps its own counter, nothing mocked)."""
    seen = threading.Event()
    count = service.count

    def counting(protocol: str, outcome: str, spans: int = 0) -> None:
        count(protocol, outcome, spans)
        if outcome == result:
            seen.set()

    service.count = counting
    return seen


def test_http_full_queue_answers_429_and_the_exporter_retry_succeeds(sink: OtlpSink, gated: GatedJudge) -> None:
    """A full queue refuses the whole request with 429 + Retry-After; the real exporter retries and gets in."""
    with start_service(sink, gated, queue_size=2, concurrency=1) as service:
        url = f"http://127.0.0.1:{service.port('http')}/v1/traces"
        assert post(url, retrieval_request(1))[0] == 200
        assert gated.entered.acquire(timeout=10)  # being judged: occupancy 2 of 2
        status, headers, body = post(url, retrieval_request(1))
        assert (status, headers["Retry-After"]) == (429, "1")
        assert RpcStatus.FromString(body).code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        busy = _refusal_seen(service, "busy")
        exporter = HttpSpanExporter(endpoint=url, timeout=15)
        with ThreadPoolExecutor(1) as pool:
            result = pool.submit(exporter.export, retrieval_spans(1))
            assert busy.wait(10)  # the exporter was refused once ...
            gated.gate.set()  # ... the queue drains ...
            assert result.result(timeout=20) is SpanExportResult.SUCCESS  # ... and its retry got in
        exporter.shutdown()
        assert service.flush(20)
        stats = service.stats()
    assert (stats["sampled"], stats["scored"], stats["dropped"]) == (2, 2, 0)
    assert stats["requests"]["http:busy"] == 2


def test_grpc_full_queue_answers_resource_exhausted_with_retry_info(sink: OtlpSink, gated: GatedJudge) -> None:
    """gRPC refuses with RESOURCE_EXHAUSTED carrying RetryInfo both ways; the real gRPC exporter's retry gets in."""
    with start_service(sink, gated, queue_size=2, concurrency=1, retry_after_s=0.25) as service:
        endpoint = f"127.0.0.1:{service.port('grpc')}"
        with grpc.insecure_channel(endpoint) as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            stub.Export(ExportTraceServiceRequest.FromString(retrieval_request(1)), timeout=10)
            assert gated.entered.acquire(timeout=10)
            with pytest.raises(grpc.RpcError) as refused:
                stub.Export(ExportTraceServiceRequest.FromString(retrieval_request(1)), timeout=10)
        error = refused.value
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        trailers = dict(error.trailing_metadata())
        info = RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
        assert (info.retry_delay.seconds, info.retry_delay.nanos) == (0, 250_000_000)
        [detail] = RpcStatus.FromString(trailers["grpc-status-details-bin"]).details
        assert detail.Unpack(info) and info.retry_delay.nanos == 250_000_000
        busy = _refusal_seen(service, "busy")
        exporter = GrpcSpanExporter(endpoint=endpoint, insecure=True, timeout=15)
        with ThreadPoolExecutor(1) as pool:
            result = pool.submit(exporter.export, retrieval_spans(2))
            assert busy.wait(10)
            gated.gate.set()
            assert result.result(timeout=20) is SpanExportResult.SUCCESS
        exporter.shutdown()
        assert service.flush(20)
        stats = service.stats()
    assert (stats["sampled"], stats["scored"], stats["dropped"]) == (3, 3, 0)


class SlowJudge:
    """Takes a little time per call, so concurrent senders fill a small queue."""

    model = "slow"

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Judgement:
        await asyncio.sleep(0.02)
        return Judgement(tuple(Verdict(i, i == 0) for i in range(len(contexts))), "slow", Usage(1, 1, 1))


def test_accepted_requests_are_never_dropped_under_concurrent_pressure(sink: OtlpSink) -> None:
    """Many senders at once on a tiny queue: every accepted retrieval is scored, nothing is dropped."""
    bodies = [retrieval_request(1 + i % 3) for i in range(120)]
    with start_service(sink, SlowJudge(), queue_size=6, concurrency=2) as service:
        url = f"http://127.0.0.1:{service.port('http')}/v1/traces"
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda body: post(url, body)[0], bodies))
        assert service.flush(60)
        stats = service.stats()
    accepted = sum(1 + i % 3 for i, status in enumerate(statuses) if status == 200)
    assert set(statuses) <= {200, 429}
    assert statuses.count(429) > 0, "the queue never filled: the test exerted no pressure"
    assert stats["sampled"] == stats["scored"] == accepted
    assert (stats["dropped"], stats["failed"], stats["skipped"], stats["pending"]) == (0, 0, 0, 0)


def test_request_larger_than_the_queue(sink: OtlpSink, gated: GatedJudge) -> None:
    """Bigger than the queue: accepted when idle (below 2x), refused for good (413) at 2x or more."""
    with start_service(sink, gated, queue_size=2, concurrency=4) as service:
        url = f"http://127.0.0.1:{service.port('http')}/v1/traces"
        assert post(url, retrieval_request(4))[0] == 413
        assert post(url, retrieval_request(3))[0] == 200
        assert gated.entered.acquire(timeout=10)
        assert post(url, retrieval_request(3))[0] == 429
        gated.gate.set()
        assert service.flush(20)
        stats = service.stats()
    assert (stats["scored"], stats["dropped"]) == (3, 0)


def test_health_readiness_metrics_and_draining(sink: OtlpSink, gated: GatedJudge) -> None:
    """/readyz follows the high-water mark and the drain; SIGTERM-style stop refuses new work and judges the rest."""
    service = start_service(sink, gated, queue_size=4, concurrency=1, ready_high_water=0.5)
    admin = f"http://127.0.0.1:{service.port('admin')}"
    url = f"http://127.0.0.1:{service.port('http')}/v1/traces"
    try:
        assert get(f"{admin}/healthz") == (200, "ok\n")
        assert get(f"{admin}/readyz") == (200, "ready\n")
        assert post(url, retrieval_request(1))[0] == 200
        assert gated.entered.acquire(timeout=10)
        status, reason = get(f"{admin}/readyz")
        assert status == 503 and "high-water" in reason
        status, metrics = get(f"{admin}/metrics")
        assert status == 200
        assert re.search(r'context_precision_serve_requests_total\{[^}]*protocol="http",result="accepted"', metrics)
        assert "context_precision_serve_occupancy" in metrics
        stats = json.loads(get(f"{admin}/stats")[1])
        assert (stats["sampled"], stats["pending"], stats["queue_size"]) == (1, 1, 4)
        assert get(f"{admin}/nope")[0] == 404

        draining = _refusal_seen(service, "draining")
        drain_started = threading.Event()
        drain = service.admission.drain

        def drain_and_tell() -> None:
            drain()
            drain_started.set()

        service.admission.drain = drain_and_tell
        with ThreadPoolExecutor(1) as pool:
            stopping = pool.submit(service.stop)
            assert drain_started.wait(10)  # stop() refuses new work first, then waits for the judge
            status, headers, _ = post(url, retrieval_request(1))
            assert (status, headers["Retry-After"]) == (503, "1")
            with grpc.insecure_channel(f"127.0.0.1:{service.port('grpc')}") as channel, \
                    pytest.raises(grpc.RpcError) as refused:
                trace_service_pb2_grpc.TraceServiceStub(channel).Export(
                    ExportTraceServiceRequest.FromString(retrieval_request(1)), timeout=10)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
            assert draining.is_set()
            assert get(f"{admin}/readyz") == (503, "draining\n")
            gated.gate.set()
            assert stopping.result(timeout=30) is True  # drained in time
        stats = service.stats()
    finally:
        gated.gate.set()
        service.stop()
    assert (stats["sampled"], stats["scored"], stats["dropped"]) == (1, 1, 0)
    assert sink.wait_for(lambda s: len(s.evaluations) == 1)  # flushed on the way out
