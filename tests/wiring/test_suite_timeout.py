"""The suite cannot freeze: a hung test, or a hang after the last test, fails in minutes with every thread's stack.

Each test runs a tiny pytest session in a subprocess on a file that deadlocks on a ``threading.Lock`` acquired
twice, with the timeouts shortened to seconds; the configuration the real suite runs with is checked as well, so
removing it fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - pytest itself depends on tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]

_HUNG_TEST = '''
import threading


def helper_thread_waits(event):
    event.wait()


def deadlocked_here():
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()  # never returns


def test_hangs():
    threading.Thread(target=helper_thread_waits, args=(threading.Event(),), name="helper", daemon=True).start()
    deadlocked_here()
'''

_HANG_AT_EXIT = '''
import atexit
import threading


def hangs_at_exit():
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()  # never returns


atexit.register(hangs_at_exit)


def test_passes():
    pass
'''


def _ini() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["tool"]["pytest"]["ini_options"]  # type: ignore[no-any-return]


def _session(tmp_path: Path, source: str) -> list[str]:
    """Arguments for a pytest session on ``source`` alone: its own ini file, none of this suite's plugins."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "test_hang.py").write_text(source, encoding="utf-8")
    return ["-m", "pytest", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), "-p", "no:cacheprovider",
            str(tmp_path / "test_hang.py")]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def test_the_suite_has_a_per_test_timeout_with_stack_dumps() -> None:
    """pyproject.toml: pytest-timeout in the test extra; a timeout per test, the thread method, faulthandler first."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert any(re.match(r"pytest-timeout\s*>=", req) for req in project["project"]["optional-dependencies"]["test"])
    ini = _ini()
    # The thread method dumps every thread's stack and ends the process even when the main thread is stuck in a
    # lock or in C code, where the signal method's exception would never be raised.
    assert ini["timeout_method"] == "thread"
    assert 60 <= int(ini["timeout"]) <= 900
    # faulthandler (all threads, C frames too) fires first, so its dump is in the log before the process ends.
    assert 0 < int(ini["faulthandler_timeout"]) < int(ini["timeout"])


def test_a_hung_test_fails_with_every_threads_stack(tmp_path: Path) -> None:
    """A test deadlocked on a Lock ends the session non-zero within seconds, printing the deadlocked frame."""
    ini = _ini()
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, *_session(tmp_path, _HUNG_TEST), "-p", "pytest_timeout", "-o", "timeout=3",
         "-o", f"timeout_method={ini['timeout_method']}", "-o", "faulthandler_timeout=2"],
        capture_output=True, text=True, timeout=60, check=False, env=_env(),
    )
    took = time.monotonic() - started
    output = out.stdout + out.stderr
    assert out.returncode != 0, output
    assert took < 30, took
    assert "Timeout (0:00:02)!" in output  # faulthandler's dump, first
    assert "+ Timeout +" in output  # then pytest-timeout's, which ends the process
    assert re.search(r'test_hang\.py", line \d+,? in deadlocked_here', output), output
    assert re.search(r'test_hang\.py", line \d+,? in helper_thread_waits', output), output  # every thread


def test_a_hang_after_the_last_test_fails_with_a_stack_dump(tmp_path: Path) -> None:
    """scripts/test's own command: a hang in an atexit hook is aborted at its deadline and the frame is printed."""
    if shutil.which("timeout") is None:
        pytest.skip("coreutils timeout is not installed")
    [line] = [line for line in (ROOT / "scripts" / "test").read_text(encoding="utf-8").splitlines()
              if line.startswith("exec ")]
    # ($foreground is --foreground only from a terminal, so that Ctrl-C reaches pytest; not here.)
    match = re.fullmatch(r'exec timeout \$foreground (-s ABRT -k \d+) "\$\{CP_OBSERVE_TEST_TIMEOUT_S:-\d+\}" '
                         r'\.venv/bin/python (.*)-m pytest "\$@"', line)
    assert match is not None, line
    wrapper, python_options = ["timeout", *match.group(1).split()], match.group(2).split()
    assert "-Xfaulthandler" in "".join(python_options)  # pytest's faulthandler is gone by atexit time
    started = time.monotonic()
    out = subprocess.run(
        [*wrapper, "4", sys.executable, *python_options, *_session(tmp_path, _HANG_AT_EXIT)],
        capture_output=True, text=True, timeout=120, check=False, env=_env(),
    )
    took = time.monotonic() - started
    assert out.returncode == 124, (out.returncode, out.stdout, out.stderr)  # timeout's "timed out"
    assert "1 passed" in out.stdout
    assert "Fatal Python error: Aborted" in out.stderr
    assert re.search(r'test_hang\.py", line \d+ in hangs_at_exit', out.stderr), out.stderr
    assert took < 60, took
