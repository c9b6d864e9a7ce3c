"""The HTTP ports' connection layer: one asyncio loop thread, a bounded connection count, idle and slow clients closed.

Both HTTP ports (OTLP/HTTP and admin) run on aiohttp's low-level server (``aiohttp.web.Server`` and its
``RequestHandler`` protocol, llhttp parser in C), each port on its own event loop in one daemon thread, so
``start()`` and ``stop()`` stay synchronous for the service. What the door adds around aiohttp:

- **A bound on open connections** (``max_connections``). Past it, a new connection is closed as soon as it is
  accepted, before any parser is built, and counted (``too_many_connections``). The process's soft
  ``RLIMIT_NOFILE`` is raised towards the bound at start, so the bound, not ``EMFILE``, is what refuses.
- **Idle and slow clients closed.** One sweep per fraction of a second over the open connections closes a
  connection that sent nothing for ``http_idle_timeout_s`` (new or kept alive: ``idle_timeout``), and one whose
  request (headers and body, from its first byte) takes longer than ``http_read_timeout_s`` (slowloris:
  ``slow_client``). A TLS handshake that takes longer than that is a ``slow_client`` too.
- **TLS per connection.** The listening socket is plain; each accepted connection is upgraded with
  ``loop.start_tls`` using the context ``ServerTls`` holds at that moment, so a reloaded certificate applies
  to the next connection (as with the old thread-per-connection door), and a failed handshake is counted
  (``tls``), which ``create_server(ssl=...)`` would only log.

Every state change happens on the loop thread (no lock); the service's counters are called from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from aiohttp import web

from cp_observe._log import LOGGER_NAME, logger
from cp_observe.serve._limits import MAX_HEADERS, MAX_LINE, Limits, classify
from cp_observe.serve._tls import peer_identity

if TYPE_CHECKING:
    from cp_observe.serve._backend import Backend
    from cp_observe.serve._tls import ServerTls

__all__ = ["Connection", "HttpDoor"]

_LINGER_S = 2.0  # after a refusal, how long an unread body is drained so the sender sees the answer
_AIOHTTP_LOG = logging.getLogger(f"{LOGGER_NAME}.http")  # aiohttp's own lines (bugs only): quiet by default

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


class Connection(web.RequestHandler):
    """aiohttp's HTTP/1.1 protocol for one connection, plus the clocks the door's sweep reads.

    ``reading_since``: when the current request's first byte arrived (``None`` between requests and while
    it is being handled); ``idle_since``: when the connection last became idle.
    """

    __slots__ = ("_door", "closed_reason", "counted", "current", "half_closed", "handling", "idle_since", "lost",
                 "reading_since")

    def __init__(self, door: HttpDoor, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._door = door
        self.counted = False  # holds one of the door's connection slots
        self.lost = False  # connection_lost came (after a TLS handshake it can come before connection_made)
        self.closed_reason: str | None = None  # set when the door closed it (idle, slow): counted once, there
        self.handling = False
        self.half_closed = False  # the sender shut its side down: answer what it sent, then close
        self.current: web.BaseRequest | None = None  # the request being handled (set by the door's dispatch)
        self.reading_since: float | None = None
        self.idle_since = door.loop.time()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.lost:  # the TLS peer left between its handshake and this call: its slot is already given back
            return
        if not self.counted and not self._door.admit():
            _abort(transport)  # over the bound: counted by admit(); nothing was built for it beyond this object
            return
        self.counted = True
        self._door.connections.add(self)
        self.idle_since = self._door.loop.time()
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = True
        if not self.counted:
            return
        self.counted = False
        self._door.connections.discard(self)
        self._door.release()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.reading_since is None and not self.handling and data:
            self.reading_since = self._door.loop.time()
        super().data_received(data)

    def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio.Protocol's contract: True keeps it open
        """The sender half-closed: close at once when idle, else answer the request it sent first.

        aiohttp closes at once either way (its ``eof_received`` returns None), so a sender that shuts down its
        side after writing a request (``shutdown(SHUT_WR)``, as http.server served) would never see the answer.
        """
        if self._waiter is not None and not self._messages:  # waiting for a next request that cannot come
            return None
        self.half_closed = True
        if self.current is not None:
            cut_short(self.current)
        return True

    def request_read(self) -> None:
        """The handler has the whole request: the read clock stops until the answer is sent."""
        self.reading_since = None
        self.handling = True

    def request_done(self) -> None:
        """The answer is written: the connection is idle (kept alive) from now."""
        self.handling = False
        self.reading_since = None
        self.idle_since = self._door.loop.time()

    def close_for(self, reason: str) -> None:
        """Close this connection on the door's decision (idle or slow), counted once as ``reason``."""
        self.closed_reason = reason
        self._door.closed(reason, request_in_progress=self.handling or self._request_in_progress)
        self.force_close()

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """What the parser refuses (bad request line, framing, header size) or a handler's bug: counted, short."""
        if request.writer.output_size > 0:
            raise ConnectionError("the answer was already started")
        status, reason = classify(status, exc)
        text = self._door.refused_request(status, reason, type(exc).__name__ if exc is not None else "")
        response = web.Response(status=status, text=text, content_type="text/plain")
        response.force_close()
        return response


def cut_short(request: web.BaseRequest) -> None:
    """After the sender's EOF: a body still expected never comes, so its reader fails instead of waiting."""
    if not request.content.is_eof():
        request.content.set_exception(ConnectionResetError("the sender closed before the body ended"))


class _Refused(asyncio.Protocol):
    """A connection past the bound: closed as soon as it is accepted (no parser, no buffers)."""

    def __init__(self, door: HttpDoor) -> None:
        self._door = door

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._door.refused_connection()
        _abort(transport)


class _TlsAcceptor(asyncio.Protocol):
    """The first protocol of a TLS connection: upgrade it with the current context, then hand it to aiohttp."""

    def __init__(self, door: HttpDoor) -> None:
        self._door = door

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._door.admit():
            _abort(transport)
            return
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # the ClientHello waits for start_tls, which resumes reading
        task = self._door.loop.create_task(self._handshake(transport))
        self._door.handshakes.add(task)
        task.add_done_callback(self._door.handshakes.discard)

    async def _handshake(self, transport: asyncio.Transport) -> None:
        door = self._door
        connection = door.new_connection()
        connection.counted = True  # the slot admit() took moves to the connection
        assert door.tls is not None
        try:
            secure = await door.loop.start_tls(transport, connection, door.tls.context(admin=door.admin),
                                               server_side=True, ssl_handshake_timeout=door.limits.read_timeout_s)
        except (OSError, ValueError, asyncio.TimeoutError, ConnectionError) as exc:  # SSLError is an OSError
            connection.counted = False
            door.release()
            timed_out = isinstance(exc, (asyncio.TimeoutError, ConnectionAbortedError))
            door.handshake_failed("slow_client" if timed_out else "tls", type(exc).__name__)
            transport.abort()
            return
        except BaseException:
            connection.counted = False
            door.release()
            transport.abort()
            raise
        if secure is None:  # the peer went away as the handshake finished
            connection.counted = False
            door.release()
            return
        if door.tls.mutual and not door.admin:
            certificate = secure.get_extra_info("peercert") or {}
            logger.debug("mTLS sender", identity=peer_identity(certificate.get("subject")))
        connection.connection_made(secure)


class HttpDoor:
    """One HTTP port on aiohttp: bound at construction, served by ``start()`` on its own loop thread.

    Args:
        service: the service, as the doors see it.
        host, port: where to listen (port 0 picks one).
        handler: the request handler (a coroutine function of the request).
        admin: the admin port (never asks for a client certificate; its refusals are not OTLP refusals).
        limits: connection bound and timeouts.
        workers: threads of the pool ``run()`` hands CPU work to.
        name: the thread's name part.
    """

    def __init__(self, service: Backend, host: str, port: int, handler: Handler, *, admin: bool,
                 limits: Limits, workers: int, name: str) -> None:
        self.service = service
        self.admin = admin
        self.limits = limits
        self.tls: ServerTls | None = service.tls if not admin or service.settings.admin_tls else None
        self.connections: set[Connection] = set()  # loop thread only
        self.handshakes: set[asyncio.Task[None]] = set()  # loop thread only
        self._open = 0  # connection slots taken: admitted, not yet lost (loop thread only)
        self._handler = handler
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._backlog = max(128, min(limits.max_connections, 4096))  # http.server listened with a backlog of 5
        self._sock = socket.create_server((host, port), family=family, backlog=self._backlog)
        self.port = int(self._sock.getsockname()[1])
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_quiet_exceptions)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=f"cp-observe-serve-{name}-work")
        self._thread = threading.Thread(target=self._run, name=f"cp-observe-serve-{name}-{self.port}", daemon=True)
        self._server: asyncio.Server | None = None
        self._manager: web.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    # --- lifecycle (any thread) -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Serve on the loop thread; returns once the port accepts."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self.loop).result(30)

    def stop(self, grace_s: float) -> None:
        """Stop accepting, let requests in flight finish within ``grace_s``, close every connection."""
        if self._thread.is_alive():
            future = asyncio.run_coroutine_threadsafe(self._shutdown(grace_s), self.loop)
            with contextlib.suppress(Exception):
                future.result(grace_s + 5.0)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(grace_s + 5.0)
        elif self._thread.ident is None:  # never started (another port failed to bind)
            self.loop.close()
        self._sock.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run CPU work (decoding, ingestion, a metrics collection) in the pool, off the loop."""
        return await self.loop.run_in_executor(self._pool, function, *args)

    # --- on the loop thread -----------------------------------------------------------------------------------------
    async def _serve(self) -> None:
        self._manager = web.Server(self._dispatch, loop=self.loop)
        factory = self._accept_tls if self.tls is not None else self._accept
        self._server = await self.loop.create_server(factory, sock=self._sock, backlog=self._backlog)
        self._sweeper = self.loop.create_task(self._sweep())

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        connection = request.protocol
        if not isinstance(connection, Connection):  # pragma: no cover - every connection is built by this door
            return await self._handler(request)
        connection.current = request
        if connection.half_closed:
            cut_short(request)
        try:
            response = await self._handler(request)
        finally:
            connection.current = None
            connection.request_done()
        if connection.half_closed:
            response.force_close()
        return response

    def new_connection(self) -> Connection:
        """A protocol object for one connection (aiohttp's settings: no access log, no auto-decompression)."""
        assert self._manager is not None
        # aiohttp's own keep-alive timer only backs up the sweep, which closes idle connections first and counts them.
        backstop = 2 * (self.limits.idle_timeout_s + self.limits.read_timeout_s) + 60.0
        return Connection(self, self._manager, loop=self.loop, keepalive_timeout=backstop, tcp_keepalive=True,
                          logger=_AIOHTTP_LOG, access_log=None, max_line_size=MAX_LINE,
                          max_field_size=MAX_LINE, max_headers=MAX_HEADERS, lingering_time=_LINGER_S,
                          auto_decompress=False)

    def _accept(self) -> asyncio.Protocol:
        return _Refused(self) if self._open >= self.limits.max_connections else self.new_connection()

    def _accept_tls(self) -> asyncio.Protocol:
        return _Refused(self) if self._open >= self.limits.max_connections else _TlsAcceptor(self)

    def admit(self) -> bool:
        """Take a connection slot; False (and counted) when the door is full."""
        if self._open >= self.limits.max_connections:
            self.refused_connection()
            return False
        self._open += 1
        return True

    def release(self) -> None:
        """Give a connection slot back."""
        self._open -= 1

    @property
    def open_connections(self) -> int:
        """Connections holding a slot (TLS handshakes included)."""
        return self._open

    async def _sweep(self) -> None:
        """Close idle and slow connections; a pass over 10,000 connections takes a few milliseconds."""
        limits = self.limits
        interval = min(1.0, max(0.02, min(limits.idle_timeout_s, limits.read_timeout_s) / 4))
        while True:
            await asyncio.sleep(interval)
            now = self.loop.time()
            for connection in list(self.connections):
                if connection.reading_since is not None:
                    if now - connection.reading_since > limits.read_timeout_s:
                        connection.close_for("slow_client")
                elif not connection.handling and now - connection.idle_since > limits.idle_timeout_s:
                    connection.close_for("idle_timeout")

    async def _shutdown(self, grace_s: float) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        for task in list(self.handshakes):
            task.cancel()
        for connection in list(self.connections):
            if not connection.handling and connection.reading_since is None:
                connection.force_close()  # idle keep-alive connections: nobody is waiting for an answer
        if self._manager is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._manager.shutdown(grace_s), grace_s + 1.0)
        for connection in list(self.connections):
            connection.force_close()

    # --- counting: the admin port's refusals are not OTLP refusals ----------------------------------------------------
    def _record(self, reason: str, detail: str) -> None:
        if not self.admin:
            self.service.refusals.record("http", reason, detail)

    def refused_connection(self) -> None:
        """A connection closed at accept: the door holds ``max_connections`` already."""
        self._record("too_many_connections", str(self.limits.max_connections))

    def handshake_failed(self, reason: str, detail: str) -> None:
        """A TLS handshake failed (``tls``) or took too long (``slow_client``)."""
        self._record(reason, detail)

    def closed(self, reason: str, *, request_in_progress: bool) -> None:
        """The sweep closed a connection; a request it was sending counts as invalid."""
        if request_in_progress and not self.admin:
            self.service.count("http", "invalid")
        self._record(reason, "")

    def refused_request(self, status: int, reason: str, detail: str) -> str:
        """A request the parser refused (or a bug), counted; returns the answer's text."""
        if not self.admin:
            self.service.count("http", "invalid")
            self._record(reason, f"{status} {detail}".strip())
        return f"{status} {'internal error' if reason == 'internal' else 'bad request'}\n"


def _abort(transport: asyncio.BaseTransport) -> None:
    """Close at once, without flushing (nothing was written)."""
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    else:  # pragma: no cover - TCP transports are asyncio.Transport
        transport.close()


def _quiet_exceptions(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """What asyncio would print with a traceback (a failed accept, a callback's bug): one log line instead."""
    exc = context.get("exception")
    logger.warning("HTTP port event loop error", message=str(context.get("message", ""))[:200],
                   error_type=type(exc).__name__ if exc is not None else "")
