"""``load_dataset`` → ``run_evals``: a candidate retriever re-scored on production's queries, against their answers."""

from __future__ import annotations

from pathlib import Path

import pytest

import cp_observe
from cp_observe.dataset._record import DatasetError
from cp_observe.replay import load_run
from cp_observe.testing import FakeJudge
from tests.dataset_support import Case, write_traces

ANSWER = "Northwind's Team plan costs eight dollars monthly."
RELEVANT = "The Team plan costs eight dollars per user monthly."
NOISE = ("Parental leave lasts twenty weeks.", "Webhook signatures use HMAC.")


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """Three failing production retrievals (the relevant context ranked last), as ``cp-observe dataset`` writes."""
    traces, out = tmp_path / "traces.jsonl", tmp_path / "failing.jsonl"
    write_traces(traces, [Case(f"What does the Team plan cost? ({i})", (*NOISE, RELEVANT), (False, False, True), ANSWER,
                               version="v2") for i in range(3)])
    from cp_observe.cli import main

    assert main(["dataset", str(traces), "--max-score", "0.5", "-o", str(out)]) == 0
    return out


def test_a_retriever_target_is_judged_against_the_stored_answer(dataset: Path, cp_observe_judge: FakeJudge) -> None:
    """contexts_from_output: the target gets the query, its output is the ranked contexts, the reference is the
    item's stored answer; a better ranking scores higher than production did."""
    items = cp_observe.load_dataset(dataset)
    assert len(items) == 3 and all(item["score"] == 0.33 for item in items)
    scorer = cp_observe.create_context_precision_scorer(cp_observe_judge, {"contexts_from_output": True})
    seen: list[str] = []

    def candidate(query: str) -> list[str]:
        seen.append(query)
        return [RELEVANT, *NOISE]  # the new retriever ranks the relevant context first

    result = cp_observe.run_evals(data=items, scorers=[scorer], target=candidate)
    assert sorted(seen) == sorted(item["input"] for item in items)
    assert result.scores[scorer.id] == 1.0 and result.failed[scorer.id] == 0
    for call in cp_observe_judge.calls:
        assert call.reference == ANSWER and call.contexts == (RELEVANT, *NOISE) and call.query in seen
    assert all(r.scorer_results[scorer.id].reference == "output" for r in result.items)


def test_the_stored_contexts_replayed_reproduce_the_stored_score(dataset: Path) -> None:
    """A target returning production's own contexts, judged by the same judge, gives production's scores back."""
    items = cp_observe.load_dataset(dataset)
    by_query = {item["input"]: item["contexts"] for item in items}
    scorer = cp_observe.create_context_precision_scorer(FakeJudge(), {"contexts_from_output": True})
    result = cp_observe.run_evals(data=items, scorers=[scorer], target=by_query.__getitem__)
    assert [r.scorer_results[scorer.id].score for r in result.items] == [item["score"] for item in items]


def test_results_written_back_pair_with_production(dataset: Path, tmp_path: Path) -> None:
    """write_eval_results keeps trace and span ids, data source and segments, so the report pairs the runs."""
    items = cp_observe.load_dataset(dataset)
    scorer = cp_observe.create_context_precision_scorer(FakeJudge(), {"contexts_from_output": True})
    result = cp_observe.run_evals(data=items, scorers=[scorer], target=lambda q: [RELEVANT, *NOISE])
    out = tmp_path / "candidate.jsonl"
    assert cp_observe.write_eval_results(out, result, scorer) == 3
    written = cp_observe.load_dataset(out)
    for old, new in zip(items, written, strict=True):
        assert (new["trace_id"], new["span_id"], new["data_source"], new["segments"]) == (
            old["trace_id"], old["span_id"], old["data_source"], old["segments"])
        assert new["contexts"] == [RELEVANT, *NOISE] and new["answer"] == ANSWER and new["score"] == 1.0
    run = load_run([out])
    assert run.evaluations == 3 and set(run.keys.keys) == {f"{i['trace_id']}:{i['span_id']}" for i in items}


def test_an_agent_target_is_judged_against_its_own_answer(dataset: Path, cp_observe_judge: FakeJudge) -> None:
    """Without contexts_from_output the target's output is the answer (the stored one is not used)."""
    items = cp_observe.load_dataset(dataset)
    scorer = cp_observe.create_context_precision_scorer(
        cp_observe_judge, {"context_extractor": lambda _input, output: output["contexts"]})
    reply = {"answer": "Parental leave is twenty weeks.", "contexts": list(NOISE)}
    result = cp_observe.run_evals(data=items, scorers=[scorer], target=lambda q: reply)
    assert result.failed[scorer.id] == 0
    assert {call.reference for call in cp_observe_judge.calls} == {"Parental leave is twenty weeks."}


def test_contexts_from_output_excludes_fixed_contexts() -> None:
    """A retriever scorer takes its contexts from the output: giving context or an extractor too is refused."""
    with pytest.raises(ValueError, match="contexts_from_output"):
        cp_observe.create_context_precision_scorer("lexical", {"contexts_from_output": True, "context": ["a"]})
    scorer = cp_observe.create_context_precision_scorer("lexical", {"contextsFromOutput": True})
    assert scorer.options.contexts_from_output


def test_load_dataset_names_the_bad_line(tmp_path: Path) -> None:
    """A file that is not a dataset, or a line missing a field, is a DatasetError naming file and line."""
    path = tmp_path / "bad.jsonl"
    path.write_text('{"resourceSpans": []}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad.jsonl:1: not a cp-observe dataset line"):
        cp_observe.load_dataset(path)
    path.write_text('{"format": "cp-observe-dataset/1", "score": 0.5}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad.jsonl:1: 'query' must be a string"):
        cp_observe.load_dataset(path)
    with pytest.raises(DatasetError, match="cannot read"):
        cp_observe.load_dataset(tmp_path / "missing.jsonl")
