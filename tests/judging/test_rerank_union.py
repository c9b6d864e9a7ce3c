"""The reranked retrieval's judgement: the union and its positions, both APs, and verdicts shared in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from fractions import Fraction

import pytest

import cp_observe
from cp_observe._judging._rerank import evaluate_rerank, rerank_union
from cp_observe._types import Judgement, Verdict
from cp_observe.testing import JudgeServer, delay, status


class TableJudge:
    """Relevant when the context is in ``relevant``; records each call's contexts."""

    model = "table"

    def __init__(self, relevant: set[str]) -> None:
        self.relevant = relevant
        self.calls: list[list[str]] = []

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Judgement:
        self.calls.append(list(contexts))
        return Judgement(tuple(Verdict(i, c in self.relevant) for i, c in enumerate(contexts)), self.model)


def test_union_is_the_input_order_then_what_the_output_adds() -> None:
    """Each distinct document once; both orders' positions point into it; cut = input documents not returned."""
    union = rerank_union(["a", "b", "c", "b"], ["c", "x", "a"], limit=10)
    assert union.contexts == ("a", "b", "c", "x")
    assert union.before == (0, 1, 2, 1)  # a repeated document is judged once and counts at each position
    assert union.after == (2, 3, 0)
    assert union.cut == frozenset({1})


def test_union_bounds_each_order_to_the_limit() -> None:
    """At most ``limit`` documents of each order; an output document beyond the input's limit is still judged."""
    before = [f"d{i}" for i in range(10)]
    union = rerank_union(before, ["d9", "d0"], limit=3)
    assert union.contexts == ("d0", "d1", "d2", "d9")
    assert union.before == (0, 1, 2) and union.after == (3, 0)


def test_both_aps_the_lift_and_the_cut_by_hand() -> None:
    """Input [n, Y, n, Y] (AP 1/2), output [Y, Y] (AP 1): lift 1/2, nothing relevant cut; then one cut."""
    judge = TableJudge({"p", "e"})
    result = asyncio.run(evaluate_rerank(judge, query="q", reference_text="r", reference="output",
                                         before=["b", "p", "a", "e"], after=["p", "e"], limit=50))
    assert judge.calls == [["b", "p", "a", "e"]]
    assert [v.relevant for v in result.verdicts] == [True, True] and [v.index for v in result.verdicts] == [0, 1]
    assert result.score == 1.0 and result.rerank is not None
    assert result.rerank.average_precision_before == float(Fraction(1, 2))
    assert result.rerank.lift == 0.5 and result.rerank.dropped_relevant == 0
    assert result.rerank.verdicts_before == (False, True, False, True)

    worse = asyncio.run(evaluate_rerank(judge, query="q", reference_text="r", reference="output",
                                        before=["p", "b", "e"], after=["b", "p"], limit=50))
    assert worse.rerank is not None
    assert worse.average_precision == 0.5 and worse.rerank.average_precision_before == pytest.approx(5 / 6)
    assert worse.rerank.lift == pytest.approx(0.5 - 5 / 6) and worse.rerank.dropped_relevant == 1


def test_concurrent_judgements_of_the_same_documents_make_one_call() -> None:
    """Two judgements at once over the same question and documents: one HTTP request; the second costs none."""
    with JudgeServer() as server:
        server.default = delay(0.3)
        judge = cp_observe.LLMJudge("openai/judge", api_base=server.url, api_key="sk-test", timeout=10)

        async def both() -> list[Judgement]:
            return list(await asyncio.gather(judge.judge("q", "Paris France", ["Paris", "Berlin"]),
                                             judge.judge("q", "Paris France", ["Berlin", "Paris", "Rome"])))

        first, second = asyncio.run(both())
        assert server.calls == 2  # the first call, and the second's one new document (Rome)
        assert [v.relevant for v in first.verdicts] == [True, False]
        assert [v.relevant for v in second.verdicts] == [False, True, False]
        assert second.cached == 2 and first.cached == 0
        assert judge._inflight == {}  # nothing left behind


def test_a_failed_call_leaves_its_waiters_to_ask_themselves() -> None:
    """The call a second judgement waits on fails: the second asks for those documents itself and succeeds."""
    with JudgeServer() as server:
        server.script(delay(0.3, status(400)))
        judge = cp_observe.LLMJudge("openai/judge", api_base=server.url, api_key="sk-test", timeout=10,
                                    max_retries=0)

        async def both() -> list[object]:
            return list(await asyncio.gather(judge.judge("q", "Paris", ["Paris", "Berlin"]),
                                             judge.judge("q", "Paris", ["Paris", "Berlin"]),
                                             return_exceptions=True))

        first, second = asyncio.run(both())
        assert isinstance(first, Exception)
        assert isinstance(second, Judgement) and [v.relevant for v in second.verdicts] == [True, False]
        assert second.cached == 0 and server.calls == 2
        assert judge._inflight == {}
