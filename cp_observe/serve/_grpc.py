"""The OTLP/gRPC front door: ``opentelemetry.proto.collector.trace.v1.TraceService/Export``.

Accepted requests answer an ``ExportTraceServiceResponse`` (with ``partial_success`` when malformed spans
were left out). Refusals: ``RESOURCE_EXHAUSTED`` with a ``RetryInfo`` when the queue is full,
``UNAVAILABLE`` with a ``RetryInfo`` while draining (both retried by the Collector and the SDKs),
``INVALID_ARGUMENT`` for a request that can never fit.
"""

from __future__ import annotations

from concurrent import futures
from typing import TYPE_CHECKING

import grpc  # type: ignore[import-untyped]  # grpcio ships no type hints (types-grpcio is not a dependency)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from cp_observe.serve._admission import Decision
from cp_observe.serve._otlp import retry_metadata

if TYPE_CHECKING:
    from cp_observe.serve._service import ScorerService

__all__ = ["GrpcFrontDoor"]

_WORKERS = 8
_REFUSALS = {
    Decision.BUSY: (grpc.StatusCode.RESOURCE_EXHAUSTED, "the scorer's queue is full; retry later"),
    Decision.DRAINING: (grpc.StatusCode.UNAVAILABLE, "the scorer is shutting down; retry"),
    Decision.TOO_LARGE: (grpc.StatusCode.INVALID_ARGUMENT, "more sampled spans than the scorer's queue can hold"),
}


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, service: ScorerService) -> None:
        self._service = service

    def Export(
        self, request: ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> ExportTraceServiceResponse:
        result = self._service.ingest(request, "grpc")
        decision = result.offer.decision
        if decision is Decision.ACCEPTED:
            response = ExportTraceServiceResponse()
            if result.rejected:
                response.partial_success.rejected_spans = result.rejected
                response.partial_success.error_message = result.error
            return response
        code, message = _REFUSALS[decision]
        if decision is not Decision.TOO_LARGE:
            context.set_trailing_metadata(retry_metadata(code.value[0], message, self._service.settings.retry_after_s))
        context.abort(code, message)
        raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


class GrpcFrontDoor:
    """A gRPC server with the trace service, bound to ``host:port`` (port 0 picks a free one)."""

    def __init__(self, service: ScorerService, host: str, port: int) -> None:
        limit = service.settings.max_request_bytes
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="cp-observe-serve-grpc"),
            options=[("grpc.max_receive_message_length", limit), ("grpc.so_reuseport", 0)],
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _TraceService(service), self._server
        )
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            bound = self._server.add_insecure_port(address)
        except RuntimeError as exc:
            raise OSError(f"cannot bind the gRPC port {address}: {exc}") from None
        if not bound:
            raise OSError(f"cannot bind the gRPC port {address}")
        self.port = bound

    def start(self) -> GrpcFrontDoor:
        """Start serving."""
        self._server.start()
        return self

    def stop(self, grace_s: float) -> None:
        """Stop accepting calls; let calls in progress finish within ``grace_s``."""
        self._server.stop(grace_s).wait(grace_s + 1.0)
