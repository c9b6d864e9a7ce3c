"""The demo, as a user runs it: offline, in a subprocess, with metrics and a degradation."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.serve_support import stop_by_signal

pytestmark = pytest.mark.e2e  # a whole program in child processes: not the quick unit tier

DEMO = [sys.executable, "-m", "cp_observe.cli", "demo"]

# A SIGALRM every millisecond lands, sooner or later, inside the wait of the demo's stop signal. With a
# threading.Event there the handler's set() blocks on the Condition lock the interrupted wait() holds (it hangs,
# then nested handlers overflow the stack); with the SimpleQueue it must not.
_SIGNAL_STORM = """
import signal, sys, time
from cp_observe.demo._cli import _Stop
stop = _Stop()
signal.signal(signal.SIGALRM, stop.signal)
signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
waits, deadline = 0, time.monotonic() + 3
while time.monotonic() < deadline:
    stop._stopped = False
    stop.wait(0.00001)
    waits += 1
signal.setitimer(signal.ITIMER_REAL, 0)
print("waits", waits, "stopped", stop.is_set())
"""


def _run(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, *DEMO, *args], capture_output=True, text=True, timeout=120, check=False)


def test_demo_scores_every_question_offline() -> None:
    """One pass over the questions: every turn scored by the offline judge, a MAP printed."""
    out = _run()
    assert out.returncode == 0, out.stderr
    assert "judge=lexical" in out.stdout
    assert re.search(r"sampled MAP over \d+ scored turns: 0\.\d\d|1\.00", out.stdout)
    stats = re.search(r"sampled (\d+), scored (\d+), failed 0, dropped 0, skipped 0", out.stdout)
    assert stats is not None and stats.group(1) == stats.group(2)
    assert "ranks: 1" in out.stdout
    assert "チーム" in out.stdout or "ですか" in out.stdout  # Japanese questions are part of the run


def test_degradation_makes_the_map_drop() -> None:
    """After --degrade-after N the MAP of the same data source falls well below its earlier level."""
    out = _run("--turns", "24", "--degrade-after", "12", "--quiet")
    assert out.returncode == 0, out.stderr
    before = float(re.search(r"before degradation: ([0-9.]+)", out.stdout).group(1))  # type: ignore[union-attr]
    after = float(re.search(r"after degradation: ([0-9.]+)", out.stdout).group(1))  # type: ignore[union-attr]
    assert before >= 0.7
    assert after <= 0.4


def test_demo_serves_prometheus_metrics() -> None:
    """--metrics-port exposes the score histogram with its data source label while the demo loops."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [*DEMO, "--loop", "--interval", "0.05", "--metrics-port", str(port), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        body = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "context_precision_score_count" not in body:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    body = response.read().decode()
            except OSError:
                time.sleep(0.2)
        assert re.search(r'^context_precision_score_count\{context_precision_judge_kind="lexical",'
                         r'context_precision_judge_model="lexical",context_precision_judge_prompt_version="none",'
                         r'gen_ai_agent_name="demo-agent",gen_ai_data_source_id="demo-bm25"', body, re.M), body
        assert "context_precision_evaluations_total" in body
        assert 'outcome="scored"' in body
    finally:
        process.terminate()
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "sampled MAP" in out


def test_demo_runs_with_only_loopback() -> None:
    """In a network namespace with no network at all, the offline demo runs (no cloud call, no cost map)."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"], check=False).returncode != 0:
        pytest.skip("cannot create a network namespace here (needs root and unshare)")
    out = _run("--turns", "4", prefix=("unshare", "-n"))
    assert out.returncode == 0, out.stderr
    assert "sampled MAP over 4 scored turns" in out.stdout


def test_the_stop_signal_survives_a_signal_storm() -> None:
    """Signals arriving while the main thread waits on the demo's stop never deadlock it (the handler takes no lock)."""
    out = subprocess.run([sys.executable, "-c", _SIGNAL_STORM], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert re.fullmatch(r"waits \d+ stopped True\n", out.stdout), out.stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_looping_demo_promptly(sig: signal.Signals) -> None:
    """SIGTERM and SIGINT end --loop inside its wait between turns (here 30 s): a summary and exit 0 at once."""
    process = subprocess.Popen([*DEMO, "--loop", "--interval", "30"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)

    def first_turn_scored() -> None:  # then it waits 30 s for the next turn
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        while "ranks:" not in process.stdout.readline():
            assert time.monotonic() < deadline and process.poll() is None

    out, err, took = stop_by_signal(process, sig, first_turn_scored)
    assert process.returncode == 0, err
    assert "sampled MAP over 1 scored turns" in out, out
    assert took < 10, took
