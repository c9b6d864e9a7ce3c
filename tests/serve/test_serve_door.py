"""``cp-observe serve``'s HTTP door: the token before any body, bounded connections, idle and slow clients, metrics."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Callable
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from cp_observe.testing import FakeJudge
from tests.serve_support import OtlpSink, get, post, retrieval_request, retrieval_spans, start_service

TOKEN = "d00r-token-5a1e"
HEAD = "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"

#: Each test restores the process-wide runtime a service installs (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("serve_state_restored")


def _first_line(connection: socket.socket) -> bytes:
    """Read up to the end of the first status line."""
    data = b""
    while b"\r\n" not in data:
        chunk = connection.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n", 1)[0]


def _until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll the door's loop-thread state (read only) until ``predicate`` holds; False at the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)  # the door's loop thread changes it: nothing to await from here
    return False


def _response(connection: socket.socket) -> bytes:
    """Read one whole response (headers and a Content-Length body), leaving the connection open."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += connection.recv(65536)
    return head


@pytest.mark.parametrize("authorization", ["", f"Authorization: Bearer wrong-{TOKEN}\r\n"])
def test_expect_100_continue_without_the_token_gets_401_before_any_continue(
    authorization: str, sink: OtlpSink, cp_observe_judge: FakeJudge
) -> None:
    """A sender asking ``Expect: 100-continue`` with no or a wrong token is told 401 first; it never sends its body."""
    body = retrieval_request(1)
    with start_service(sink, cp_observe_judge, auth_token=TOKEN) as service, \
            socket.create_connection(("127.0.0.1", service.port("http")), timeout=10) as connection:
        connection.sendall(f"{HEAD}Content-Length: {len(body)}\r\nExpect: 100-continue\r\n{authorization}\r\n".encode())
        assert _first_line(connection) == b"HTTP/1.1 401 Unauthorized"
        stats = service.stats()
    reason = "wrong_token" if authorization else "missing_token"
    assert stats["refusals"] == {f"http:{reason}": 1} and stats["requests"] == {"http:unauthenticated": 1}


def test_expect_100_continue_with_the_token_gets_continue_then_200(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """With the right token the sender is told ``100 Continue``, sends its body, and the request is scored."""
    body = retrieval_request(2)
    with start_service(sink, cp_observe_judge, auth_token=TOKEN) as service, \
            socket.create_connection(("127.0.0.1", service.port("http")), timeout=10) as connection:
        connection.sendall(f"{HEAD}Content-Length: {len(body)}\r\nExpect: 100-continue\r\n"
                           f"Authorization: Bearer {TOKEN}\r\n\r\n".encode())
        assert connection.recv(25) == b"HTTP/1.1 100 Continue\r\n\r\n"
        connection.sendall(body)
        assert _response(connection).startswith(b"HTTP/1.1 200 OK")
        assert service.flush(30)
        stats = service.stats()
    assert stats["scored"] == 2 and stats["refusals"] == {}


def test_a_declared_length_over_the_limit_gets_413_before_any_continue(
    sink: OtlpSink, cp_observe_judge: FakeJudge
) -> None:
    """A body announced larger than max_request_bytes is refused at once: the sender is not invited to send it."""
    with start_service(sink, cp_observe_judge, max_request_bytes=4096) as service, \
            socket.create_connection(("127.0.0.1", service.port("http")), timeout=10) as connection:
        connection.sendall(f"{HEAD}Content-Length: 5000\r\nExpect: 100-continue\r\n\r\n".encode())
        assert _first_line(connection) == b"HTTP/1.1 413 Request Entity Too Large"
        assert service.stats()["refusals"] == {"http:too_large": 1}


def test_at_the_bound_a_new_connection_evicts_one_that_sent_nothing(
    sink: OtlpSink, cp_observe_judge: FakeJudge
) -> None:
    """With max_connections open, a newcomer is admitted: the oldest silent connection is closed, then the idlest."""
    body = retrieval_request(1)
    request = f"{HEAD}Content-Length: {len(body)}\r\n\r\n".encode() + body
    with start_service(sink, cp_observe_judge, max_connections=3, sample_rate=0.0) as service:
        port = service.port("http")
        kept = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        silent = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            for connection in kept:  # answered, then idle: kept alive
                connection.sendall(request)
                assert _response(connection).startswith(b"HTTP/1.1 200")
            with socket.create_connection(("127.0.0.1", port), timeout=10) as newcomer:
                newcomer.sendall(request)
                assert _response(newcomer).startswith(b"HTTP/1.1 200")  # admitted: the silent one made room
                assert silent.recv(100) == b""
                # Now every slot has served a request: the next newcomer evicts the one idle longest (kept[0]).
                with socket.create_connection(("127.0.0.1", port), timeout=10) as second:
                    second.sendall(request)
                    assert _response(second).startswith(b"HTTP/1.1 200")
                    assert kept[0].recv(100) == b""
                    kept[1].sendall(request)  # the younger kept-alive connection is still served
                    assert _response(kept[1]).startswith(b"HTTP/1.1 200")
                    stats = service.stats()
        finally:
            for connection in (*kept, silent):
                connection.close()
    assert stats["refusals"] == {"http:evicted_new": 1, "http:evicted_idle": 1}
    assert stats["requests"] == {"http:accepted": 5}


def test_at_the_bound_with_every_connection_mid_request_the_newcomer_is_refused(
    sink: OtlpSink, cp_observe_judge: FakeJudge
) -> None:
    """Only when every connection is in the middle of a request is a newcomer closed at accept, and counted."""
    with start_service(sink, cp_observe_judge, max_connections=2, sample_rate=0.0) as service:
        port = service.port("http")
        busy = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        try:
            for connection in busy:  # headers in, the body never ends: mid-request
                connection.sendall(f"{HEAD}Content-Length: 1000\r\n\r\nabc".encode())
            door = service._servers["http"]._door
            assert _until(lambda: not door._fresh and door.open_connections == 2)  # both past their headers
            with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
                extra.sendall(HEAD.encode())
                try:
                    answer = extra.recv(100)
                except ConnectionResetError:
                    answer = b""
            assert answer == b""
            stats = service.stats()
        finally:
            for connection in busy:
                connection.close()
    assert stats["refusals"] == {"http:too_many_connections": 1}


def test_idle_and_slow_connections_are_closed_and_counted(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """Silent, kept-alive and slowloris connections are closed after their timeout, each counted by why."""
    body = retrieval_request(1)
    with start_service(sink, cp_observe_judge, http_idle_timeout_s=0.3, http_read_timeout_s=0.5,
                       http_first_request_timeout_s=0.4, sample_rate=0.0) as service:
        port = service.port("http")
        silent = socket.create_connection(("127.0.0.1", port), timeout=10)
        kept = socket.create_connection(("127.0.0.1", port), timeout=10)
        slow = socket.create_connection(("127.0.0.1", port), timeout=10)
        with silent, kept, slow:
            kept.sendall(f"{HEAD}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            assert _response(kept).startswith(b"HTTP/1.1 200")
            slow.sendall(HEAD.encode())  # headers that never end
            for connection in (silent, kept, slow):
                assert connection.recv(100) == b""  # closed by the server (the timeout bounds the wait)
        assert post(f"http://127.0.0.1:{port}/v1/traces", body)[0] == 200  # others are still served
        stats = service.stats()
    assert stats["refusals"] == {"http:first_request_timeout": 2, "http:idle_timeout": 1}


def test_a_slow_request_after_the_first_is_closed_as_slow_client(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """A kept-alive sender whose next request's headers never end is closed at http_read_timeout_s (slowloris)."""
    body = retrieval_request(1)
    with start_service(sink, cp_observe_judge, http_read_timeout_s=0.3, sample_rate=0.0) as service, \
            socket.create_connection(("127.0.0.1", service.port("http")), timeout=10) as connection:
        connection.sendall(f"{HEAD}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        assert _response(connection).startswith(b"HTTP/1.1 200")
        connection.sendall(HEAD.encode())
        assert connection.recv(100) == b""
        stats = service.stats()
    assert stats["refusals"] == {"http:slow_client": 1}


def test_a_slow_body_is_closed_as_slow_client_and_counted_once(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """A sender that stops halfway through its body is closed at http_read_timeout_s: one invalid request."""
    with start_service(sink, cp_observe_judge, http_read_timeout_s=0.3) as service, \
            socket.create_connection(("127.0.0.1", service.port("http")), timeout=10) as connection:
        connection.sendall(f"{HEAD}Content-Length: 1000\r\n\r\nabc".encode())
        assert connection.recv(100) == b""
        stats = service.stats()
    assert stats["refusals"] == {"http:slow_client": 1} and stats["requests"] == {"http:invalid": 1}


def test_serve_threads_do_not_grow_with_connections(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """Two hundred idle connections cost no thread: the door is one event loop and a fixed pool."""
    with start_service(sink, cp_observe_judge, sample_rate=0.0) as service:
        port = service.port("http")
        assert post(f"http://127.0.0.1:{port}/v1/traces", retrieval_request(1))[0] == 200  # the pool is started
        before = threading.active_count()
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(200)]
        try:
            # Accepted in order: once a later connection is answered, the 200 before it were accepted too.
            assert post(f"http://127.0.0.1:{port}/v1/traces", retrieval_request(1))[0] == 200
            assert service._servers["http"].open_connections >= 200
            assert threading.active_count() <= before + 4  # at most the pool's other workers
        finally:
            for connection in idle:
                connection.close()


def _scrape(port: int, accept: str | None) -> tuple[str, str]:
    headers = {"Accept": accept} if accept else {}
    with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers),
                                timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def test_metrics_serve_openmetrics_with_exemplars_when_asked(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """Accept: application/openmetrics-text gets exemplars naming the scored trace on score buckets; else plain text."""
    spans = retrieval_spans(1)
    trace_ids = {f"{span.context.trace_id:032x}" for span in spans if span.context is not None}
    with start_service(sink, cp_observe_judge) as service:
        assert post(f"http://127.0.0.1:{service.port('http')}/v1/traces",
                    encode_spans(spans).SerializeToString())[0] == 200
        assert service.flush(30)
        admin = service.port("admin")
        open_type, open_text = _scrape(admin, "application/openmetrics-text; version=1.0.0,text/plain;q=0.5")
        plain_type, plain_text = _scrape(admin, None)
    assert open_type.startswith("application/openmetrics-text") and open_text.rstrip().endswith("# EOF")
    exemplars = re.findall(r'context_precision_score_bucket\{[^}]*\} \S+ # \{span_id="[0-9a-f]{16}",'
                           r'trace_id="([0-9a-f]{32})"\}', open_text)
    assert exemplars and set(exemplars) <= trace_ids, open_text[:2000]
    assert plain_type.startswith("text/plain") and "context_precision_score_bucket" in plain_text
    assert " # {" not in plain_text


def test_stats_carry_the_sink_counts(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """``/stats`` has each sink's offered/sent/failed/dropped/pending counts next to the accounting."""
    with start_service(sink, cp_observe_judge, phoenix_url=sink.url, sink_max_retries=0) as service:
        assert post(f"http://127.0.0.1:{service.port('http')}/v1/traces", retrieval_request(2))[0] == 200
        assert service.flush(30)
        status, text = get(f"http://127.0.0.1:{service.port('admin')}/stats")
        expected: dict[str, Any] = service.processor.sink_stats()
    assert status == 200
    sinks = json.loads(text)["sinks"]
    assert set(sinks) == set(expected) and sinks, sinks
    assert next(iter(sinks.values()))["offered"] == 2


def test_the_bound_is_lowered_to_what_the_open_file_limit_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a hard RLIMIT_NOFILE below max_connections, the soft limit goes up to it and the bound fits under it."""
    from cp_observe.serve import _limits

    limits = {"now": (1024, 2048)}

    def setrlimit(which: int, value: tuple[int, int]) -> None:
        limits["now"] = value

    monkeypatch.setattr(_limits.resource, "getrlimit", lambda which: limits["now"])
    monkeypatch.setattr(_limits.resource, "setrlimit", setrlimit)
    reserve = 256 + _limits.ACCEPT_BURST  # the other descriptors, and one accept burst past the bound
    assert _limits.effective_limits(1000, 60.0, 30.0, 5.0).max_connections == 1000  # 1000 + the reserve fit in 2048
    assert limits["now"] == (1000 + reserve, 2048)
    assert _limits.effective_limits(4096, 60.0, 30.0, 5.0).max_connections == 2048 - reserve
    assert limits["now"] == (2048, 2048)


def test_a_tls_handshake_that_never_comes_is_closed_as_slow_client(
    sink: OtlpSink, cp_observe_judge: FakeJudge, tmp_path: Path
) -> None:
    """On a TLS port, a connection that never says hello is closed after http_read_timeout_s and counted."""
    import ssl

    from tests.tls_support import make_pki

    pki = make_pki(tmp_path)
    with start_service(sink, cp_observe_judge, tls_cert_file=str(pki.server_cert), tls_key_file=str(pki.server_key),
                       http_read_timeout_s=0.3) as service:
        port = service.port("http")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as silent:
            assert silent.recv(100) == b""
        context = ssl.create_default_context(cafile=str(pki.ca))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as secure:
            body = retrieval_request(1)
            secure.sendall(f"{HEAD}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            assert _response(secure).startswith(b"HTTP/1.1 200")  # others still get through
        stats = service.stats()
    assert stats["refusals"] == {"http:slow_client": 1}


def test_a_closed_connection_leaves_no_cycle_for_the_collector(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """Evicted, timed-out and served connections are freed by reference count: a flood piles up no garbage."""
    import gc

    from cp_observe.serve._connections import Connection

    body = retrieval_request(1)
    with start_service(sink, cp_observe_judge, max_connections=10, http_first_request_timeout_s=0.2,
                       sample_rate=0.0) as service:
        port = service.port("http")
        door = service._servers["http"]._door
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(30)]  # 20 evicted
            assert post(f"http://127.0.0.1:{port}/v1/traces", body)[0] == 200  # a served one, made and closed
            assert _until(lambda: door.open_connections == 0)  # the rest closed at the first-request deadline
            for connection in silent:
                connection.close()
            gc.collect()
            cyclic = [o for o in gc.garbage if isinstance(o, (Connection, asyncio.BaseTransport))]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        stats = service.stats()
    assert stats["refusals"]["http:evicted_new"] >= 20 and stats["refusals"]["http:first_request_timeout"] >= 1
    assert cyclic == []
