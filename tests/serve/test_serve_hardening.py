"""``cp-observe serve`` hardening: chunked bodies, refusals counted and logged by reason, logs on stderr."""

from __future__ import annotations

import gzip
import http.client
import json
import logging
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from cp_observe.serve._refusals import LOG_INTERVAL_S, REASONS, Refusals
from cp_observe.testing import FakeJudge
from tests.serve_support import ROOT, OtlpSink, read_line, retrieval_request, start_service, subprocess_env

LIMIT = 64 << 10


#: Each test restores the process-wide runtime a service installs (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("serve_state_restored")


def _pieces(body: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start:start + size]


def _chunked_post(port: int, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """POST with ``Transfer-Encoding: chunked`` (http.client chunks an iterable body that has no length)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/v1/traces", body=_pieces(body),
                           headers={"Content-Type": "application/x-protobuf", **(headers or {})})
        response = connection.getresponse()
        return response.status, response.read()
    except ConnectionError:
        return -1, b""
    finally:
        connection.close()


def _raw(port: int, data: bytes) -> bytes:
    """Send raw bytes and return everything the server answers before it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(data)
        connection.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def test_chunked_bodies_are_read_within_the_limit(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """Chunked protobuf is scored; chunked bodies over the limit, on the wire or decompressed, get 413."""
    with start_service(sink, cp_observe_judge, max_request_bytes=LIMIT) as service:
        port = service.port("http")
        status, _ = _chunked_post(port, retrieval_request(3))
        assert status == 200
        assert _chunked_post(port, gzip.compress(retrieval_request(2)), {"Content-Encoding": "gzip"})[0] == 200
        assert _chunked_post(port, b"\0" * (LIMIT + 1))[0] in (413, -1)  # refused while the sender still writes
        assert _chunked_post(port, gzip.compress(b"\0" * (LIMIT * 64)), {"Content-Encoding": "gzip"})[0] == 413
        assert service.flush(30)
        stats = service.stats()
    assert (stats["sampled"], stats["scored"]) == (5, 5)
    assert stats["refusals"] == {"http:too_large": 2}
    assert stats["requests"]["http:accepted"] == 2


def test_node_http_client_sends_chunked_and_is_accepted(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """Node's own http module (what the OTLP HTTP exporter for Node uses) writes a chunked body; it is scored."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = """
const http = require('http');
const body = Buffer.from(process.argv[2], 'base64');
const req = http.request({host: '127.0.0.1', port: Number(process.argv[1]), path: '/v1/traces', method: 'POST',
                          headers: {'Content-Type': 'application/x-protobuf'}}, (res) => {
  res.resume(); res.on('end', () => console.log(res.statusCode + ' ' + req.getHeader('transfer-encoding')));
});
for (let i = 0; i < body.length; i += 700) req.write(body.subarray(i, i + 700));
req.end();
"""
    import base64

    with start_service(sink, cp_observe_judge) as service:
        encoded = base64.b64encode(retrieval_request(2)).decode()
        result = subprocess.run([node, "-e", script, str(service.port("http")), encoded], capture_output=True,
                                text=True, timeout=60, check=True)
        assert service.flush(30)
        stats = service.stats()
    assert result.stdout.split()[0] == "200"
    assert stats["scored"] == 2 and stats["requests"] == {"http:accepted": 1}


def test_malformed_framing_is_refused_and_counted(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """Bad chunk sizes, both framings at once, other transfer codings, no length: 400/411, counted as length."""
    head = "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    cases = [
        (head + "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", b" 400 "),
        (head + "Transfer-Encoding: chunked\r\n\r\n0x3\r\nabc\r\n0\r\n\r\n", b" 400 "),
        (head + "Transfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n0\r\n\r\n", b" 400 "),
        (head + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n", b" 400 "),
        (head + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", b" 400 "),
        (head + "Transfer-Encoding: chunked\r\n\r\n3\r\nabcXY0\r\n\r\n", b" 400 "),
        (head + "\r\n", b" 411 "),
    ]
    with start_service(sink, cp_observe_judge) as service:
        for request, status in cases:
            assert status in _raw(service.port("http"), request.encode())[:20], request
        stats = service.stats()
    assert stats["refusals"] == {"http:length": len(cases)}
    assert stats["requests"] == {"http:invalid": len(cases)}


def test_every_refusal_is_counted_by_reason_on_metrics(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """Path, media type, encoding, size and parse refusals each show up under their reason on /metrics."""
    from tests.serve_support import get, post

    with start_service(sink, cp_observe_judge, max_request_bytes=LIMIT) as service:
        base = f"http://127.0.0.1:{service.port('http')}"
        assert post(f"{base}/v1/logs", b"")[0] == 404
        assert post(f"{base}/v1/traces", b"x", "text/plain")[0] == 415
        request = urllib_request(f"{base}/v1/traces", b"x", {"Content-Encoding": "br"})
        assert request == 415
        assert post(f"{base}/v1/traces", b"\0" * (LIMIT + 1))[0] == 413
        assert post(f"{base}/v1/traces", b"{" * 5000, "application/json")[0] == 400
        status, metrics = get(f"http://127.0.0.1:{service.port('admin')}/metrics")
    assert status == 200
    for reason in ("path", "media_type", "encoding", "too_large", "parse"):
        pattern = rf'context_precision_serve_refusals_total{{[^}}]*protocol="http",reason="{reason}"}} 1\.0'
        assert re.search(pattern, metrics), reason


def urllib_request(url: str, body: bytes, headers: dict[str, str]) -> int:
    """POST protobuf with extra headers; the status."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/x-protobuf", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


class _Counter:
    def __init__(self) -> None:
        self.added: list[dict[str, Any]] = []

    def add(self, amount: int, attributes: dict[str, Any]) -> None:
        self.added.append(attributes)


def test_refusals_are_logged_once_per_reason_then_rate_limited(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many refusals of one reason make one log line per interval, which then says how many were not logged."""
    caplog.set_level(logging.WARNING, logger="cp_observe")
    now = [1000.0]
    monkeypatch.setattr("cp_observe.serve._refusals.time.monotonic", lambda: now[0])
    counter = _Counter()
    refusals = Refusals(counter)
    for _ in range(50):
        refusals.record("http", "parse")
    refusals.record("grpc", "wrong_token")
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2 and "reason='parse'" in lines[0] and "reason='wrong_token'" in lines[1]
    now[0] += LOG_INTERVAL_S
    refusals.record("http", "parse")
    assert "not_logged_since_last=49" in caplog.records[-1].getMessage()
    assert refusals.counts() == {"grpc:wrong_token": 1, "http:parse": 51} and len(counter.added) == 52
    assert set(REASONS) >= {"missing_token", "wrong_token", "tls", "length", "too_large", "media_type", "encoding",
                            "parse", "internal", "path"}


@pytest.mark.parametrize(("level", "shown"), [(None, True), ("error", False)])
def test_serve_logs_to_stderr_with_the_level_from_flag_or_environment(level: str | None, shown: bool) -> None:
    """``cp-observe serve`` writes its warnings (e.g. "no OTLP endpoint") to stderr; ``--log-level`` quiets them."""
    args = [sys.executable, "-m", "cp_observe.serve", "--judge", "lexical", "--grpc-port", "0", "--http-port", "0",
            "--admin-port", "0"]
    env = subprocess_env(CP_OBSERVE_LOG_LEVEL=level) if level else subprocess_env()
    process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        started = read_line(process)
        assert "cp-observe serve: grpc 127.0.0.1:" in started and "admin 127.0.0.1:" in started
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0
    assert ("no OTLP endpoint" in stderr) is shown, stderr
    assert ("cp-observe serve started" in stderr) is shown
    if shown:
        assert "WARNING cp_observe event='no OTLP endpoint" in stderr
    json.dumps(stderr)  # printable


def test_a_body_cut_short_is_counted_as_incomplete(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """A sender that promises 1000 bytes, or a chunk, and hangs up early is counted; the server keeps serving."""
    head = "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    with start_service(sink, cp_observe_judge) as service:
        assert _raw(service.port("http"), (head + "Content-Length: 1000\r\n\r\nabc").encode()) == b""
        assert _raw(service.port("http"), (head + "Transfer-Encoding: chunked\r\n\r\n10\r\nabc").encode()) == b""
        assert _chunked_post(service.port("http"), retrieval_request(1))[0] == 200
        stats = service.stats()
    assert stats["refusals"] == {"http:incomplete": 2}
    assert stats["requests"] == {"http:invalid": 2, "http:accepted": 1}


def test_unparseable_http_and_other_methods_are_counted(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """A garbage request line, an oversized header and a PUT are refused by status and counted by reason."""
    with start_service(sink, cp_observe_judge) as service:
        port = service.port("http")
        assert b" 400 " in _raw(port, b"POST /v1/traces HTTP/1.x\r\n\r\n")[:20]  # no version: still a status line
        assert b" 431 " in _raw(port, b"POST /v1/traces HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n")[:20]
        assert b" 405 " in _raw(port, b"PUT /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")[:20]
        stats = service.stats()
    assert stats["refusals"] == {"http:malformed": 2, "http:path": 1}
    assert stats["requests"] == {"http:invalid": 3}


def test_in_process_run_puts_logging_back(capsys: pytest.CaptureFixture[str]) -> None:
    """``main()`` called in process (a bad setting: exit 2) leaves the cp_observe logger as it found it."""
    from cp_observe.serve._cli import main

    logger = logging.getLogger("cp_observe")
    before = (list(logger.handlers), logger.level, logger.propagate)
    assert main(["--tls-cert-file", "/nonexistent.crt", "--grpc-port", "0", "--http-port", "0",
                 "--admin-port", "0", "--judge", "lexical"]) == 2
    assert "tls_cert_file and tls_key_file go together" in capsys.readouterr().err
    assert (list(logger.handlers), logger.level, logger.propagate) == before
