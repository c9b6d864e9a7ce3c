"""The README's quick start runs as written and shows a score; its production call configures a real LLM judge."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cp_observe.testing import JudgeServer
from tests.readme_support import quickstart_blocks, run_quickstart

pytestmark = pytest.mark.e2e  # whole programs in child processes: not the quick unit tier

_BIN = Path(sys.executable).parent  # this venv: cp-observe installed from the checkout


def test_the_quick_start_prints_its_score_on_the_console(tmp_path: Path) -> None:
    """The script and command as written print the answer, and the lines the README shows, score included."""
    run = run_quickstart(_BIN, tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("Paris is the capital of France.\n")
    output = run.stdout.splitlines()
    for line in quickstart_blocks()["output"].splitlines():
        assert line in output, (line, run.stdout[-3000:])


def test_the_production_call_runs_in_the_quick_start(tmp_path: Path) -> None:
    """The quick start with the production configure() as written (its judge at loopback) runs cleanly."""
    blocks = quickstart_blocks()
    script, call = blocks["quickstart.py"], blocks["production"]
    start = script.index("cp_observe.configure(")
    end = script.index(")\n", start) + 2
    with JudgeServer() as server:
        run = run_quickstart(_BIN, tmp_path, script=script[:start] + call + script[end:],
                             CP_OBSERVE_JUDGE_API_BASE=server.url, OPENAI_API_KEY="sk-test")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("Paris is the capital of France.\n")
    assert "Traceback" not in run.stderr
