"""replay --batch survives a kill: the child is killed while it waits, the same command resumes its batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.batch_support import BatchServer
from tests.replay_support import Exported, evaluations, export_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The demo run live at rate 1, its traces written as a Collector file."""
    return export_demo(tmp_path_factory.mktemp("batch-kill"), 1.0, turns=12)


def _command(demo: Exported, url: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "cp_observe.cli", "replay", str(demo.jsonl), "--judge", "openai/gpt-4o-mini",
            "--judge-api-base", url + "/v1", "--batch", "--batch-poll-interval", "0.05", "-o", str(out), "-q"]


def test_a_killed_batch_replay_resumes_without_submitting_again(demo: Exported, tmp_path: Path) -> None:
    """SIGKILL while waiting; the same command run again polls the batch the first one created, then scores."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-batch-key", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = tmp_path / "evaluations.jsonl"
    with BatchServer(polls_to_end=10**9) as server:
        child = subprocess.Popen(_command(demo, server.url, out), env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while not any(b.polls >= 2 for b in server.batches.values()):
                assert child.poll() is None, child.communicate()
                assert time.monotonic() < deadline, "the child never polled its batch"
                time.sleep(0.05)
        finally:
            child.send_signal(signal.SIGKILL)
            child.communicate()
        assert child.returncode == -signal.SIGKILL
        assert server.created == 1 and (tmp_path / "evaluations.jsonl.batch" / "state.json").is_file()
        server.polls_to_end = 1
        done = subprocess.run(_command(demo, server.url, out), env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert server.created == 1, "the resumed run submitted again"
        assert "resumed" in done.stdout and "0 submitted by this run" in done.stdout
        assert "billed at the batch price: $" in done.stdout
    assert set(evaluations(out)) == set(demo.live)
