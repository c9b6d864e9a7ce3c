"""A real OpenAI-compatible chat completion server on loopback that answers like a judge, or fails on cue.

Tests and benchmarks point litellm at ``JudgeServer().url`` and get real HTTP: real status codes, headers,
timeouts and connection resets, none of litellm mocked. Each chat request takes the next behaviour from a
FIFO script, or the default behaviour once the script is empty. Standard library only.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType, TracebackType
from typing import Any, Final

from cp_observe.testing._behaviours import (
    _MODEL_ID,
    Behaviour,
    Policy,
    _Call,
    _error,
    _json_reply,
    _loads,
    _Reply,
    _seconds,
    _Stopped,
    good,
    word_overlap_policy,
)

__all__ = ["JudgeServer", "RecordedRequest"]

_CHAT_PATHS: Final = frozenset({"/v1/chat/completions", "/chat/completions"})
_MODELS_PATHS: Final = frozenset({"/v1/models", "/models"})
_Request = socket.socket | tuple[bytes, socket.socket]


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the server received, recorded before it was answered.

    Attributes:
        method: the HTTP method.
        path: the request path without the query string.
        headers: the request headers, keys lower-cased (repeated headers joined with ``", "``).
        body: the parsed JSON body, or ``None`` when it was empty or not JSON.
        received: ``time.monotonic()`` when the request was read.
        behaviour: the name of what answered it, e.g. ``"good"``, ``"status(429)"``, ``"refuse_json_schema"``.

    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    received: float
    behaviour: str


class JudgeServer:
    """An OpenAI-compatible chat completion server on loopback, for tests and benchmarks.

    Endpoints: ``POST /v1/chat/completions`` (and ``/chat/completions``), ``GET /v1/models`` (and ``/models``);
    anything else is a 404 JSON error (405 for a known path with the wrong method). A chat request with
    ``"stream": true`` is refused with 400 (streaming is not implemented), as is a body that is not a JSON
    object. Every request is recorded; every chat request is counted, refused ones too. Each connection gets
    its own thread, so ``latency`` and ``delay()`` never serialise concurrent requests.

    Example::

        with JudgeServer() as server:
            server.script(status(429, headers={"Retry-After": "1"}), good())
            await litellm.acompletion(model="openai/judge-test", api_base=server.url, api_key="sk-test", ...)
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        policy: Policy | None = None,
        latency: float = 0.0,
        refuse_json_schema: bool | int = False,
    ) -> None:
        """Configure the server; ``start()`` (or ``with``) binds it.

        Args:
            host: a loopback address (``127.0.0.1``, ``::1``, ``localhost``); anything else is refused.
            port: the port to bind; 0 picks a free one.
            policy: decides the verdicts of ``good()``; ``word_overlap_policy`` by default.
            latency: seconds added before every chat completion answer; settable while running.
            refuse_json_schema: refuse ``response_format.type == "json_schema"``, as servers without structured
                outputs do; ``json_object`` and no ``response_format`` are still served. ``True`` answers 400
                (``invalid_request_error``, ``param: "response_format"``); ``500`` answers exactly as
                llama-cpp-python 0.3.36's server does (its request validation error, wrapped as an
                ``internal_server_error``). A plain attribute, settable while running. Refused requests are
                recorded and counted but do not consume the script.

        Raises:
            ValueError: for a non-loopback host, a port out of range or a negative latency.

        """
        self._family = _loopback_family(host)
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be 0-65535, got {port}")
        self._host = "127.0.0.1" if host == "localhost" else host
        self._wanted_port = port
        self.refuse_json_schema = refuse_json_schema
        self._lock = threading.Lock()  # guards everything below up to _ids
        self._arrived = threading.Condition(self._lock)
        self._script: deque[Behaviour] = deque()
        self._default = good()
        self._policy: Policy = policy or word_overlap_policy
        self._latency = _seconds(latency, "latency")
        self._requests: list[RecordedRequest] = []
        self._calls = 0
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._lifecycle = threading.Lock()  # serialises start() and stop(); guards _httpd and _thread
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> JudgeServer:
        """Bind and serve in a daemon thread; returns the server. A stopped server may be started again.

        Raises:
            RuntimeError: when it is already running.

        """
        with self._lifecycle:
            if self._httpd is not None:
                raise RuntimeError("JudgeServer is already running")
            self._stopping.clear()
            httpd = _Server((self._host, self._wanted_port), self._family, self)
            thread = threading.Thread(
                target=httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"cp-observe-judge-server-{httpd.server_port}",
                daemon=True,
            )
            thread.start()
            self._httpd, self._thread = httpd, thread
        return self

    def stop(self) -> None:
        """Stop serving, close every socket and join every thread; idempotent.

        Returns promptly even while a request is in ``delay()`` or ``latency``: those waits end at once and
        their connections are dropped unanswered. Idle keep-alive connections are shut down as well.
        """
        with self._lifecycle:
            httpd, thread = self._httpd, self._thread
            if httpd is None or thread is None:
                return
            self._httpd = self._thread = None
            self._stopping.set()
            httpd.shutdown()  # serve_forever returns; no connection is accepted after this
            httpd.close_connections()  # handlers blocked reading an idle keep-alive connection see EOF
            httpd.server_close()  # closes the listening socket and joins the handler threads
            thread.join()

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port. Raises ``RuntimeError`` when the server is not running."""
        return self._running().server_port

    @property
    def url(self) -> str:
        """The base URL to pass to litellm as ``api_base``, e.g. ``http://127.0.0.1:PORT/v1``."""
        host = f"[{self._host}]" if self._family == socket.AF_INET6 else self._host
        return f"http://{host}:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of every request recorded since start or the last ``clear()``, oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def calls(self) -> int:
        """How many chat completion requests arrived since start or the last ``clear()``, refused ones too."""
        with self._lock:
            return self._calls

    @property
    def default(self) -> Behaviour:
        """The behaviour used once the script is empty; ``good()`` initially."""
        with self._lock:
            return self._default

    @default.setter
    def default(self, behaviour: Behaviour) -> None:
        with self._lock:
            self._default = behaviour

    @property
    def policy(self) -> Policy:
        """The policy ``good()`` asks for verdicts."""
        with self._lock:
            return self._policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        with self._lock:
            self._policy = policy

    @property
    def latency(self) -> float:
        """Seconds waited before every chat completion answer, in the request's own thread."""
        with self._lock:
            return self._latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        checked = _seconds(seconds, "latency")
        with self._lock:
            self._latency = checked

    def script(self, *behaviours: Behaviour) -> None:
        """Queue behaviours for the next chat requests, one each, in order, after any still queued."""
        with self._lock:
            self._script.extend(behaviours)

    def clear(self) -> None:
        """Forget the recorded requests and the call count; the script and the default stay."""
        with self._lock:
            self._requests.clear()
            self._calls = 0

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> bool:
        """Block until at least ``count`` requests are recorded; False when ``timeout`` passes first."""
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self._requests) >= count, timeout)

    def _running(self) -> _Server:
        httpd = self._httpd
        if httpd is None:
            raise RuntimeError("JudgeServer is not running; call start() or use it as a context manager")
        return httpd

    def _respond(self, method: str, target: str, headers: Message, payload: bytes | None) -> _Reply:
        """Record the request, pick what answers it and answer it; runs in the connection's thread."""
        path = target.split("?", 1)[0]
        body = _loads(payload)
        lowered: dict[str, str] = {}
        for key, value in headers.items():
            name = key.lower()
            lowered[name] = f"{lowered[name]}, {value}" if name in lowered else value
        chat = method == "POST" and path in _CHAT_PATHS
        behaviour: Behaviour | None = None
        with self._lock:
            if chat:
                self._calls += 1
                name, reply = self._refusal(body)
                if reply is None:
                    behaviour = self._script.popleft() if self._script else self._default
                    name = behaviour.name
            else:
                name, reply = _plain_route(method, path)
            self._requests.append(
                RecordedRequest(method, path, MappingProxyType(lowered), body, time.monotonic(), name)
            )
            self._arrived.notify_all()
            latency, policy, completion_id = self._latency, self._policy, f"chatcmpl-{next(self._ids)}"
        if chat and latency > 0 and self._stopping.wait(latency):
            raise _Stopped
        if behaviour is not None:
            return behaviour._answer(_Call(body, policy, self._stopping, completion_id))
        assert reply is not None  # _refusal and _plain_route always answer when no behaviour was picked
        return reply

    def _refusal(self, body: Any) -> tuple[str, _Reply | None]:
        if not isinstance(body, dict):
            return "bad_request", _json_reply(400, _error(400, "The request body is not a JSON object."))
        if body.get("stream") is True:
            message = "stream=true is not supported by cp_observe's JudgeServer; send stream=false."
            return "stream_refused", _json_reply(400, _error(400, message, param="stream"))
        response_format = body.get("response_format")
        if (
            self.refuse_json_schema
            and isinstance(response_format, dict)
            and response_format.get("type") == "json_schema"
        ):
            if self.refuse_json_schema == 500 and self.refuse_json_schema is not True:
                message = (
                    "1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
                    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
                    "'ctx': {'expected': \"'text' or 'json_object'\"}}"
                )
                body_500 = {"error": {"message": message, "type": "internal_server_error", "param": None, "code": None}}
                return "refuse_json_schema", _json_reply(500, body_500)
            message = (
                "response_format type 'json_schema' is not supported by this server: "
                "use 'json_object' or omit response_format."
            )
            return "refuse_json_schema", _json_reply(400, _error(400, message, param="response_format"))
        return "", None


class _Server(ThreadingHTTPServer):
    """A threading HTTP server that knows its connections, so ``stop()`` can shut idle ones down."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, owner: JudgeServer) -> None:
        self.address_family = family
        self.owner = owner
        self._open_lock = threading.Lock()  # guards _open
        self._open: set[socket.socket] = set()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind asks DNS for the host's fully qualified name; a loopback server needs none.
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])

    def process_request(self, request: _Request, client_address: Any) -> None:
        if isinstance(request, socket.socket):
            with self._open_lock:
                self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: _Request) -> None:
        if isinstance(request, socket.socket):
            with self._open_lock:
                self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._open_lock:
            connections = list(self._open)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by its handler (reset()) or by the client
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: _Request, client_address: Any) -> None:
        # A client that hangs up mid-answer, or a stop() that cuts a connection, is no server failure.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; Nagle would hold the body back
    server: _Server

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    # Other methods get the same JSON 404/405 answers (and records) instead of http.server's HTML 501.
    do_DELETE = do_PATCH = do_PUT = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests read server.requests instead

    def _handle(self) -> None:
        payload = self._read_body()
        try:
            reply = self.server.owner._respond(self.command, self.path, self.headers, payload)
        except _Stopped:
            self.close_connection = True
            return
        except Exception as exc:  # noqa: BLE001 - a failing policy or behaviour answers 500; the server lives on
            reply = _json_reply(500, _error(500, f"JudgeServer could not answer: {exc!r}"))
        self._send(reply)

    def _read_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True  # the unread chunks would corrupt the next request
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            return None
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, reply: _Reply) -> None:
        self.send_response(reply.status)
        headers = [(k, v) for k, v in reply.headers if k.lower() != "content-length"]
        if all(k.lower() != "content-type" for k, _ in headers):
            headers.append(("Content-Type", "application/json"))
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(reply.payload)))
        self.end_headers()
        if not reply.reset:
            self.wfile.write(reply.payload)
            return
        self.wfile.write(reply.payload[: len(reply.payload) // 2])
        self.close_connection = True
        self.rfile.close()  # the reader holds a reference to the socket; without it close() would not close
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()  # linger 0: the kernel sends RST instead of FIN


def _plain_route(method: str, path: str) -> tuple[str, _Reply]:
    if path in _MODELS_PATHS and method == "GET":
        model = {"id": _MODEL_ID, "object": "model", "created": 0, "owned_by": "cp-observe"}
        return "models", _json_reply(200, {"object": "list", "data": [model]})
    if path in _CHAT_PATHS or path in _MODELS_PATHS:
        allow = "POST" if path in _CHAT_PATHS else "GET"
        return "method_not_allowed", _json_reply(405, _error(405, f"Use {allow} for {path}."), (("Allow", allow),))
    return "not_found", _json_reply(404, _error(404, f"No route for {method} {path}."))


def _loopback_family(host: str) -> socket.AddressFamily:
    if host == "localhost":
        return socket.AF_INET
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise ValueError(f"JudgeServer binds only to a loopback address, got {host!r}")
    return socket.AF_INET6 if address.version == 6 else socket.AF_INET

