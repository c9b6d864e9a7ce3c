"""Helpers for the Phoenix tests: a real Arize Phoenix server on loopback, run from its own venv, and its REST API.

Phoenix lives in ``.venv-phoenix`` (``scripts/install-phoenix.sh``), never in the library's test venv: its
dependency tree is large and pinned, and the library must not be tested against whatever Phoenix happens to pull
in. The server is configured only through the environment variables its self-hosting docs list; every
``PHOENIX_*`` and ``OTEL_*`` variable of the caller is dropped first, so a developer's own Phoenix set-up (a
Postgres URL, auth, a collector endpoint) can never leak into the test.

What Phoenix keeps: span name, ids, parent, status, events and every attribute (``openinference.span.kind`` is
moved out of the attributes into ``span_kind``). What it drops: span links. ``phoenix.trace.otel.decode_otlp_span``
never reads ``Span.links``, the database has no column for them, the REST ``otlpv1`` view declares
``links: None`` and the GraphQL ``Span`` type has no such field; so the tests check the link in the OTLP request
the exporter built instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

REPO = Path(__file__).resolve().parents[1]
PHOENIX_VENV = REPO / ".venv-phoenix"
PHOENIX_EXECUTABLE = PHOENIX_VENV / "bin" / "phoenix"
INSTALL_HINT = "Phoenix is not installed: run scripts/install-phoenix.sh (creates .venv-phoenix)"

#: Startup runs the database migrations first (about 3 s on SQLite) and imports a large app; CI machines vary.
STARTUP_DEADLINE_S = 90.0
#: OTLP/HTTP ingestion is a background task and spans are inserted in batches, so reads lag the export.
SPANS_DEADLINE_S = 30.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def phoenix_env(working_dir: Path, port: int, grpc_port: int) -> dict[str, str]:
    """The server's environment: ours without any ``PHOENIX_*``/``OTEL_*`` variable, plus the test's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
    env.update(
        {
            "PHOENIX_HOST": "127.0.0.1",  # the HTTP app (UI, REST, GraphQL, OTLP/HTTP)
            "PHOENIX_PORT": str(port),
            # Phoenix binds its gRPC collector to [::] whatever PHOENIX_HOST says; the port is still ours alone.
            "PHOENIX_GRPC_PORT": str(grpc_port),
            "PHOENIX_WORKING_DIR": str(working_dir),  # the SQLite database goes here
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",  # no fonts, pixels or sandbox downloads
            "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
            "PHOENIX_ENABLE_MCP_SERVER": "false",
            "PHOENIX_LOG_MIGRATIONS": "false",
            "PYTHONUNBUFFERED": "1",  # so the log tail in a failure message is complete
        }
    )
    return env


@dataclass
class PhoenixServer:
    """A running Phoenix server on loopback."""

    port: int
    grpc_port: int
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        """Base URL of the HTTP app; OTLP/HTTP is ``{url}/v1/traces``."""
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of the server's output, for failure messages."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:]) or "(the server has written nothing yet)"

    def get_json(self, path: str, **query: Any) -> Any:
        """GET ``path`` with ``query`` (lists repeat the parameter) from the REST API."""
        url = f"{self.url}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())

    def project_spans(self, project: str) -> list[dict[str, Any]]:
        """Every span of ``project`` via ``GET /v1/projects/{project}/spans`` (all pages); [] before it exists."""
        spans: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            query: dict[str, Any] = {"limit": 1000}
            if cursor:
                query["cursor"] = cursor
            try:
                body = self.get_json(f"/v1/projects/{urllib.parse.quote(project, safe='')}/spans", **query)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:  # the project is created by the first span that names it
                    return []
                raise
            spans.extend(body["data"])
            cursor = body.get("next_cursor")
            if not cursor:
                return spans

    def wait_for_spans(
        self, project: str, done: Callable[[list[dict[str, Any]]], bool], deadline_s: float = SPANS_DEADLINE_S
    ) -> list[dict[str, Any]]:
        """Poll ``project`` until ``done(spans)`` holds; fail with what arrived and the server log if it never does."""
        deadline = time.monotonic() + deadline_s
        while True:
            spans = self.project_spans(project)
            if done(spans):
                return spans
            if time.monotonic() > deadline or self.process.poll() is not None:
                names = sorted(s["name"] for s in spans)
                raise AssertionError(
                    f"Phoenix project {project!r} holds {names} after {deadline_s:.0f} s "
                    f"(server exit code {self.process.poll()}); log tail:\n{self.log_tail()}"
                )
            time.sleep(0.2)


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def _ready(server: PhoenixServer) -> bool:
    """``/readyz`` answers 200 once the app is up and its database reachable; the gRPC port must accept too."""
    try:
        with urllib.request.urlopen(f"{server.url}/readyz", timeout=2) as response:
            if response.status != 200:
                return False
    except OSError:  # connection refused, reset, timeout, HTTP 503 while starting
        return False
    return _listening(server.grpc_port)


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    """SIGTERM a child we started (uvicorn shuts down gracefully), then SIGKILL it if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@contextlib.contextmanager
def phoenix_server(working_dir: Path, deadline_s: float = STARTUP_DEADLINE_S) -> Iterator[PhoenixServer]:
    """Start ``phoenix serve`` from ``.venv-phoenix`` on free loopback ports; yield it once ready; stop it."""
    working_dir.mkdir(parents=True, exist_ok=True)
    port, grpc_port = free_port(), free_port("0.0.0.0")
    while grpc_port == port:
        grpc_port = free_port("0.0.0.0")
    log_path = working_dir / "phoenix.log"
    log: IO[bytes] = log_path.open("wb")
    process = subprocess.Popen(
        [str(PHOENIX_EXECUTABLE), "serve"],
        env=phoenix_env(working_dir, port, grpc_port),
        cwd=working_dir,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = PhoenixServer(port, grpc_port, log_path, process)
    try:
        deadline = time.monotonic() + deadline_s
        while not _ready(server):
            if process.poll() is not None:
                raise RuntimeError(f"phoenix exited with {process.returncode}; log tail:\n{server.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"phoenix not ready after {deadline_s:.0f} s; log tail:\n{server.log_tail()}")
            time.sleep(0.2)
        yield server
    finally:
        stop_process(process)
        log.close()


class RecordingExporter(SpanExporter):
    """Wraps a real exporter: delegates every call and keeps each batch it was given with the result it returned."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.batches: list[tuple[tuple[ReadableSpan, ...], SpanExportResult]] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        self.batches.append((tuple(spans), result))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    @property
    def spans(self) -> list[ReadableSpan]:
        """Every span handed to the real exporter, in order."""
        return [span for batch, _ in self.batches for span in batch]
