"""The OTLP/HTTP front door (``POST /v1/traces``), on aiohttp; the admin port is in ``_admin_http``.

OTLP/HTTP: ``application/x-protobuf`` or ``application/json`` bodies, optionally ``gzip``/``deflate``;
the answer uses the request's encoding. Refusals: 429 (queue full) and 503 (draining) with
``Retry-After``, both retried by the Collector and the SDK exporters; 413 for a request that can never
fit; 400/411/415 for what cannot be read; 401 without the bearer token (when one is set); 404/405 off
``POST /v1/traces``. Bodies come framed by ``Content-Length`` or ``Transfer-Encoding: chunked`` (the Node.js
exporter's), both held to ``max_request_bytes`` on the wire and again while decompressing. Error bodies are
``google.rpc.Status`` messages, as OTLP asks. Every refusal is counted by reason (``_refusals``).

Order of checks, before any body byte is read: the bearer token, the path, the framing and the declared size;
only then does a sender that asked (``Expect: 100-continue``) get its ``100 Continue``, so an unauthenticated
sender is told 401 instead of being invited to send its body. Decoding and ingestion (the processor's
``on_end`` for every span) are CPU work: for a large or compressed body they run in a small thread pool, so the
event loop keeps accepting and reading other connections meanwhile; a small plain body is handled on the loop,
where the thread hop would cost more than the work.

Why aiohttp: measured against uvicorn (ASGI) over h11 and over httptools (``benchmarks/serve/bench_http_servers.py``),
its low-level server is on par: about 6 KiB per idle connection (h11's 4.5, httptools' 5.6) and 6,000 requests/s
on one kept-alive connection (httptools' 6,500, h11's 4,100). It decides on the rest: it is already installed
(litellm depends on it; uvicorn would add uvicorn, click and httptools), aio-libs release it every few weeks, and
it exposes the connection protocol, which the connection bound at accept, the idle and slow-client sweep and the
per-connection TLS upgrade need; ASGI hides the connection from the application, and uvicorn times out only
idle keep-alive connections (not a request's headers or body: slowloris) and loads its certificate once.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no type hints
from aiohttp import web

from cp_observe.serve._admin_http import AdminServer
from cp_observe.serve._admission import Decision
from cp_observe.serve._connections import Connection, DoorServer
from cp_observe.serve._limits import effective_limits
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
    from aiohttp.streams import StreamReader

    from cp_observe.serve._backend import Backend, Ingested

__all__ = ["AdminServer", "OtlpHttpServer"]

_TRACES_PATH = "/v1/traces"
_WORKERS = 4  # decoding and on_end are CPU work under the GIL: a few threads keep the loop free, more buy nothing
# Small plain bodies are decoded and ingested on the loop (unless durable intake makes ingest wait for an fsync):
# the hop to a worker costs more than the work (measured:
# ~2x the requests/s of one-span requests inline). Larger or compressed ones (which may inflate to the limit) go to
# the pool, so one big batch never stalls every other connection (benchmarks/HISTORY.md, "The HTTP door").
_INLINE_BYTES = 32 << 10
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_REFUSALS = {
    Decision.BUSY: (HTTPStatus.TOO_MANY_REQUESTS, grpc.StatusCode.RESOURCE_EXHAUSTED, "the scorer's queue is full"),
    Decision.DRAINING: (HTTPStatus.SERVICE_UNAVAILABLE, grpc.StatusCode.UNAVAILABLE, "the scorer is shutting down"),
    Decision.TOO_LARGE: (HTTPStatus.REQUEST_ENTITY_TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT,
                         "more sampled spans than the scorer's queue can hold; send smaller batches"),
}
_UNAUTHENTICATED = {"WWW-Authenticate": 'Bearer realm="cp-observe"'}


class OtlpHttpServer(DoorServer):
    """The OTLP/HTTP front door: ``start()``, ``stop(grace_s)`` and the bound ``port``."""

    name = "otlp-http"

    def __init__(self, service: Backend, host: str, port: int) -> None:
        s = service.settings
        limits = effective_limits(s.max_connections, s.http_idle_timeout_s, s.http_read_timeout_s,
                                  s.http_first_request_timeout_s)
        super().__init__(service, host, port, admin=False, limits=limits, workers=_WORKERS)

    @property
    def open_connections(self) -> int:
        """Connections holding a slot now (for tests and the benchmark)."""
        return self._door.open_connections

    # --- one request ----------------------------------------------------------------------------------------------
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Receive one OTLP trace request; a failure of ours becomes a counted 500, never a dropped connection."""
        media = JSON if request.headers.get("Content-Type", "").lower().startswith(JSON) else PROTOBUF
        try:
            if request.method != "POST":
                return self._not_post(request, media)
            return await self._receive(request, media)
        except (OSError, web.RequestPayloadError) as exc:  # the sender went away mid-body
            self._incomplete(request, type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - a bug must cost one request, not the connection's task
            return self._refuse(HTTPStatus.INTERNAL_SERVER_ERROR, media, "internal",
                                "the scorer failed to read the request", detail=type(exc).__name__)
        request.protocol.force_close()  # nobody is left to answer: close without one, as before
        return web.Response(status=HTTPStatus.BAD_REQUEST)

    def _incomplete(self, request: web.BaseRequest, detail: str) -> None:
        connection = request.protocol
        if isinstance(connection, Connection) and connection.closed_reason is not None:
            return  # closed by the door's sweep (slow_client), and counted there
        self._service.count("http", "invalid")
        self._service.refusals.record("http", "incomplete", detail)

    def _not_post(self, request: web.BaseRequest, media: str) -> web.StreamResponse:
        """Only POST is served here (the token is still checked first, so the paths say nothing to strangers)."""
        _request_read(request)
        unauthenticated = self._service.tokens.check(request.headers.get("Authorization"))
        if unauthenticated is not None:
            return self._refuse(HTTPStatus.UNAUTHORIZED, media, unauthenticated, "missing or invalid bearer token",
                                _UNAUTHENTICATED, code=grpc.StatusCode.UNAUTHENTICATED)
        status = HTTPStatus.METHOD_NOT_ALLOWED if request.path == _TRACES_PATH else HTTPStatus.NOT_FOUND
        return self._refuse(status, media, "path", "send traces with POST /v1/traces", {"Allow": "POST"})

    async def _receive(self, request: web.BaseRequest, media: str) -> web.StreamResponse:
        service = self._service
        unauthenticated = service.tokens.check(request.headers.get("Authorization"))
        if unauthenticated is not None:  # before the path, the framing, any 100 Continue and any body byte
            return self._refuse(HTTPStatus.UNAUTHORIZED, media, unauthenticated, "missing or invalid bearer token",
                                _UNAUTHENTICATED, code=grpc.StatusCode.UNAUTHENTICATED)
        if request.path != _TRACES_PATH:
            return self._refuse(HTTPStatus.NOT_FOUND, media, "path", f"no such path; send traces to {_TRACES_PATH}")
        limit = service.settings.max_request_bytes
        try:
            _framing(request, limit)
        except BadRequest as exc:
            too_large = exc.status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
            return self._refuse(exc.status, media, "too_large" if too_large else "length", str(exc))
        if request.headers.get("Expect", "").strip().lower() == "100-continue" and request.version >= (1, 1):
            await request.writer.write(_CONTINUE)
        try:
            body = await _read_body(request.content, limit)
        except BadRequest as exc:
            return self._refuse(exc.status, media, "too_large", str(exc))
        _request_read(request)
        headers = request.headers
        content_type, encoding = headers.get("Content-Type", ""), headers.get("Content-Encoding", "")
        try:
            # With durable intake, ingest waits for its group commit (an fsync): never on the loop.
            if (not service.settings.durable and len(body) <= _INLINE_BYTES
                    and encoding.strip().lower() in ("", "identity")):
                result = _decode_and_ingest(service, body, content_type, encoding, limit)  # < 1 ms: no thread hop
            else:
                result = await self._door.run(_decode_and_ingest, service, body, content_type, encoding, limit)
        except BadRequest as exc:
            service.count("http", "invalid")
            return self._refuse(exc.status, media, exc.reason, str(exc), count_request=False)
        decision = result.offer.decision
        if decision is Decision.ACCEPTED:
            return _answer(HTTPStatus.OK, encode_response(media, result.rejected, result.error), media)
        status, code, message = _REFUSALS[decision]
        retry = service.settings.retry_after_s if decision is not Decision.TOO_LARGE else None
        extra = {"Retry-After": http_retry_after(retry)} if retry is not None else None
        return _answer(status, encode_status(media, code.value[0], message, retry), media, extra)

    def _refuse(self, status: int, media: str, reason: str, message: str, headers: dict[str, str] | None = None,
                *, code: Any = None, count_request: bool = True, detail: str = "") -> web.StreamResponse:
        """Count and (rate-limited) log the refusal, then answer with a ``google.rpc.Status`` body and close."""
        service = self._service
        if count_request:
            service.count("http", "unauthenticated" if status == HTTPStatus.UNAUTHORIZED else "invalid")
        service.refusals.record("http", reason, detail or str(int(status)))
        if code is None:
            code = grpc.StatusCode.INVALID_ARGUMENT if status < 500 else grpc.StatusCode.INTERNAL
        response = _answer(status, encode_status(media, code.value[0], message), media, headers)
        response.force_close()  # the body, if any, is left unread (drained briefly so the sender sees this)
        return response


def _request_read(request: web.BaseRequest) -> None:
    connection = request.protocol
    if isinstance(connection, Connection):
        connection.request_read()


def _framing(request: web.BaseRequest, limit: int) -> None:
    """Check the body's framing: chunked, or a Content-Length within ``limit``.

    Raises:
        BadRequest: no usable framing (411 or 400), or a declared length over ``limit`` (413).
    """
    transfer = request.headers.get("Transfer-Encoding")
    length_header = request.headers.get("Content-Length")
    if transfer is not None:
        if length_header is not None:  # both: a request-smuggling shape (RFC 9112 6.1): refuse, never guess
            raise BadRequest("both Transfer-Encoding and Content-Length", 400)
        if transfer.strip().lower() != "chunked":
            raise BadRequest("unsupported Transfer-Encoding; use chunked or Content-Length", 400)
        return
    if length_header is None or not length_header.strip().isdigit():
        raise BadRequest("Content-Length (or Transfer-Encoding: chunked) is required", 411)
    if int(length_header) > limit:
        raise BadRequest(f"request larger than {limit} bytes", 413)


async def _read_body(content: StreamReader, limit: int) -> bytes:
    """The body, at most ``limit`` bytes (the parser decodes the chunks and holds Content-Length to its word).

    Raises:
        BadRequest: more than ``limit`` bytes arrived (413).
        OSError: the connection ended before the body did (aiohttp sets the payload's exception).
    """
    parts: list[bytes] = []
    total = 0
    while True:
        piece = await content.readany()
        if not piece:
            break
        total += len(piece)
        if total > limit:
            raise BadRequest(f"request larger than {limit} bytes", 413)
        parts.append(piece)
    return b"".join(parts)


def _decode_and_ingest(service: Backend, body: bytes, content_type: str, encoding: str, limit: int) -> Ingested:
    """In the pool: decompress (held to ``limit``), parse, convert and admit."""
    request = decode_body(body, content_type, encoding, limit)
    return service.ingest(request, "http")


def _answer(status: int, body: bytes, media: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=int(status), body=body, headers={"Content-Type": media, **(headers or {})})
