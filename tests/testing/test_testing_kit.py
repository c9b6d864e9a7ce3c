"""The test kit for users: ``FakeJudge``, ``EvaluationCapture`` and the pytest plugin's fixtures."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

import cp_observe
from cp_observe._config import _runtime
from cp_observe._types import Usage
from cp_observe.testing import EvaluationCapture, FakeJudge, JudgeCall
from cp_observe.testing._capture import EvaluationCapture as CaptureClass

DOCS = ["The refund window is thirty days.", "Shipping is free over fifty euros."]


@cp_observe.retriever
def search(query: str) -> list[str]:
    return list(DOCS)


@cp_observe.retriever
def search_reversed(query: str) -> list[str]:
    return list(reversed(DOCS))


def test_the_fixture_scores_a_decorated_retriever(cp_observe_evaluations: CaptureClass) -> None:
    """A retrieval whose first context is the relevant one scores 1.0, recorded as an evaluation."""
    assert search("what is the refund window?") == DOCS
    (evaluation,) = cp_observe_evaluations.evaluations()
    assert evaluation.score == 1.0
    assert evaluation.verdicts == (True, False)
    assert evaluation.judge_model == "fake-judge"


def test_rank_matters(cp_observe_evaluations: CaptureClass) -> None:
    """The same contexts in the other order score 0.5: the relevant one is second."""
    search_reversed("what is the refund window?")
    (evaluation,) = cp_observe_evaluations.evaluations()
    assert evaluation.score == 0.5


def test_the_fake_judge_records_what_reached_it(cp_observe_evaluations: CaptureClass,
                                                 cp_observe_judge: FakeJudge) -> None:
    """Every judge call is recorded with the query, the reference and the contexts."""
    search("what is the refund window?")
    cp_observe_evaluations.evaluations()
    query = "what is the refund window?"
    assert cp_observe_judge.calls == [JudgeCall(query, query, tuple(DOCS))]


def test_a_handler_decides_the_verdicts() -> None:
    """A handler answering 'not relevant' everywhere gives a score of 0."""

    def nothing(query: str, reference: str, contexts: Sequence[str]) -> list[bool]:
        return [False] * len(contexts)

    with EvaluationCapture(FakeJudge(nothing, model="strict")) as capture:
        search("what is the refund window?")
        (evaluation,) = capture.evaluations()
    assert (evaluation.score, evaluation.judge_model) == (0.0, "strict")


async def test_a_fake_judge_reports_the_usage_and_cost_it_is_given() -> None:
    """usage= and cost_usd= come back on every judgement (for budget and token tests); by default one call, no cost."""
    priced = FakeJudge(usage=Usage(1, 10, 5), cost_usd=0.001)
    judgement = await priced.judge("q", "refund window", ["The refund window is thirty days."])
    assert (judgement.usage, judgement.cost_usd) == (Usage(1, 10, 5), 0.001)
    plain = await FakeJudge().judge("q", "refund window", ["x"])
    assert (plain.usage, plain.cost_usd) == (Usage(calls=1), None)
    with pytest.raises(ValueError, match="cost_usd"):
        FakeJudge(cost_usd=-1.0)


def test_a_failing_handler_fails_the_evaluation_not_the_call() -> None:
    """A handler that raises leaves the host's result alone and yields no evaluation."""

    def broken(query: str, reference: str, contexts: Sequence[str]) -> list[bool]:
        raise RuntimeError("judge down")

    with EvaluationCapture(FakeJudge(broken)) as capture:
        assert search("what is the refund window?") == DOCS
        assert capture.evaluations() == []
        assert capture.processor.stats()["failed"] == 1


def test_closing_gives_the_decorators_back_their_set_up() -> None:
    """After the capture closes, the decorators write where they wrote before."""
    before = _runtime.RUNTIME_HOLDER[0].tracer
    with EvaluationCapture(FakeJudge()):
        assert _runtime.RUNTIME_HOLDER[0].tracer is not before
    assert _runtime.RUNTIME_HOLDER[0].tracer is before


def test_a_user_suite_gets_the_fixtures_from_the_entry_point(tmp_path: Path) -> None:
    """A test file of a user's own, with no conftest, finds the fixtures through the pytest11 entry point."""
    (tmp_path / "test_user.py").write_text(textwrap.dedent('''
        import cp_observe

        @cp_observe.retriever
        def lookup(query):
            return ["Refund requests are accepted within thirty days.", "Our office is in Lyon."]

        def test_scored(cp_observe_evaluations):
            lookup("how long do refund requests take?")
            (evaluation,) = cp_observe_evaluations.evaluations()
            assert evaluation.verdicts == (True, False)
    '''), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
