"""The OTLP/gRPC front door: ``opentelemetry.proto.collector.trace.v1.TraceService/Export``.

Accepted requests answer an ``ExportTraceServiceResponse`` (with ``partial_success`` when malformed spans
were left out). Refusals: ``RESOURCE_EXHAUSTED`` with a ``RetryInfo`` when the queue is full,
``UNAVAILABLE`` with a ``RetryInfo`` while draining (both retried by the Collector and the SDKs),
``INVALID_ARGUMENT`` for a request that can never fit or cannot be parsed, ``UNAUTHENTICATED`` without the
bearer token (when one is set), ``INTERNAL`` if our own code fails (counted; the server keeps serving).

The method is registered with a raw-bytes deserializer so that unreadable requests reach this code, where
they are counted by reason, instead of failing inside grpcio. It is registered as client-streaming (the
same bytes on the wire as unary: one message, then the half-close), so the handler runs when the call
starts and sees grpcio end the call before its message arrived: a message over ``max_request_bytes``
(``RESOURCE_EXHAUSTED``, on the wire or decompressed, checked by grpcio itself so an oversized message is
never buffered), or a client that cancelled or ran out of deadline meanwhile. grpcio does not say which of
these it was, so they are counted together as ``receive_failed``. Under load grpcio can also end such a call's
request stream as if it were empty (no error, the call sometimes still active): that call is then counted as a
``parse`` refusal, exactly once either way. A failed TLS handshake on the gRPC port
is not counted: grpcio ends the connection in its C core before any call exists, and its Python API has no
hook for it (its log, ``GRPC_VERBOSITY=debug``, shows it).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from concurrent import futures
from typing import TYPE_CHECKING, Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no type hints (types-grpcio is not a dependency)
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from cp_observe._log import LOGGER_NAME, logger
from cp_observe.serve._admission import Decision
from cp_observe.serve._otlp import retry_metadata

if TYPE_CHECKING:
    from cp_observe.serve._backend import Backend

__all__ = ["GrpcFrontDoor"]

_WORKERS = 8
_DEBUG = functools.partial(logging.getLogger(LOGGER_NAME).isEnabledFor, logging.DEBUG)
_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_REFUSALS = {
    Decision.BUSY: (grpc.StatusCode.RESOURCE_EXHAUSTED, "the scorer's queue is full; retry later"),
    Decision.DRAINING: (grpc.StatusCode.UNAVAILABLE, "the scorer is shutting down; retry"),
    Decision.TOO_LARGE: (grpc.StatusCode.INVALID_ARGUMENT, "more sampled spans than the scorer's queue can hold"),
}


class _TraceService:
    """``TraceService/Export`` over raw bytes: authenticate, parse, admit; every refusal counted by reason."""

    def __init__(self, service: Backend) -> None:
        self._service = service

    def _receive_failed(self) -> ExportTraceServiceResponse:
        self._service.count("grpc", "receive_failed")
        self._service.refusals.record("grpc", "receive_failed", "RESOURCE_EXHAUSTED or CANCELLED")
        return ExportTraceServiceResponse()  # nobody is left to read it

    def export(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        try:
            raw = next(requests, None)
        except grpc.RpcError:  # grpcio ended the call first: too large, cancelled or past its deadline
            return self._receive_failed()
        if raw is None and not context.is_active():
            # The same, seen a moment later: grpcio had already ended the call, and the request stream just
            # ends instead of raising (under load, CI saw it). A client's empty stream leaves the call active.
            return self._receive_failed()
        if raw is None or next(requests, None) is not None:
            self._service.count("grpc", "invalid")
            self._service.refusals.record("grpc", "parse", "not exactly one message")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "Export takes exactly one request message")
            raise AssertionError("unreachable: context.abort raises")  # pragma: no cover
        code, message, trailing = self._handle(raw, context)
        if code is None:
            assert isinstance(message, ExportTraceServiceResponse)
            return message
        if trailing:
            context.set_trailing_metadata(trailing)
        context.abort(code, str(message))  # raises: outside every try below, so it is never mistaken for a bug
        raise AssertionError("unreachable: context.abort raises")  # pragma: no cover

    def _handle(self, raw: bytes, context: grpc.ServicerContext) -> tuple[Any, Any, tuple[Any, ...]]:
        """``(None, response, ())`` when accepted, else ``(code, message, trailing metadata)``."""
        service = self._service
        try:
            authorization = next((value for key, value in context.invocation_metadata() or ()
                                  if key == "authorization" and isinstance(value, str)), None)
            unauthenticated = service.tokens.check(authorization)
            if unauthenticated is not None:
                service.count("grpc", "unauthenticated")
                service.refusals.record("grpc", unauthenticated, "UNAUTHENTICATED")
                return grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token", ()
            try:
                request = ExportTraceServiceRequest.FromString(raw)
            except (DecodeError, RecursionError) as exc:
                service.count("grpc", "invalid")
                service.refusals.record("grpc", "parse", "INVALID_ARGUMENT")
                return grpc.StatusCode.INVALID_ARGUMENT, f"invalid protobuf: {str(exc)[:200]}", ()
            if service.tls is not None and service.tls.mutual and _DEBUG():
                names = (context.auth_context() or {}).get("x509_common_name") or [b""]
                logger.debug("mTLS sender", identity=names[0].decode("utf-8", "replace"))
            result = service.ingest(request, "grpc")
        except Exception as exc:  # noqa: BLE001 - a bug must cost one request, not the server's worker
            service.refusals.record("grpc", "internal", type(exc).__name__)
            return grpc.StatusCode.INTERNAL, "the scorer failed to read the request", ()
        decision = result.offer.decision
        if decision is Decision.ACCEPTED:
            response = ExportTraceServiceResponse()
            if result.rejected:
                response.partial_success.rejected_spans = result.rejected
                response.partial_success.error_message = result.error
            return None, response, ()
        code, message = _REFUSALS[decision]
        trailing = () if decision is Decision.TOO_LARGE else retry_metadata(
            code.value[0], message, service.settings.retry_after_s)
        return code, message, trailing


class GrpcFrontDoor:
    """A gRPC server with the trace service, bound to ``host:port`` (port 0 picks a free one)."""

    def __init__(self, service: Backend, host: str, port: int) -> None:
        limit = service.settings.max_request_bytes
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="cp-observe-serve-grpc"),
            options=[("grpc.max_receive_message_length", limit), ("grpc.so_reuseport", 0)],
        )
        export = grpc.stream_unary_rpc_method_handler(  # see the module docstring: unary on the wire
            _TraceService(service).export, request_deserializer=None,
            response_serializer=ExportTraceServiceResponse.SerializeToString,
        )
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, {"Export": export}),))
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            if service.tls is not None:
                bound = self._server.add_secure_port(address, service.tls.grpc_credentials())
            else:
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
