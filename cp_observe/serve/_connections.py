"""The HTTP ports' connection layer: one asyncio loop thread, a bounded connection count, idle and slow clients closed.

Both HTTP ports (OTLP/HTTP and admin) run on aiohttp's low-level server (``aiohttp.web.Server`` and its
``RequestHandler`` protocol, llhttp parser in C), each port on its own event loop in one daemon thread, so
``start()`` and ``stop()`` stay synchronous for the service. What the door adds around aiohttp:

- **A bound on open connections** (``max_connections``) **that never shuts the door.** At the bound, a new
  connection is admitted by closing another: the oldest one that has not yet sent its first request's headers
  (``evicted_new``), else the kept-alive connection idle longest (``evicted_idle``). A connection in the middle
  of a request (its headers read, its body arriving or its answer being made) is never chosen; only when every
  connection is (or is a TLS handshake) is the newcomer closed at accept (``too_many_connections``). So a flood
  of idle or slowloris connections costs each flood connection its slot within milliseconds, and a sender that
  connects and sends at once is answered; without a completed request a connection holds nothing worth keeping,
  and with a bearer token set only an authenticated request completes on a kept-alive connection (a refusal
  closes it). The soft ``RLIMIT_NOFILE`` is raised at start to cover the bound plus one accept burst, so the
  bound, not ``EMFILE``, is what decides.
- **Idle and slow clients closed.** A new connection must send its first request's headers within
  ``http_first_request_timeout_s`` (``first_request_timeout``); a kept-alive connection that sends nothing for
  ``http_idle_timeout_s`` is closed (``idle_timeout``); a request (headers and body, from its first byte) that
  takes longer than ``http_read_timeout_s`` to arrive is closed (slowloris: ``slow_client``). A TLS handshake
  that takes longer than that is a ``slow_client`` too. Each of the three clocks keeps its connections in an
  insertion-ordered dict, oldest first, so a sweep (a few times a second) reads only the expired ones and one
  more, never every connection, and the eviction's choice is the first key of a dict.
- **Cheap to hold, free to close.** aiohttp's own set-up of a connection (its task, its keep-alive timer) waits
  for the connection's first byte, so a connection that never sends one is this module's object, its parser and
  its transport; and a closed connection leaves no reference cycle (``_unlink``), so it is freed at once instead
  of waiting in the collector's oldest generation. Both shorten the full collections that stall the loop while a
  flood turns connections over (``benchmarks/README.md``).
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
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from cp_observe._log import LOGGER_NAME, logger
from cp_observe.serve._limits import ACCEPT_BURST, MAX_HEADERS, MAX_LINE, Limits, classify
from cp_observe.serve._tls import peer_identity

if TYPE_CHECKING:
    from cp_observe.serve._backend import Backend
    from cp_observe.serve._tls import ServerTls

__all__ = ["Connection", "DoorServer", "HttpDoor"]

_LINGER_S = 2.0  # after a refusal, how long an unread body is drained so the sender sees the answer
_AIOHTTP_LOG = logging.getLogger(f"{LOGGER_NAME}.http")  # aiohttp's own lines (bugs only): quiet by default

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


class Connection(web.RequestHandler):
    """aiohttp's HTTP/1.1 protocol for one connection, plus the clocks the door's sweep reads.

    ``opened_at``: when it was admitted (the first-request deadline runs from there); ``reading_since``: when
    the current request's first byte arrived (``None`` between requests and while it is being handled);
    ``idle_since``: when the connection last became idle.
    """

    __slots__ = ("_door", "closed_reason", "counted", "current", "early", "half_closed", "handling", "idle_since",
                 "lost", "made", "opened_at", "reading_since", "wire")

    def __init__(self, door: HttpDoor, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._door = door
        self.counted = False  # holds one of the door's connection slots
        self.made = False  # aiohttp's connection_made ran, at the first byte (so its connection_lost must run too)
        self.lost = False  # connection_lost came (after a TLS handshake it can come before connection_made)
        self.early = b""  # TLS application data that came before connection_made
        self.wire: asyncio.BaseTransport | None = None  # the transport, until connection_lost unlinks it
        self.closed_reason: str | None = None  # set when the door closed it (idle, slow, evicted): counted once, there
        self.handling = False
        self.half_closed = False  # the sender shut its side down: answer what it sent, then close
        self.current: web.BaseRequest | None = None  # the request being handled (set by the door's dispatch)
        self.reading_since: float | None = None
        self.opened_at = self.idle_since = door.loop.time()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Take a slot (evicting another at the bound) and wait for the first byte; aiohttp starts on it.

        aiohttp's own set-up (a task per connection, its keep-alive timer, TCP options) waits for the first byte: a
        connection that never sends one costs this object, its parser and its transport only, about 15 objects for
        a full collection to walk instead of 27 (measured) under an idle flood.
        """
        if self.lost:  # the TLS peer left between its handshake and this call: its slot is already given back
            return
        door = self._door
        if not self.counted and not door.admit():
            _abort(transport)  # nothing to evict (every connection is mid-request): counted by admit()
            return
        self.counted = True
        self.opened_at = self.idle_since = door.loop.time()
        door.opened(self)
        self.wire = transport
        self.transport = transport  # type: ignore[assignment]  # what force_close closes until aiohttp starts
        if self.early:  # TLS: application data can arrive between the handshake and this call
            early, self.early = self.early, b""
            self.data_received(early)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = True
        if self.counted:
            self.counted = False
            self._door.release()
        self._door.forget(self)
        if self.made:
            self.made = False
            super().connection_lost(exc)
        else:
            self.transport = None
            self._parser = None  # the parser refers back to this object: unlinked, both go by reference count
        _unlink(self.wire)
        self.wire = None

    def data_received(self, data: bytes) -> None:
        if not self.made:
            if not data or self.lost or self.closed_reason is not None:
                return
            if self.transport is None:  # before connection_made (TLS, see there): kept for it
                self.early += data
                return
            self.made = True
            super().connection_made(self.transport)
        if self.reading_since is None and not self.handling and data:
            self.reading_since = self._door.loop.time()
            self._door.reading(self)
        super().data_received(data)

    def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio.Protocol's contract: True keeps it open
        """The sender half-closed: close at once when idle, else answer the request it sent first.

        aiohttp closes at once either way (its ``eof_received`` returns None), so a sender that shuts down its
        side after writing a request (``shutdown(SHUT_WR)``, as http.server served) would never see the answer.
        """
        if not self.made or (self._waiter is not None and not self._messages):  # no request can come any more
            return None
        self.half_closed = True
        if self.current is not None:
            cut_short(self.current)
        return True

    def request_read(self) -> None:
        """The handler has the whole request: the read clock stops until the answer is sent."""
        self.reading_since = None
        self.handling = True
        self._door.read_done(self)

    def request_done(self) -> None:
        """The answer is written: the connection is idle (kept alive) from now."""
        self.handling = False
        self.reading_since = None
        self.idle_since = self._door.loop.time()
        self._door.idle(self)

    def close_for(self, reason: str) -> None:
        """Close this connection on the door's decision (idle, slow, evicted), counted once as ``reason``."""
        self.closed_reason = reason
        self._door.closed(reason, request_in_progress=self.handling or self._request_in_progress)
        self._door.forget(self)  # no sweep or eviction picks it again; its slot goes back at connection_lost
        self.force_close()

    def evict(self, reason: str) -> None:
        """Close this connection to admit a new one: its slot is given back now, for the newcomer."""
        self.close_for(reason)
        if self.counted:
            self.counted = False
            self._door.release()

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
            door.record_refusal("slow_client" if timed_out else "tls", type(exc).__name__)
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
        # The clocks (loop thread only), each oldest first: new connections by admission, requests being read by
        # their first byte, kept-alive idle connections by when they became idle.
        self._fresh: dict[Connection, None] = {}
        self._reading: dict[Connection, None] = {}
        self._idle: dict[Connection, None] = {}
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
        # asyncio accepts up to ``backlog`` connections per wake-up and listens with that number too: accept in
        # bursts of ACCEPT_BURST (each one's descriptor is reserved beside the bound), then give the kernel's
        # queue its full length again, so a flood's SYNs wait there instead of being dropped and retried.
        self._server = await self.loop.create_server(factory, sock=self._sock, backlog=ACCEPT_BURST)
        self._sock.listen(self._backlog)
        self._sweeper = self.loop.create_task(self._sweep())

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        connection = request.protocol
        if not isinstance(connection, Connection):  # pragma: no cover - every connection is built by this door
            return await self._handler(request)
        connection.current = request
        self._fresh.pop(connection, None)  # its headers are in: no longer new (nor evictable until it is idle)
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
        return _Refused(self) if self._full_of_requests() else self.new_connection()

    def _accept_tls(self) -> asyncio.Protocol:
        return _Refused(self) if self._full_of_requests() else _TlsAcceptor(self)

    def _full_of_requests(self) -> bool:
        """At the bound with nothing to evict: every connection is mid-request or a TLS handshake."""
        return self._open >= self.limits.max_connections and not self._fresh and not self._idle

    def admit(self) -> bool:
        """Take a connection slot, at the bound by evicting another connection; False (counted) if none can go."""
        if self._open >= self.limits.max_connections:
            if self._fresh:  # the oldest connection that has not sent a request's headers yet
                next(iter(self._fresh)).evict("evicted_new")
            elif self._idle:  # else the kept-alive connection idle longest
                next(iter(self._idle)).evict("evicted_idle")
            else:
                self.refused_connection()
                return False
        self._open += 1
        return True

    # --- the clocks: insertion-ordered dicts (oldest first), loop thread only ---------------------------------------
    def opened(self, connection: Connection) -> None:
        """A connection was admitted: it waits for its first request's headers."""
        self.connections.add(connection)
        self._fresh[connection] = None

    def reading(self, connection: Connection) -> None:
        """A request's first byte arrived: the read clock starts, the idle one stops."""
        self._idle.pop(connection, None)
        self._reading[connection] = None

    def read_done(self, connection: Connection) -> None:
        """The whole request arrived: the read clock stops."""
        self._reading.pop(connection, None)

    def idle(self, connection: Connection) -> None:
        """The answer was written: the connection is kept alive, the youngest idle one."""
        self._reading.pop(connection, None)
        self._idle.pop(connection, None)
        self._idle[connection] = None

    def forget(self, connection: Connection) -> None:
        """The connection is closing or gone: out of every clock."""
        self.connections.discard(connection)
        self._fresh.pop(connection, None)
        self._reading.pop(connection, None)
        self._idle.pop(connection, None)

    def release(self) -> None:
        """Give a connection slot back."""
        self._open -= 1

    @property
    def open_connections(self) -> int:
        """Connections holding a slot (TLS handshakes included)."""
        return self._open

    async def _sweep(self) -> None:
        """Close new, idle and slow connections past their deadline: reads only the expired ones of each clock."""
        limits = self.limits
        shortest = min(limits.idle_timeout_s, limits.read_timeout_s, limits.first_request_timeout_s)
        interval = min(1.0, max(0.02, shortest / 4))
        while True:
            await asyncio.sleep(interval)
            now = self.loop.time()
            for connection in _expired(self._reading, now - limits.read_timeout_s, "reading_since"):
                connection.close_for("slow_client")
            for connection in _expired(self._fresh, now - limits.first_request_timeout_s, "opened_at"):
                connection.close_for("first_request_timeout")
            for connection in _expired(self._idle, now - limits.idle_timeout_s, "idle_since"):
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
    def record_refusal(self, reason: str, detail: str) -> None:
        """Count a refusal (a failed or slow TLS handshake, a closed connection) on the OTLP port only."""
        if not self.admin:
            self.service.refusals.record("http", reason, detail)

    def refused_connection(self) -> None:
        """A connection closed at accept: the door holds ``max_connections``, every one of them mid-request."""
        self.record_refusal("too_many_connections", str(self.limits.max_connections))

    def closed(self, reason: str, *, request_in_progress: bool) -> None:
        """The sweep or an eviction closed a connection; a request it was sending counts as invalid."""
        if request_in_progress and not self.admin:
            self.service.count("http", "invalid")
        self.record_refusal(reason, "")

    def refused_request(self, status: int, reason: str, detail: str) -> str:
        """A request the parser refused (or a bug), counted; returns the answer's text."""
        if not self.admin:
            self.service.count("http", "invalid")
            self.record_refusal(reason, f"{status} {detail}".strip())
        return f"{status} {'internal error' if reason == 'internal' else 'bad request'}\n"


def _unlink(transport: asyncio.BaseTransport | None) -> None:
    """Break a closed transport's reference to its own bound method, so it goes by reference count.

    asyncio's socket transport keeps its read callback as a bound method of itself: a cycle, so every closed
    connection would wait for a collection, and under a flood of reopened connections those reach the oldest
    generation and make every full collection longer. Only read after connection_lost: never again.
    """
    if transport is not None and getattr(transport, "_read_ready_cb", None) is not None:
        transport._read_ready_cb = None  # type: ignore[attr-defined]


def _expired(clock: dict[Connection, None], before: float, since: str) -> list[Connection]:
    """The connections of ``clock`` (oldest first) whose ``since`` time is before ``before``."""
    out = []
    for connection in clock:
        started = getattr(connection, since)
        if started is None:  # not on this clock any more (never the case: each change leaves the dict first)
            continue
        if started >= before:
            break
        out.append(connection)
    return out


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


_Server = TypeVar("_Server", bound="DoorServer")


class DoorServer:
    """A server on one ``HttpDoor`` (its ``name`` names the thread): ``start()``, ``stop(grace_s)`` and ``port``."""

    name = ""

    def __init__(self, service: Backend, host: str, port: int, *, admin: bool, limits: Limits, workers: int) -> None:
        self._service = service
        self._door = HttpDoor(service, host, port, self._handle, admin=admin, limits=limits, workers=workers,
                              name=self.name)
        self.port = self._door.port

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        raise NotImplementedError

    def start(self: _Server) -> _Server:
        """Start serving."""
        self._door.start()
        return self

    def stop(self, grace_s: float) -> None:
        """Stop accepting, finish requests in flight within ``grace_s``, close every connection."""
        self._door.stop(grace_s)
