"""calibrate --judge --batch: the replay through the judge goes as a provider batch and resumes like replay's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cp_observe._judging._labels import HumanLabel, label_line
from tests.batch_support import BatchServer
from tests.replay_support import Exported, export_demo

CLI = [sys.executable, "-m", "cp_observe.cli", "calibrate"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """One demo run (12 turns, every trace scored) as a Collector file."""
    return export_demo(tmp_path_factory.mktemp("batch-calibrate"), 1.0, turns=12)


def test_calibrate_batch_submits_once_and_resumes(exported: Exported, tmp_path: Path) -> None:
    """--batch-no-wait exits 3 with the batch open; the same command resumes it and writes the figures."""
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(label_line(HumanLabel(trace, span, verdicts[0], position=0)) + "\n"
                              for span, (trace, _, verdicts) in exported.live.items()))
    figures = tmp_path / "figures.json"
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-batch-key", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with BatchServer(polls_to_end=2) as server:
        command = [*CLI, str(exported.jsonl), "--labels", str(labels), "--json", str(figures),
                   "--judge", "openai/gpt-4o-mini", "--judge-api-base", server.url + "/v1", "--batch",
                   "--batch-poll-interval", "0.05"]
        first = subprocess.run([*command, "--batch-no-wait"], capture_output=True, text=True, timeout=120, env=env)
        assert first.returncode == 3, first.stderr
        assert "run the same command again to resume" in first.stderr and not figures.exists()
        second = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        assert second.returncode == 0, second.stderr
        assert server.created == 1 and "resumed" in second.stderr
    assert (tmp_path / "figures.json.batch" / "state.json").is_file()
    groups = json.loads(figures.read_text())["groups"]
    [group] = [g for g in groups if g["data_source"] != "all data sources"]
    assert group["retrievals"] == len(exported.live) and group["labels"] == len(exported.live)
    assert {g["judge"]["model"] for g in groups} == {"openai/gpt-4o-mini"}
