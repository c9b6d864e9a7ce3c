"""The GC stress script, short: abandoned decorated generators ended by the collector never freeze the host.

``benchmarks/request_path/stress_gc.py`` runs in a child process (a freeze must not take the test session with it): host
threads abandon half-consumed decorated generators in reference cycles, every call sampled, the queue full,
GC thresholds low. Its watchdog dumps every thread's stack and exits 2 on a freeze; the stack is in the
failure message.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # a whole program in child processes: not the quick unit tier

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "request_path" / "stress_gc.py"
SECONDS = 15
STALL_SECONDS = 15  # a freeze is reported this long after it starts; no healthy step comes near it
# Start-up, the run, the remaining collection, the flush (a queue of 4 at 50 ms), shutdown, and a freeze's report.
TIMEOUT = SECONDS + STALL_SECONDS + 90


def _row(output: str, what: str) -> str:
    """The value cell of the totals row named ``what``."""
    match = re.search(rf"^\| {re.escape(what)} \| (.*?) \|$", output, re.MULTILINE)
    assert match is not None, f"no row {what!r} in the output:\n{output}"
    return match.group(1)


def test_abandoned_generators_collected_anywhere_never_freeze_the_host() -> None:
    """15 s of the stress script: exit 0, calls and collections made, the accounting invariant intact."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_"))}
    try:
        run = subprocess.run(
            [sys.executable, str(SCRIPT), "--seconds", str(SECONDS), "--stall-seconds", str(STALL_SECONDS)],
            capture_output=True, text=True, timeout=TIMEOUT, check=False, env=env, cwd=SCRIPT.parents[1],
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"stress_gc.py ran past {TIMEOUT} s (its watchdog did not fire):\n"
                             f"{exc.stdout!r}\n{exc.stderr!r}") from None
    report = f"exit {run.returncode}\n--- stdout\n{run.stdout}\n--- stderr (a freeze's stacks)\n{run.stderr}"
    assert run.returncode == 0, report
    assert int(_row(run.stdout, "calls, all kinds (decorated)")) > 0, report
    assert int(_row(run.stdout, "gc collections (gen 0 / 1 / 2)").split()[0]) > 0, report
    assert int(_row(run.stdout, "spans ended inside a collection, on the collecting thread")) > 0, report
    assert "dropped:queue_full" in _row(run.stdout, "top reasons"), report  # the queue was full, refusing
    assert _row(run.stdout, "host thread errors") == "0", report
    assert _row(run.stdout, "sampled == scored + failed + dropped + skipped").startswith("yes "), report
