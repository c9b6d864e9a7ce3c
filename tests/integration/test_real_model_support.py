"""The slow tier's failure reporting, checked in the fast tier: a model server killed by a signal is a plain failure."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from tests.integration.real_model_support import REBUILD_HINT, LlamaServer, ServerStartError, signal_death


class _SelfKillingServer(LlamaServer):
    """A server command that dies from ``signum`` at once, as a CPU-tuned llama.cpp build dies from SIGILL."""

    def __init__(self, workdir: Path, signum: int) -> None:
        super().__init__(Path("unused.gguf"), workdir)
        self.signum = signum

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-c", f"import os; os.kill(os.getpid(), {self.signum})"]


#: Answers ``GET /v1/models`` once, as llama_cpp.server does when ready, then kills itself with SIGILL, as a
#: CPU-tuned build does at the first evaluated token.
_READY_THEN_SIGILL = """
import http.server, json, os, signal, sys, threading
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": "gemma-3-270m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGILL)).start()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


class _ReadyThenSigill(LlamaServer):
    def __init__(self, workdir: Path) -> None:
        super().__init__(Path("unused.gguf"), workdir)

    def command(self, port: int) -> list[str]:
        return [sys.executable, "-c", _READY_THEN_SIGILL, str(port)]


def test_sigill_at_start_names_signal_flags_and_fix(tmp_path: Path) -> None:
    """A server that dies from SIGILL before it is ready raises with the signal, the build flags and the rebuild."""
    server = _SelfKillingServer(tmp_path, signal.SIGILL)
    with pytest.raises(ServerStartError) as raised:
        server.start(deadline_s=30)
    message = str(raised.value)
    assert "killed by SIGILL (signal 4)" in message
    assert "instruction this CPU does not run" in message
    assert "built as:" in message
    assert REBUILD_HINT in message


def test_death_reports_a_server_killed_after_start(tmp_path: Path) -> None:
    """A server that came up and then died from SIGILL is reported by ``death()`` with the signal and the fix."""
    server = _ReadyThenSigill(tmp_path)
    server.start(deadline_s=30)
    try:
        deadline = time.monotonic() + 30
        died = server.death()
        while died is None and time.monotonic() < deadline:
            time.sleep(0.05)
            died = server.death()
    finally:
        server.stop()
    assert died is not None, "the server never died"
    assert "killed by SIGILL" in died
    assert REBUILD_HINT in died
    assert server.death() is None  # stopped: nothing running, nothing to report


def test_signal_death_only_for_signals() -> None:
    """Return codes of a running process or a clean or failed exit are no signal death; other signals are named."""
    assert signal_death(None) is None
    assert signal_death(0) is None
    assert signal_death(1) is None
    died = signal_death(-signal.SIGSEGV)
    assert died is not None
    assert "SIGSEGV" in died
    assert "instruction" not in died
