"""dataset --judge [--batch]: a selection judged again, synchronously or through each provider's batch API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cp_observe.testing import JudgeServer
from tests.batch_support import BatchServer
from tests.replay_support import Exported, export_demo

PROVIDERS = {
    "openai": ("openai/gpt-4o-mini", "/v1", {"OPENAI_API_KEY": "sk-test-batch-key"}),
    "azure": ("azure/gpt-4o-mini", "", {"AZURE_API_KEY": "azure-test-key", "AZURE_API_VERSION": "2024-10-21",
                                        "CP_OBSERVE_AZURE_BATCH_DEPLOYMENT": "judge-global-batch"}),
    "anthropic": ("anthropic/claude-haiku-4-5", "", {"ANTHROPIC_API_KEY": "sk-ant-test"}),
    "gemini": ("gemini/gemini-2.5-flash", "", {"GEMINI_API_KEY": "gemini-test-key"}),
}
_JUDGED = ("verdicts", "reasons", "score", "average_precision")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The demo run live at rate 1, its traces written as a Collector file."""
    return export_demo(tmp_path_factory.mktemp("batch-dataset"), 1.0, turns=12)


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cp_observe.cli", "dataset", *args], capture_output=True, text=True,
                          timeout=180, check=False, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env})


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def synchronous(demo: Exported, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The demo's evaluations judged again synchronously by the loopback judge (the batch runs' yardstick)."""
    out = tmp_path_factory.mktemp("sync") / "sync.jsonl"
    with JudgeServer() as server:
        done = _run(str(demo.jsonl), "--judge", "openai/gpt-4o-mini", "--judge-api-base", server.url, "-o", str(out),
                    env={"OPENAI_API_KEY": "sk-test-sync-key"})
        assert done.returncode == 0, done.stderr
        assert len(server.requests) == len(demo.live)
    return _lines(out)


def test_judge_again_writes_the_new_judges_verdicts(demo: Exported, synchronous: list[dict[str, Any]],
                                                    tmp_path: Path) -> None:
    """--judge: every selected line judged again (the judge model and reasons are the new judge's), ids kept."""
    stored = tmp_path / "stored.jsonl"
    assert _run(str(demo.jsonl), "-o", str(stored), env={}).returncode == 0
    before = _lines(stored)
    assert [(b["trace_id"], b["span_id"], b["contexts"]) for b in before] == [
        (a["trace_id"], a["span_id"], a["contexts"]) for a in synchronous]
    assert all(a["judge_model"] == "openai/gpt-4o-mini" for a in synchronous)
    assert all(b["judge_model"] != "openai/gpt-4o-mini" for b in before)
    assert any("the test policy" in reason for a in synchronous for reason in a["reasons"])


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_batch_judge_again_equals_the_synchronous_one(name: str, demo: Exported, synchronous: list[dict[str, Any]],
                                                       tmp_path: Path) -> None:
    """--batch: one batch, the same verdicts and scores as the synchronous re-score to the last digit; resumable."""
    judge, suffix, env = PROVIDERS[name]
    out = tmp_path / "batch.jsonl"
    with BatchServer(polls_to_end=3) as server:
        command = [str(demo.jsonl), "--judge", judge, "--judge-api-base", server.url + suffix, "--batch",
                   "--batch-poll-interval", "0.01", "-o", str(out)]
        stopped = _run(*command, "--batch-no-wait", env=env)
        assert stopped.returncode == 3, stopped.stderr
        assert not out.exists() and "still open" in stopped.stdout
        done = _run(*command, env=env)
        assert done.returncode == 0, done.stderr
        assert server.created == 1 and "0 submitted by this run" in done.stdout
        assert "billed at the batch price: $" in done.stdout
    batched = _lines(out)
    assert [{k: b[k] for k in _JUDGED} for b in batched] == [{k: s[k] for k in _JUDGED} for s in synchronous]


def test_batch_without_a_judge_is_refused(demo: Exported, tmp_path: Path) -> None:
    """--batch names what it needs."""
    done = _run(str(demo.jsonl), "--batch", "-o", str(tmp_path / "x.jsonl"), env={})
    assert done.returncode == 2 and "--judge" in done.stderr
