"""The OTLP/HTTP front door (``POST /v1/traces``) and the admin port (health, readiness, metrics, stats).

OTLP/HTTP: ``application/x-protobuf`` or ``application/json`` bodies, optionally ``gzip``/``deflate``;
the answer uses the request's encoding. Refusals: 429 (queue full) and 503 (draining) with
``Retry-After``, both retried by the Collector and the SDK exporters; 413 for a request that can never
fit; 400/411/415 for what cannot be read. Error bodies are ``google.rpc.Status`` messages, as OTLP asks.

Admin: ``GET /healthz`` (the process serves), ``GET /readyz`` (started, not draining, below the
high-water mark; 503 with the reason otherwise), ``GET /metrics`` (Prometheus text) and ``GET /stats``
(the accounting as JSON).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no type hints
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from cp_observe.serve._admission import Decision
from cp_observe.serve._otlp import (
    JSON,
    PROTOBUF,
    BadRequest,
    decode_body,
    encode_response,
    encode_status,
    http_retry_after,
)

if TYPE_CHECKING:
    from cp_observe.serve._service import ScorerService

__all__ = ["AdminServer", "OtlpHttpServer"]

_TRACES_PATH = "/v1/traces"
_IDLE_TIMEOUT_S = 60.0
_REFUSALS = {
    Decision.BUSY: (HTTPStatus.TOO_MANY_REQUESTS, grpc.StatusCode.RESOURCE_EXHAUSTED, "the scorer's queue is full"),
    Decision.DRAINING: (HTTPStatus.SERVICE_UNAVAILABLE, grpc.StatusCode.UNAVAILABLE, "the scorer is shutting down"),
    Decision.TOO_LARGE: (HTTPStatus.REQUEST_ENTITY_TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT,
                         "more sampled spans than the scorer's queue can hold; send smaller batches"),
}


class _Server(ThreadingHTTPServer):
    """A threading HTTP server that knows its service and can close idle keep-alive connections."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], service: ScorerService) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.service = service
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()  # guards _connections
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Shut down every open connection (handlers waiting on an idle keep-alive connection see EOF)."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = _IDLE_TIMEOUT_S
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the service counts requests in its metrics instead."""

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _OtlpHandler(_Handler):
    def do_POST(self) -> None:
        """Receive one OTLP trace request."""
        service = self.server.service
        media = JSON if self.headers.get("Content-Type", "").lower().startswith(JSON) else PROTOBUF
        if self.path.split("?", 1)[0] != _TRACES_PATH:
            self.close_connection = True
            self._fail(HTTPStatus.NOT_FOUND, media, f"no such path; send traces to {_TRACES_PATH}")
            return
        length_header = self.headers.get("Content-Length")
        if length_header is None or not length_header.strip().isdigit():
            self.close_connection = True
            self._fail(HTTPStatus.LENGTH_REQUIRED, media, "Content-Length is required")
            return
        length = int(length_header)
        limit = service.settings.max_request_bytes
        if length > limit:
            self.close_connection = True
            self._fail(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, media, f"request larger than {limit} bytes")
            return
        body = self.rfile.read(length)
        try:
            request = decode_body(body, self.headers.get("Content-Type", ""),
                                  self.headers.get("Content-Encoding", ""), limit)
        except BadRequest as exc:
            service.count("http", "invalid")
            self._fail(exc.status, media, str(exc))
            return
        result = service.ingest(request, "http")
        decision = result.offer.decision
        if decision is Decision.ACCEPTED:
            self._send(HTTPStatus.OK, encode_response(media, result.rejected, result.error), media)
            return
        status, code, message = _REFUSALS[decision]
        retry = service.settings.retry_after_s if decision is not Decision.TOO_LARGE else None
        headers = {"Retry-After": http_retry_after(retry)} if retry is not None else None
        self._send(status, encode_status(media, code.value[0], message, retry), media, headers)

    def do_GET(self) -> None:
        """Only POST is served here."""
        self.close_connection = True
        status = HTTPStatus.METHOD_NOT_ALLOWED if self.path.split("?", 1)[0] == _TRACES_PATH else HTTPStatus.NOT_FOUND
        self._fail(status, PROTOBUF, "send traces with POST /v1/traces", {"Allow": "POST"})

    def _fail(self, status: int, media: str, message: str, headers: dict[str, str] | None = None) -> None:
        code = grpc.StatusCode.INVALID_ARGUMENT if status < 500 else grpc.StatusCode.INTERNAL
        self._send(status, encode_status(media, code.value[0], message), media, headers)


class _AdminHandler(_Handler):
    def do_GET(self) -> None:
        """Health, readiness, metrics and stats."""
        service = self.server.service
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")
        elif path == "/readyz":
            ready, reason = service.ready()
            status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
            self._send(status, f"{reason}\n".encode(), "text/plain; charset=utf-8")
        elif path == "/metrics":
            self._send(HTTPStatus.OK, generate_latest(service.registry), CONTENT_TYPE_LATEST)
        elif path == "/stats":
            body = json.dumps(service.stats(), sort_keys=True).encode()
            self._send(HTTPStatus.OK, body, "application/json")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found: try /healthz, /readyz, /metrics or /stats\n",
                       "text/plain; charset=utf-8")

    do_HEAD = do_GET


class _HttpServer:
    """Serve ``handler`` on ``host:port`` in a daemon thread."""

    handler: type[BaseHTTPRequestHandler] = _Handler
    name = "http"

    def __init__(self, service: ScorerService, host: str, port: int) -> None:
        self._httpd = _Server((host, port), self.handler, service)
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
            name=f"cp-observe-serve-{self.name}-{self.port}", daemon=True,
        )

    def start(self) -> _HttpServer:
        """Start serving."""
        self._thread.start()
        return self

    def stop(self, grace_s: float) -> None:
        """Stop accepting, close idle connections and the listening socket."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(grace_s + 1.0)
        self._httpd.close_connections()
        self._httpd.server_close()


class OtlpHttpServer(_HttpServer):
    """The OTLP/HTTP front door."""

    handler = _OtlpHandler
    name = "otlp-http"


class AdminServer(_HttpServer):
    """``/healthz``, ``/readyz``, ``/metrics`` and ``/stats``."""

    handler = _AdminHandler
    name = "admin"
