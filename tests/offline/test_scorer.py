"""The scorer API, shaped like the reference scorer: creation rules, input/output shapes, run_evals."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import cp_observe
from cp_observe import ContextPrecisionOptions, JudgeError, Verdict
from cp_observe.testing import FakeJudge

CONTEXTS = ["Paris is the capital of France.", "Bananas are yellow.", "France borders Spain."]


def test_neither_context_nor_extractor_is_refused() -> None:
    """Creating a scorer without context or extractor raises ValueError."""
    with pytest.raises(ValueError, match="context"):
        cp_observe.create_context_precision_scorer(FakeJudge(), {})
    with pytest.raises(ValueError, match="context"):
        cp_observe.create_context_precision_scorer(FakeJudge())


def test_empty_context_list_is_refused() -> None:
    """An empty context list raises ValueError at creation."""
    with pytest.raises(ValueError, match="empty"):
        cp_observe.create_context_precision_scorer(FakeJudge(), {"context": []})


@pytest.mark.parametrize("scale", [-1, float("nan")])
def test_bad_scale_is_refused(scale: float) -> None:
    """A negative or NaN scale raises ValueError at creation."""
    with pytest.raises(ValueError):
        cp_observe.create_context_precision_scorer(FakeJudge(), {"context": CONTEXTS, "scale": scale})


def test_unknown_option_is_refused() -> None:
    """A misspelt option is an error, not silently ignored."""
    with pytest.raises(ValueError):
        cp_observe.create_context_precision_scorer(FakeJudge(), {"contexts": CONTEXTS})


def test_extractor_wins_over_context_and_camel_case_is_accepted() -> None:
    """With both given, contextExtractor decides what is judged."""
    judge = FakeJudge()
    scorer = cp_observe.create_context_precision_scorer(
        judge, {"context": ["ignored"], "contextExtractor": lambda i, o: ["Paris is big.", "Bananas."]}
    )
    result = scorer.run(input="capital?", output="Paris is the capital.")
    assert list(judge.calls[0].contexts) == ["Paris is big.", "Bananas."]
    assert [v.relevant for v in result.verdicts] == [True, False]
    assert result.score == 1.0


def test_options_as_a_pydantic_model_and_scale() -> None:
    """Options may be a ContextPrecisionOptions; the score is scaled and rounded half up."""
    options = ContextPrecisionOptions(context=CONTEXTS, scale=10)
    result = cp_observe.create_context_precision_scorer(FakeJudge(), options).run(
        input="capital of France?", output="Paris is the capital of France."
    )
    assert [v.relevant for v in result.verdicts] == [True, False, True]
    assert result.score == 8.33
    assert result.scale == 10.0
    assert result.average_precision == pytest.approx(5 / 6)


def test_chat_message_inputs_and_outputs() -> None:
    """Input as chat messages or a mapping with inputMessages; output as a message or a list of them."""
    judge = FakeJudge()
    scorer = cp_observe.create_context_precision_scorer(judge, {"context": CONTEXTS})
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "capital of France?"}]
    scorer.run(input=messages, output={"role": "assistant", "content": "Paris is the capital."})
    scorer.run(input={"inputMessages": messages}, output=[{"role": "assistant", "content": "Paris, France."}])
    assert [call.query for call in judge.calls] == ["capital of France?", "capital of France?"]
    assert [call.reference for call in judge.calls] == ["Paris is the capital.", "Paris, France."]


def test_no_output_judges_against_the_query() -> None:
    """Without an answer the query is the reference, and the result says so."""
    judge = FakeJudge()
    result = cp_observe.create_context_precision_scorer(judge, {"context": CONTEXTS}).run(input="France borders")
    assert result.reference == "query"
    assert judge.calls[0].reference == "France borders"


def test_reason_is_built_from_the_verdicts() -> None:
    """The reason names the score and the relevant positions, and costs no extra judge call."""
    judge = FakeJudge()
    result = cp_observe.create_context_precision_scorer(judge, {"context": CONTEXTS}).run(
        input="capital?", output="Paris is the capital of France."
    )
    assert result.reason.startswith("The score is 0.83")
    assert "positions 1 and 3" in result.reason
    assert len(judge.calls) == 1


def test_run_inside_a_running_event_loop() -> None:
    """run() works from inside an event loop (it runs on a helper thread); arun() is the async form."""

    async def main() -> tuple[float, float]:
        scorer = cp_observe.create_context_precision_scorer(FakeJudge(), {"context": CONTEXTS})
        sync_result = scorer.run(input="capital?", output="Paris is the capital of France.")
        async_result = await scorer.arun(input="capital?", output="Paris is the capital of France.")
        return sync_result.score, async_result.score

    assert asyncio.run(main()) == (0.83, 0.83)


def test_lexical_model_string_is_the_offline_judge() -> None:
    """The model string "lexical" needs no network and no key."""
    result = cp_observe.create_context_precision_scorer("lexical", {"context": CONTEXTS}).run(
        input="What is the capital of France?", output="Paris is the capital of France."
    )
    assert result.judge_model == "lexical"
    assert result.verdicts[0].relevant is True
    assert result.verdicts[1].relevant is False


def test_misaligned_user_judge_raises() -> None:
    """A judge returning too few verdicts raises JudgeError; no score is made up."""

    class Short:
        model = "short"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            return [Verdict(0, True)]

    with pytest.raises(JudgeError, match="not one per context"):
        cp_observe.create_context_precision_scorer(Short(), {"context": CONTEXTS}).run(input="q", output="a")


def test_run_evals_scores_every_item_and_averages() -> None:
    """run_evals runs the target, scores each output, calls back per item, and reports the mean."""
    seen: list[str] = []

    def target(question: str) -> dict[str, Any]:
        if "bananas" in question:
            return {"answer": "Bananas are yellow.", "sources": ["Bananas are yellow.", "Paris."]}
        return {"answer": "Paris is the capital.", "sources": ["Bananas.", "Paris is the capital."]}

    scorer = cp_observe.create_context_precision_scorer(
        FakeJudge(), {"context_extractor": lambda i, o: o["sources"]}
    )
    result = cp_observe.run_evals(
        data=[{"input": "colour of bananas"}, {"input": "capital city"}],
        scorers=[scorer],
        target=target,
        on_item_complete=lambda item: seen.append(item.item["input"]),
    )
    assert sorted(seen) == ["capital city", "colour of bananas"]
    assert [r.scorer_results[scorer.id].score for r in result.items] == [1.0, 0.5]
    assert result.scores == {"context-precision-scorer": 0.75}
    assert result.scored == {"context-precision-scorer": 2}


def test_run_evals_records_failures_per_item() -> None:
    """A failing target or scorer is recorded on its item and left out of the mean."""

    async def target(question: str) -> str:
        if question == "boom":
            raise RuntimeError("target failed")
        return "Paris is the capital of France."

    scorer = cp_observe.create_context_precision_scorer(FakeJudge(), {"context": CONTEXTS})
    result = cp_observe.run_evals(data=["capital?", "boom"], scorers=[scorer], target=target, concurrency=2)
    assert result.scores == {"context-precision-scorer": 0.83}
    assert result.failed == {"context-precision-scorer": 1}
    assert "RuntimeError" in result.items[1].errors["target"]


def test_run_evals_needs_unique_scorer_ids() -> None:
    """Two scorers with one id would overwrite each other's results: refused."""
    a = cp_observe.create_context_precision_scorer(FakeJudge(), {"context": CONTEXTS})
    b = cp_observe.create_context_precision_scorer(FakeJudge(), {"context": CONTEXTS})
    with pytest.raises(ValueError, match="unique"):
        cp_observe.run_evals(data=["q"], scorers=[a, b], target=lambda q: "a")
    c = cp_observe.create_context_precision_scorer(FakeJudge(), {"context": CONTEXTS}, scorer_id="second")
    assert set(cp_observe.run_evals(data=["q"], scorers=[a, c], target=lambda q: "a").scores) == {
        "context-precision-scorer",
        "second",
    }
