"""The OTLP/HTTP front door (``POST /v1/traces``) and the admin port (health, readiness, metrics, stats).

OTLP/HTTP: ``application/x-protobuf`` or ``application/json`` bodies, optionally ``gzip``/``deflate``;
the answer uses the request's encoding. Refusals: 429 (queue full) and 503 (draining) with
``Retry-After``, both retried by the Collector and the SDK exporters; 413 for a request that can never
fit; 400/411/415 for what cannot be read; 401 without the bearer token (when one is set). Bodies come
framed by ``Content-Length`` or ``Transfer-Encoding: chunked`` (the Node.js exporter's), both held to
``max_request_bytes``. Error bodies are ``google.rpc.Status`` messages, as OTLP asks. Every refusal is
counted by reason (``_refusals``). With TLS set, each connection's handshake runs in its own thread.

Admin: ``GET /healthz`` (the process serves), ``GET /readyz`` (started, not draining, below the
high-water mark; 503 with the reason otherwise), ``GET /metrics`` (Prometheus text) and ``GET /stats``
(the accounting as JSON).
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no type hints
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from cp_observe._log import logger
from cp_observe.serve._admission import Decision
from cp_observe.serve._framing import ClientGone, read_chunked
from cp_observe.serve._otlp import (
    JSON,
    PROTOBUF,
    BadRequest,
    decode_body,
    encode_response,
    encode_status,
    http_retry_after,
)
from cp_observe.serve._tls import peer_identity

if TYPE_CHECKING:
    from cp_observe.serve._backend import Backend
    from cp_observe.serve._tls import ServerTls

__all__ = ["AdminServer", "OtlpHttpServer"]

_TRACES_PATH = "/v1/traces"
_IDLE_TIMEOUT_S = 60.0
_HANDSHAKE_TIMEOUT_S = 10.0
_REFUSALS = {
    Decision.BUSY: (HTTPStatus.TOO_MANY_REQUESTS, grpc.StatusCode.RESOURCE_EXHAUSTED, "the scorer's queue is full"),
    Decision.DRAINING: (HTTPStatus.SERVICE_UNAVAILABLE, grpc.StatusCode.UNAVAILABLE, "the scorer is shutting down"),
    Decision.TOO_LARGE: (HTTPStatus.REQUEST_ENTITY_TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT,
                         "more sampled spans than the scorer's queue can hold; send smaller batches"),
}


class _Server(ThreadingHTTPServer):
    """A threading HTTP server that knows its service, speaks TLS when told, and can close idle connections."""

    daemon_threads = True
    protocol = "http"  # the refusal counters' protocol label

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], service: Backend,
                 tls: ServerTls | None, admin: bool) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.service = service
        self.tls = tls
        self.admin = admin
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()  # guards _connections
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Handle one connection in its own thread: the TLS handshake first, so a slow one blocks nobody."""
        with contextlib.suppress(OSError):
            # Small writes (TLS 1.3 session tickets, then the answer; or headers, then a JSON body) must not wait
            # for the sender's delayed ACK: Nagle's algorithm cost ~40 ms per new TLS connection.
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(_HANDSHAKE_TIMEOUT_S)
        try:
            secure = self.tls.context(admin=self.admin).wrap_socket(request, server_side=True)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError: plaintext, unknown CA, no client cert
            if not self.admin:
                self.service.refusals.record(self.protocol, "tls", type(exc).__name__)
            return
        with self._connections_lock:
            self._connections.discard(request)  # wrap_socket detached it: the TLS socket owns the descriptor
            self._connections.add(secure)
        if self.tls.mutual and not self.admin:
            logger.debug("mTLS sender", identity=peer_identity((secure.getpeercert() or {}).get("subject")))
        try:
            super().finish_request(secure, client_address)
        finally:
            with self._connections_lock:
                self._connections.discard(secure)
            with contextlib.suppress(OSError):
                secure.shutdown(socket.SHUT_RDWR)
            secure.close()

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A handler escaped with an exception (a bug): one log line, no traceback on stderr."""
        exc = sys.exc_info()[1]
        logger.warning("HTTP connection failed", error_type=type(exc).__name__)

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

    def _unauthenticated(self) -> str | None:
        """The refusal reason when a token is required and missing or wrong (the value is never kept)."""
        return self.server.service.tokens.check(self.headers.get("Authorization"))


class _OtlpHandler(_Handler):
    def do_POST(self) -> None:
        """Receive one OTLP trace request; any failure of ours becomes a counted 500, never a dropped connection."""
        media = JSON if self.headers.get("Content-Type", "").lower().startswith(JSON) else PROTOBUF
        try:
            self._receive(media)
        except (OSError, ClientGone) as exc:
            self.close_connection = True  # the sender went away or timed out mid-body: nobody to answer
            self.server.service.count("http", "invalid")
            self.server.service.refusals.record("http", "incomplete", type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - a bug must cost one request, not the handler thread
            self.close_connection = True
            self._refuse(HTTPStatus.INTERNAL_SERVER_ERROR, media, "internal", "the scorer failed to read the request",
                         detail=type(exc).__name__)

    def _receive(self, media: str) -> None:
        service = self.server.service
        unauthenticated = self._unauthenticated()
        if unauthenticated is not None:
            self.close_connection = True  # the body is left unread
            self._refuse(HTTPStatus.UNAUTHORIZED, media, unauthenticated, "missing or invalid bearer token",
                         {"WWW-Authenticate": 'Bearer realm="cp-observe"'}, code=grpc.StatusCode.UNAUTHENTICATED)
            return
        if self.path.split("?", 1)[0] != _TRACES_PATH:
            self.close_connection = True
            self._refuse(HTTPStatus.NOT_FOUND, media, "path", f"no such path; send traces to {_TRACES_PATH}")
            return
        limit = service.settings.max_request_bytes
        try:
            body = self._read_body(limit)
        except BadRequest as exc:
            self.close_connection = True
            too_large = exc.status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
            self._refuse(exc.status, media, "too_large" if too_large else "length", str(exc))
            if too_large and self.headers.get("Transfer-Encoding") is None:
                self._discard(int(self.headers.get("Content-Length", "0")), limit)
            return
        try:
            request = decode_body(body, self.headers.get("Content-Type", ""),
                                  self.headers.get("Content-Encoding", ""), limit)
        except BadRequest as exc:
            service.count("http", "invalid")
            self._refuse(exc.status, media, exc.reason, str(exc), count_request=False)
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

    def _read_body(self, limit: int) -> bytes:
        """The body, framed by Content-Length or ``Transfer-Encoding: chunked``, at most ``limit`` bytes.

        Raises:
            BadRequest: no usable framing (411 or 400), or more than ``limit`` bytes on the wire (413).
        """
        transfer = self.headers.get("Transfer-Encoding")
        length_header = self.headers.get("Content-Length")
        if transfer is not None:
            if length_header is not None:  # both: a request-smuggling shape (RFC 9112 6.1): refuse, never guess
                raise BadRequest("both Transfer-Encoding and Content-Length", 400)
            if transfer.strip().lower() != "chunked":
                raise BadRequest("unsupported Transfer-Encoding; use chunked or Content-Length", 400)
            return read_chunked(self.rfile, limit)
        if length_header is None or not length_header.strip().isdigit():
            raise BadRequest("Content-Length (or Transfer-Encoding: chunked) is required", 411)
        length = int(length_header)
        if length > limit:
            raise BadRequest(f"request larger than {limit} bytes", 413)
        body = self.rfile.read(length)
        if len(body) < length:
            raise ClientGone()
        return body

    def _discard(self, length: int, limit: int) -> None:
        """Read and drop up to ``limit`` bytes of a refused body; larger bodies are cut off.

        Most HTTP/1.1 clients write the whole body before reading: they then see the 413, not a broken pipe.
        """
        remaining = min(length, limit)
        with contextlib.suppress(OSError):
            while remaining > 0:
                piece = self.rfile.read(min(remaining, 64 << 10))
                if not piece:
                    return
                remaining -= len(piece)

    def do_GET(self) -> None:
        """Only POST is served here."""
        self.close_connection = True
        media = PROTOBUF
        unauthenticated = self._unauthenticated()
        if unauthenticated is not None:
            self._refuse(HTTPStatus.UNAUTHORIZED, media, unauthenticated, "missing or invalid bearer token",
                         {"WWW-Authenticate": 'Bearer realm="cp-observe"'}, code=grpc.StatusCode.UNAUTHENTICATED)
            return
        status = HTTPStatus.METHOD_NOT_ALLOWED if self.path.split("?", 1)[0] == _TRACES_PATH else HTTPStatus.NOT_FOUND
        self._refuse(status, media, "path", "send traces with POST /v1/traces", {"Allow": "POST"})

    do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library refuses what it cannot parse (bad request line, huge headers): count that too."""
        self.server.service.count("http", "invalid")
        self.server.service.refusals.record("http", "malformed", str(int(code)))
        super().send_error(code, message, explain)

    def _refuse(self, status: int, media: str, reason: str, message: str, headers: dict[str, str] | None = None,
                *, code: Any = None, count_request: bool = True, detail: str = "") -> None:
        """Count and (rate-limited) log the refusal, then answer with a ``google.rpc.Status`` body."""
        service = self.server.service
        if count_request:
            service.count("http", "unauthenticated" if status == HTTPStatus.UNAUTHORIZED else "invalid")
        service.refusals.record("http", reason, detail or str(int(status)))
        if code is None:
            code = grpc.StatusCode.INVALID_ARGUMENT if status < 500 else grpc.StatusCode.INTERNAL
        self._send(status, encode_status(media, code.value[0], message), media, headers)


class _AdminHandler(_Handler):
    def do_GET(self) -> None:
        """Health, readiness, metrics and stats (the last two behind the bearer token when one is set)."""
        service = self.server.service
        path = self.path.split("?", 1)[0]
        if path in ("/metrics", "/stats") and service.settings.admin_auth and self._unauthenticated() is not None:
            self._send(HTTPStatus.UNAUTHORIZED, b"missing or invalid bearer token\n", "text/plain; charset=utf-8",
                       {"WWW-Authenticate": 'Bearer realm="cp-observe"'})
        elif path == "/healthz":
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

    def __init__(self, service: Backend, host: str, port: int) -> None:
        admin = self.handler is _AdminHandler
        tls = service.tls if not admin or service.settings.admin_tls else None
        self._httpd = _Server((host, port), self.handler, service, tls, admin)
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
