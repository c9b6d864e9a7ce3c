"""``@cp_observe.reranker`` on the request path: every function kind, the argument rules, the host left untouched.

The judge is the recording ``FakeJudge``; the numbers are those of ``tests/processing/test_rerank_lift.py``
(input AP 0.5, output AP 1.0, lift 0.5, one relevant document cut), and what reached the judge is checked: the
union of both orders in one call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import cp_observe
from cp_observe import _names as n
from cp_observe.testing import FakeJudge
from tests.conftest import Otel
from tests.processing.test_rerank_lift import ANSWER, DOCS, QUESTION, RERANKED


def _rerank_evaluation(otel: Otel) -> dict[str, Any]:
    [evaluation] = [dict(s.attributes or {}) for s in otel.by_name(n.EVALUATION_SPAN_NAME)]
    assert evaluation[n.CP_STAGE] == n.STAGE_RERANK
    return evaluation


def _check_lift(otel: Otel, judge: FakeJudge) -> None:
    e = _rerank_evaluation(otel)
    assert e[n.CP_VERDICTS] == (True, False, False)
    assert e[n.CP_RERANK_AP_BEFORE] == pytest.approx(0.5)
    assert e[n.CP_RERANK_LIFT] == pytest.approx(0.5)
    assert e[n.CP_RERANK_DROPPED_RELEVANT] == 1
    assert [list(call.contexts) for call in judge.calls] == [DOCS]  # the union (the input order), once


def test_generator_reranker(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """A generator yielding the reranked documents: they are the output, the protocol passes through."""
    processor = otel.processor(cp_observe_judge)

    @cp_observe.reranker
    def rerank(query: str, documents: list[str]) -> Iterator[str]:
        yield from RERANKED

    @cp_observe.agent
    def answer(question: str) -> str:
        assert list(rerank(question, list(DOCS))) == RERANKED
        return ANSWER

    answer(QUESTION)
    assert processor.force_flush(10_000)
    _check_lift(otel, cp_observe_judge)
    assert otel.by_name(f"{n.RERANK_SPAN_PREFIX} ")[0].name.endswith("rerank")


def test_async_generator_method_reranker(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """An async generator method: ``self`` is skipped, ``nodes`` is the conventional argument name."""
    processor = otel.processor(cp_observe_judge)

    class Reranker:
        @cp_observe.reranker(name="ce")
        async def rerank(self, top_n: int, query: str, nodes: list[str]) -> AsyncIterator[str]:
            for doc in RERANKED[:top_n]:
                await asyncio.sleep(0)
                yield doc

    @cp_observe.agent
    async def answer(question: str) -> str:
        assert [d async for d in Reranker().rerank(3, query=question, nodes=list(DOCS))] == RERANKED
        return ANSWER

    asyncio.run(answer(QUESTION))
    assert processor.force_flush(10_000)
    # query= was not given: the first argument other than self is top_n, so the query reads "3" here
    [call] = cp_observe_judge.calls
    query, contexts = call.query, list(call.contexts)
    assert (query, contexts) == ("3", DOCS)
    _check_lift(otel, cp_observe_judge)


def test_unsampled_calls_record_content_but_are_not_judged(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Sample rate 0: the span still carries both lists (capture on); nothing is kept for or sent to the judge."""
    processor = otel.processor(cp_observe_judge, sample_rate=0.0)

    @cp_observe.reranker
    def rerank(query: str, documents: list[str]) -> list[str]:
        return RERANKED

    assert rerank(QUESTION, list(DOCS)) == RERANKED
    assert processor.force_flush(10_000)
    span = otel.by_name("rerank ")[0].attributes
    assert span[n.CP_SAMPLED] is False
    assert span[n.document_attribute(4, "content", n.RERANKER_INPUT_DOCUMENTS)] == DOCS[4]
    assert cp_observe_judge.calls == [] and otel.by_name(n.EVALUATION_SPAN_NAME) == []


def test_a_failing_documents_callable_is_a_user_error_and_the_call_runs(
    otel: Otel, cp_observe_judge: FakeJudge, production_errors: None
) -> None:
    """``documents=`` raising: the call returns as undecorated, the span says documents_error, no judgement."""
    processor = otel.processor(cp_observe_judge)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the user's bug")

    @cp_observe.reranker(documents=broken)
    def rerank(query: str, documents: list[str]) -> list[str]:
        return RERANKED

    assert rerank(QUESTION, list(DOCS)) == RERANKED
    assert processor.force_flush(10_000)
    assert otel.by_name("rerank ")[0].attributes[n.CP_USER_ERROR] == "documents_error"
    assert cp_observe_judge.calls == []
    assert processor.stats()["skipped"] == 1


def test_the_host_sees_the_same_values_and_exceptions(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Decorated and undecorated agree: an iterator of documents is not read, an exception passes through."""
    otel.processor(cp_observe_judge)

    def plain(query: str, documents: Any) -> list[str]:
        return sorted(documents)

    decorated = cp_observe.reranker(plain)
    assert decorated(QUESTION, iter(DOCS)) == plain(QUESTION, iter(DOCS))  # the iterator reaches the host whole

    class Boom(Exception):
        pass

    @cp_observe.reranker
    def failing(query: str, documents: list[str]) -> list[str]:
        raise Boom

    with pytest.raises(Boom):
        failing(QUESTION, DOCS)
    span = otel.by_name("rerank ")[-1]
    assert span.attributes[n.ERROR_TYPE].endswith("Boom")
