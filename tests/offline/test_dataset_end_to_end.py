"""End to end on the demo's export: ``cp-observe dataset --max-score`` → ``run_evals`` on ``load_dataset`` with a
candidate retriever, judged by an LLM judge over real HTTP (litellm → the loopback judge server) → its output →
``cp-observe report --compare``, whose verdict and exit code a CI job reads."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import cp_observe
from cp_observe.testing import JudgeServer
from cp_observe.testing._prompt_reader import parse_judge_prompt
from tests.replay_support import Exported, export_demo

CLI = [sys.executable, "-m", "cp_observe.cli"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    return export_demo(tmp_path_factory.mktemp("demo"), 1.0)


@pytest.fixture(scope="module")
def server() -> Iterator[JudgeServer]:
    with JudgeServer() as running:
        yield running


def _judge(server: JudgeServer) -> cp_observe.LLMJudge:
    return cp_observe.LLMJudge("openai/judge-test", api_base=server.url, api_key="sk-test-key-0000", timeout=10.0)


def _rerun(server: JudgeServer, items: list[dict[str, object]], target: Callable[[str], list[str]],
           out: Path) -> cp_observe.EvalRunResult:
    scorer = cp_observe.create_context_precision_scorer(_judge(server), {"contexts_from_output": True})
    result = cp_observe.run_evals(data=items, scorers=[scorer], target=target)
    assert result.failed[scorer.id] == 0, [r.errors for r in result.items if r.errors]
    assert cp_observe.write_eval_results(out, result, scorer) == len(items)
    return result


def test_failing_retrievals_rerun_and_compared(demo: Exported, server: JudgeServer, tmp_path: Path) -> None:
    """The failing production retrievals re-scored: the same retriever gives no difference, one that ranks the
    relevant contexts first is better (exit 0), one that returns noise is worse (exit 3)."""
    failing = tmp_path / "failing.jsonl"
    done = subprocess.run([*CLI, "dataset", str(demo.jsonl), "--max-score", "0.6", "-o", str(failing)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    items = cp_observe.load_dataset(failing)
    assert len(items) >= 5 and all(float(i["score"]) <= 0.6 for i in items)  # type: ignore[arg-type]
    by_query = {str(i["input"]): i for i in items}

    def stored(query: str) -> list[str]:
        return list(by_query[query]["contexts"])  # type: ignore[call-overload]

    def relevant_first(query: str) -> list[str]:  # a reranker that knows what production's judge found useful
        item = by_query[query]
        pairs = list(zip(item["contexts"], item["verdicts"], strict=True))  # type: ignore[call-overload]
        return [c for c, v in pairs if v] + [c for c, v in pairs if not v]

    def noise(query: str) -> list[str]:
        return ["Zebras graze on savanna grasslands.", "Volcanic basalt cools slowly."]

    server.clear()
    runs = {}
    for name, target in (("baseline", stored), ("better", relevant_first), ("worse", noise)):
        runs[name] = tmp_path / f"{name}.jsonl"
        _rerun(server, items, target, runs[name])
    prompts = [parse_judge_prompt(r.body["messages"]) for r in server.requests if r.body]
    references = {p[1] for p in prompts if p is not None}
    assert references <= {str(i["answer"]) for i in items if i["answer"]} | {str(i["input"]) for i in items}
    assert references

    def compare(second: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, "report", "--compare", str(runs["baseline"]), str(second), "-o",
                               str(tmp_path / f"{second.stem}.html")], capture_output=True, text=True, timeout=60,
                              check=False)

    same = compare(runs["baseline"])
    assert same.returncode == 0 and "NO DIFFERENCE" in same.stdout, same.stdout + same.stderr
    better = compare(runs["better"])
    assert better.returncode == 0 and "BETTER" in better.stdout, better.stdout + better.stderr
    worse = compare(runs["worse"])
    assert worse.returncode == 3 and "WORSE" in worse.stdout, worse.stdout + worse.stderr
    assert f"paired over {len(items)} shared evaluations" in worse.stdout
    # Against the production export itself: pairs by trace and span id, though the export holds every turn.
    production = subprocess.run([*CLI, "report", str(demo.jsonl), "--compare", str(runs["worse"]), "-o",
                                 str(tmp_path / "p.html")], capture_output=True, text=True, timeout=60, check=False)
    assert production.returncode == 3 and f"paired over {len(items)}" in production.stdout, production.stdout
