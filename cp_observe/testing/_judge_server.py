"""A real OpenAI-compatible chat completion server on loopback that answers like a judge, or fails on cue.

Tests and benchmarks point litellm at ``JudgeServer().url`` and get real HTTP: real status codes, headers,
timeouts and connection resets, none of litellm mocked. Each chat request takes the next behaviour from a
FIFO script, or the default behaviour once the script is empty. Standard library only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import itertools
import json
import re
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType, TracebackType
from typing import Any, Final

from cp_observe._prompt import parse_judge_prompt

__all__ = [
    "Behaviour",
    "JudgeServer",
    "Policy",
    "RecordedRequest",
    "delay",
    "fixed",
    "good",
    "raw",
    "reset",
    "status",
    "word_overlap_policy",
]

Policy = Callable[[str, str, Sequence[str]], Sequence[bool]]
"""``policy(query, reference, contexts)`` returns one relevance flag per context, for ``good()``."""

_CHAT_PATHS: Final = frozenset({"/v1/chat/completions", "/chat/completions"})
_MODELS_PATHS: Final = frozenset({"/v1/models", "/models"})
_MODEL_ID: Final = "judge-test"
_WORD: Final = re.compile(r"[^\W\d_]{4,}")
_FOREIGN_CONTEXT: Final = re.compile(r"\bcontext\s+(\d+)\b", re.IGNORECASE)
_ERROR_TYPES: Final = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}
_Request = socket.socket | tuple[bytes, socket.socket]


def word_overlap_policy(query: str, reference: str, contexts: Sequence[str]) -> list[bool]:
    """Mark a context relevant when it shares a word of 4+ letters with the reference: the default test policy.

    Case-insensitive; digits and punctuation never count. It makes test outcomes predictable, and is not a
    judge: never read its verdicts as a measure of retrieval quality.
    """
    wanted = _words(reference)
    return [bool(_words(context) & wanted) for context in contexts]


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


@dataclass(frozen=True, slots=True)
class _Call:
    """What a behaviour gets to answer one chat completion request."""

    body: Mapping[str, Any]
    policy: Policy
    stopping: threading.Event
    completion_id: str


@dataclass(frozen=True, slots=True)
class _Reply:
    """An HTTP answer; ``reset`` sends half of ``payload`` and then resets the connection."""

    status: int
    payload: bytes
    headers: tuple[tuple[str, str], ...] = ()
    reset: bool = False


class _Stopped(Exception):
    """The server is stopping: drop the connection without an answer."""


@dataclass(frozen=True, slots=True)
class Behaviour:
    """How the server answers one chat completion request. Make one with ``good()``, ``fixed()``, etc."""

    name: str
    _answer: Callable[[_Call], _Reply] = field(repr=False, compare=False)


def good() -> Behaviour:
    """Answer like a judge: one verdict per context, decided by the server's policy.

    The prompt is read with ``cp_observe._prompt.parse_judge_prompt``. A prompt of another shape (another
    strategy's) gets a ``"yes"`` for every distinct number N found as ``CONTEXT N`` (any case) in its user
    messages, with ``context_index`` N in ascending order, or one ``"yes"`` with index 0 when none is found.
    """
    return Behaviour("good", _answer_good)


def fixed(
    verdicts: Sequence[str | bool],
    indices: Sequence[int] | None = None,
    reasons: Sequence[str] | None = None,
) -> Behaviour:
    """Answer with exactly these verdicts: strings verbatim (``" YES "``), booleans as ``"yes"``/``"no"``.

    Args:
        verdicts: the ``verdict`` values, in order; their number need not match the contexts.
        indices: the ``context_index`` values; ``0..n-1`` by default.
        reasons: the ``reason`` values; a placeholder sentence by default.

    Raises:
        ValueError: when ``indices`` or ``reasons`` differ in length from ``verdicts``.
        TypeError: when ``verdicts`` is a single string.

    """
    if isinstance(verdicts, str):
        raise TypeError("fixed() takes a sequence of verdicts, not one string")
    words = [("yes" if v else "no") if isinstance(v, bool) else v for v in verdicts]
    where = list(range(len(words))) if indices is None else list(indices)
    why = ["fixed verdict from the test script"] * len(words) if reasons is None else list(reasons)
    if len(where) != len(words) or len(why) != len(words):
        raise ValueError("fixed() needs as many indices and reasons as verdicts")
    content = _verdicts_content(words, where, why)
    return Behaviour("fixed", lambda call: _completion(call, content))


def raw(content: str) -> Behaviour:
    """Answer with this assistant message content verbatim: fenced, truncated or malformed JSON, garbage."""
    return Behaviour("raw", lambda call: _completion(call, content))


def status(
    code: int, *, body: Mapping[str, Any] | str | bytes | None = None, headers: Mapping[str, str] | None = None
) -> Behaviour:
    """Answer with an HTTP error, e.g. ``status(429, headers={"Retry-After": "1"})`` or ``status(500)``.

    Args:
        code: an HTTP status from 400 to 599.
        body: a JSON object, or text/bytes sent verbatim; by default an OpenAI-style
            ``{"error": {"message", "type", "param", "code"}}``.
        headers: extra response headers; ``Content-Type`` defaults to ``application/json``.

    Raises:
        ValueError: when ``code`` is not an error status.

    """
    if not 400 <= code <= 599:
        raise ValueError(f"status() takes an HTTP error status (400-599), got {code}")
    if body is None:
        payload = _dumps(_error(code))
    elif isinstance(body, str):
        payload = body.encode("utf-8")
    elif isinstance(body, bytes):
        payload = body
    else:
        payload = _dumps(dict(body))
    reply = _Reply(code, payload, tuple((headers or {}).items()))
    return Behaviour(f"status({code})", lambda call: reply)


def delay(seconds: float, then: Behaviour | None = None) -> Behaviour:
    """Wait ``seconds`` (cut short by ``stop()``, which drops the connection), then answer like ``then``.

    Raises:
        ValueError: when ``seconds`` is negative or not finite.

    """
    wait = _seconds(seconds, "seconds")
    follow = then or good()

    def answer(call: _Call) -> _Reply:
        if call.stopping.wait(wait):
            raise _Stopped
        return follow._answer(call)

    return Behaviour(f"delay({wait:g}, {follow.name})", answer)


def reset() -> Behaviour:
    """Send the status line, headers and half of a completion body, then reset the connection (TCP RST).

    ``Content-Length`` announces the whole body; the socket is closed with ``SO_LINGER`` 0, so the client
    sees a reset (or a short body) rather than a clean end of stream.
    """
    return Behaviour("reset", lambda call: dataclasses.replace(_completion(call, '{"verdicts": []}'), reset=True))


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


def _answer_good(call: _Call) -> _Reply:
    messages = call.body.get("messages")
    dicts = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    parsed = parse_judge_prompt(dicts)
    if parsed is None:
        text = " ".join(str(m.get("content")) for m in dicts if m.get("role") == "user")
        where = sorted({int(n) for n in _FOREIGN_CONTEXT.findall(text)}) or [0]
        reason = "not a cp_observe judge prompt; JudgeServer answers yes"
        content = _verdicts_content(["yes"] * len(where), where, [reason] * len(where))
    else:
        flags = [bool(flag) for flag in call.policy(*parsed)]
        words = ["yes" if flag else "no" for flag in flags]
        reasons = [
            f"the test policy finds context {i} {'relevant' if f else 'irrelevant'}" for i, f in enumerate(flags)
        ]
        content = _verdicts_content(words, range(len(flags)), reasons)
    return _completion(call, content)


def _completion(call: _Call, content: str) -> _Reply:
    prompt_tokens = _tokens(_message_chars(call.body.get("messages")))
    completion_tokens = _tokens(len(content))
    return _json_reply(
        200,
        {
            "id": call.completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": call.body.get("model", _MODEL_ID),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        },
    )


def _plain_route(method: str, path: str) -> tuple[str, _Reply]:
    if path in _MODELS_PATHS and method == "GET":
        model = {"id": _MODEL_ID, "object": "model", "created": 0, "owned_by": "cp-observe"}
        return "models", _json_reply(200, {"object": "list", "data": [model]})
    if path in _CHAT_PATHS or path in _MODELS_PATHS:
        allow = "POST" if path in _CHAT_PATHS else "GET"
        return "method_not_allowed", _json_reply(405, _error(405, f"Use {allow} for {path}."), (("Allow", allow),))
    return "not_found", _json_reply(404, _error(404, f"No route for {method} {path}."))


def _verdicts_content(verdicts: Sequence[str], indices: Sequence[int], reasons: Sequence[str]) -> str:
    entries = [
        {"context_index": i, "verdict": v, "reason": r} for i, v, r in zip(indices, verdicts, reasons, strict=True)
    ]
    return json.dumps({"verdicts": entries})


def _error(code: int, message: str | None = None, *, param: str | None = None) -> dict[str, Any]:
    if message is None:
        try:
            message = f"{code} {HTTPStatus(code).phrase}"
        except ValueError:
            message = f"HTTP {code}"
    kind = _ERROR_TYPES.get(code, "server_error" if code >= 500 else "invalid_request_error")
    error_code = "rate_limit_exceeded" if code == 429 else None
    return {"error": {"message": message, "type": kind, "param": param, "code": error_code}}


def _json_reply(code: int, obj: object, headers: tuple[tuple[str, str], ...] = ()) -> _Reply:
    return _Reply(code, _dumps(obj), headers)


def _dumps(obj: object) -> bytes:
    return json.dumps(obj).encode("utf-8")


def _loads(payload: bytes | None) -> Any:
    if not payload:
        return None
    try:
        return json.loads(payload)
    except ValueError:  # covers JSONDecodeError and UnicodeDecodeError
        return None


def _message_chars(messages: object) -> int:
    if not isinstance(messages, list):
        return 0
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return total


def _tokens(chars: int) -> int:
    return -(-chars // 4)  # ceil(chars / 4) without floats


def _words(text: str) -> set[str]:
    return {word.lower() for word in _WORD.findall(text)}


def _seconds(value: float, what: str) -> float:
    seconds = float(value)
    if not 0.0 <= seconds < float("inf"):
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return seconds


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
