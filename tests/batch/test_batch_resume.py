"""replay --batch survives a kill: the child is killed while it waits, the same command resumes its batch."""

from __future__ import annotations

import json
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


PROVIDERS = {
    "openai": ("openai/gpt-4o-mini", "/v1", {"OPENAI_API_KEY": "sk-test-batch-key"}),
    "azure": ("azure/gpt-4o-mini", "", {"AZURE_API_KEY": "azure-test-key", "AZURE_API_VERSION": "2024-10-21",
                                        "CP_OBSERVE_AZURE_BATCH_DEPLOYMENT": "judge-global-batch"}),
    "anthropic": ("anthropic/claude-haiku-4-5", "", {"ANTHROPIC_API_KEY": "sk-ant-test"}),
    "gemini": ("gemini/gemini-2.5-flash", "", {"GEMINI_API_KEY": "gemini-test-key"}),
}


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_a_run_killed_between_create_and_state_never_buys_the_batch_twice(name: str, demo: Exported,
                                                                          tmp_path: Path) -> None:
    """SIGKILL after the provider made the batch and before the run learnt its id: the run again finds it."""
    judge, suffix, extra = PROVIDERS[name]
    env = {**os.environ, **extra, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = tmp_path / "evaluations.jsonl"
    state = tmp_path / "evaluations.jsonl.batch" / "state.json"
    with BatchServer(stall_creates=True) as server:
        command = _command(demo, server.url, out)
        command[command.index("openai/gpt-4o-mini")] = judge
        command[command.index(server.url + "/v1")] = server.url + suffix
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while server.created == 0:
                assert child.poll() is None, child.communicate()
                assert time.monotonic() < deadline, "the child never created its batch"
                time.sleep(0.02)
        finally:
            child.send_signal(signal.SIGKILL)
            child.communicate()
        server.release()
        saved = json.loads(state.read_text())
        assert saved["batches"] == [] and saved["intent"]["requests"] > 0, "the kill was not between create and id"
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert server.created == 1, "the resumed run bought the batch again"
        kept = [b["id"].removeprefix("batches/") for b in json.loads(state.read_text())["batches"]]
        assert kept == list(server.batches)
        assert "0 submitted by this run" in done.stdout
        assert ("taken by time and size" in done.stderr) == (name == "anthropic"), done.stderr
    assert set(evaluations(out)) == set(demo.live)


def test_a_create_that_never_reached_the_provider_is_submitted_on_resume(demo: Exported, tmp_path: Path) -> None:
    """A create refused (nothing made) leaves an intent; the run again finds no batch for it and submits once."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-batch-key", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = tmp_path / "evaluations.jsonl"
    with BatchServer(creates_allowed=0) as server:
        failed = subprocess.run(_command(demo, server.url, out), env=env, capture_output=True, text=True, timeout=120,
                                check=False)
        assert failed.returncode == 1 and server.created == 0, failed.stderr
        assert "intent" in json.loads((tmp_path / "evaluations.jsonl.batch" / "state.json").read_text())
        server.creates_allowed = None
        done = subprocess.run(_command(demo, server.url, out), env=env, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr
        assert server.created == 1 and "never reached openai" in done.stderr
    assert set(evaluations(out)) == set(demo.live)
