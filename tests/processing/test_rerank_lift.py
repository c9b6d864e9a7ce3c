"""Rerank lift from one judgement, in process: ``@cp_observe.reranker`` judged over the union of its documents.

The judge is ``LLMJudge`` through litellm over real HTTP to the loopback ``JudgeServer`` (word-overlap verdicts),
so every judge call is a request the server counts. The hand computation, against ``ANSWER``'s words (paris,
capital, france, europe):

    input  (retrieval order) [banana, PARIS, apples, EUROPE, mountains] -> [no, yes, no, yes, no]
           AP = (1/2 + 2/4) / 2 = 0.5
    output (reranked, top 3) [PARIS, banana, apples]                    -> [yes, no, no]
           AP = 1/1 / 1 = 1.0
    lift = 1.0 - 0.5 = 0.5; dropped relevant = 1 (the Europe document was cut)
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import cp_observe
from cp_observe import _names as n
from cp_observe.testing import JudgeServer
from tests.conftest import Otel

DOCS = [
    "Bananas are yellow.",
    "Paris is the capital of France.",
    "Apples grow on trees.",
    "France is in Europe.",
    "Mountains are tall.",
]
RERANKED = [DOCS[1], DOCS[0], DOCS[2]]
ANSWER = "Paris is the capital of France, in Europe."
QUESTION = "Where is Paris?"


def _judge(server: JudgeServer) -> cp_observe.LLMJudge:
    return cp_observe.LLMJudge("openai/judge", api_base=server.url, api_key="sk-test", timeout=10)


def _evaluations(otel: Otel) -> dict[str, dict[str, Any]]:
    return {
        s.attributes[n.CP_STAGE]: dict(s.attributes)
        for s in otel.by_name(n.EVALUATION_SPAN_NAME)
        if s.attributes is not None
    }


def _check_rerank(e: dict[str, Any], data_source: str) -> None:
    assert e[n.CP_STAGE] == n.STAGE_RERANK
    assert e[n.CP_VERDICTS] == (True, False, False)
    assert e[n.CP_AVERAGE_PRECISION] == pytest.approx(1.0)
    assert e[n.GEN_AI_EVALUATION_SCORE_VALUE] == 1.0
    assert e[n.CP_RERANK_AP_BEFORE] == pytest.approx(0.5)
    assert e[n.CP_RERANK_LIFT] == pytest.approx(0.5)
    assert e[n.CP_RERANK_DROPPED_RELEVANT] == 1
    assert e[n.GEN_AI_DATA_SOURCE_ID] == data_source
    assert e[n.CP_REFERENCE] == n.REFERENCE_OUTPUT
    assert n.STAGE not in e  # the metric label is context_precision.stage on the span


def test_sync_reranker_after_a_retriever_costs_one_judge_call(otel: Otel, server: JudgeServer) -> None:
    """Retriever then reranker in one turn: both scored (retrieval, rerank), one request at the judge server."""
    processor = otel.processor(_judge(server), concurrency=4)

    @cp_observe.retriever(name="products")
    def search(query: str) -> list[str]:
        return list(DOCS)

    @cp_observe.reranker(name="cross-encoder")
    def rerank(query: str, documents: list[str]) -> list[str]:
        documents.sort(key=lambda d: RERANKED.index(d) if d in RERANKED else len(RERANKED))
        return documents[:3]  # sorted in place: the input is read when the call starts

    @cp_observe.agent(name="shop")
    def answer(question: str) -> str:
        rerank(question, search(question))
        return ANSWER

    assert answer(QUESTION) == ANSWER
    assert processor.force_flush(30_000)
    evaluations = _evaluations(otel)
    assert set(evaluations) == {n.STAGE_RETRIEVAL, n.STAGE_RERANK}
    retrieval = evaluations[n.STAGE_RETRIEVAL]
    assert retrieval[n.CP_VERDICTS] == (False, True, False, True, False)
    assert retrieval[n.CP_AVERAGE_PRECISION] == pytest.approx(0.5)
    assert n.CP_RERANK_LIFT not in retrieval
    _check_rerank(evaluations[n.STAGE_RERANK], "products")  # named after the retrieval it reranked
    assert server.calls == 1, [r.body for r in server.requests]
    assert retrieval[n.CP_JUDGE_CALLS] + evaluations[n.STAGE_RERANK][n.CP_JUDGE_CALLS] == 1
    stats = processor.stats()
    assert (stats["sampled"], stats["scored"]) == (2, 2), stats

    span = otel.by_name("rerank cross-encoder")[0].attributes
    assert span[n.OPENINFERENCE_SPAN_KIND] == n.KIND_RERANKER
    assert span[n.RERANKER_QUERY] == QUESTION
    assert [span[n.document_attribute(i, "content", n.RERANKER_INPUT_DOCUMENTS)] for i in range(5)] == DOCS
    assert [span[n.document_attribute(i, "content", n.RERANKER_OUTPUT_DOCUMENTS)] for i in range(3)] == RERANKED
    assert n.GEN_AI_DATA_SOURCE_ID not in span

    lift = otel.metric_points(n.METRIC_RERANK_LIFT)
    assert [(p.attributes[n.STAGE], p.count, p.sum) for p in lift] == [(n.STAGE_RERANK, 1, pytest.approx(0.5))]
    scores = {p.attributes[n.STAGE]: p for p in otel.metric_points(n.METRIC_SCORE)}
    assert scores[n.STAGE_RETRIEVAL].sum == pytest.approx(0.5)
    assert scores[n.STAGE_RERANK].sum == pytest.approx(1.0)
    assert {p.attributes[n.STAGE] for p in otel.metric_points(n.METRIC_VERDICTS)} == {
        n.STAGE_RETRIEVAL, n.STAGE_RERANK}
    scored = [p for p in otel.metric_points(n.METRIC_EVALUATIONS) if p.attributes[n.OUTCOME] == n.OUTCOME_SCORED]
    assert sorted(p.attributes[n.STAGE] for p in scored) == [n.STAGE_RERANK, n.STAGE_RETRIEVAL]
    [record] = [r for r in otel.logs.get_finished_logs()
                if r.log_record.attributes.get(n.CP_STAGE) == n.STAGE_RERANK]
    assert record.log_record.attributes[n.CP_RERANK_LIFT] == pytest.approx(0.5)
    assert record.log_record.attributes[n.CP_RERANK_DROPPED_RELEVANT] == 1


def test_async_reranker_alone_is_judged_once_over_the_union(otel: Otel, server: JudgeServer) -> None:
    """An async reranker over an undecorated search: one request carrying every input document; both APs."""
    processor = otel.processor(_judge(server))

    @cp_observe.reranker(name="cross-encoder")
    async def rerank(query: str, nodes: list[str], top_n: int = 3) -> list[str]:
        await asyncio.sleep(0)
        return RERANKED[:top_n]

    @cp_observe.agent(name="shop")
    async def answer(question: str) -> str:
        await rerank(question, list(DOCS))
        return ANSWER

    assert asyncio.run(answer(QUESTION)) == ANSWER
    assert processor.force_flush(30_000)
    evaluations = _evaluations(otel)
    assert set(evaluations) == {n.STAGE_RERANK}
    _check_rerank(evaluations[n.STAGE_RERANK], "cross-encoder")  # no retrieval seen: its own name
    assert server.calls == 1
    prompt = str(server.requests[-1].body)
    assert all(doc in prompt for doc in DOCS)  # the union: what was cut is judged too, in the one call


def test_a_reranker_that_only_truncates_is_not_a_target(otel: Otel, server: JudgeServer) -> None:
    """Output = the input's head in the same order: it ranks nothing, so only the retrieval is scored."""
    processor = otel.processor(_judge(server))

    @cp_observe.retriever(name="products")
    def search(query: str) -> list[str]:
        return list(DOCS)

    @cp_observe.reranker
    def top(query: str, documents: list[str]) -> list[str]:
        return documents[:2]

    top(QUESTION, search(QUESTION))
    assert processor.force_flush(30_000)
    assert set(_evaluations(otel)) == {n.STAGE_RETRIEVAL}
    assert processor.stats()["sampled"] == 1


def test_capture_off_still_judges_both_orders(otel: Otel, server: JudgeServer) -> None:
    """Content capture off: no document on the span, the judge still gets both orders from memory."""
    processor = cp_observe.configure(
        judge=_judge(server), capture_content=False, tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider, logger_provider=otel.logger_provider,
    )
    otel.shut_down_after(processor)  # shut down with the fixture's

    @cp_observe.reranker(name="ce", documents="candidates")
    def rerank(candidates: list[str], query: str) -> list[str]:
        return RERANKED

    @cp_observe.agent(name="shop")
    def answer(question: str) -> str:
        rerank(list(DOCS), question)
        return ANSWER

    answer(QUESTION)
    assert processor.force_flush(30_000)
    _check_rerank(_evaluations(otel)[n.STAGE_RERANK], "ce")
    span = otel.by_name("rerank ce")[0].attributes
    assert not any(key.startswith(("reranker.input_documents", "reranker.output_documents")) for key in span)
    assert n.RERANKER_QUERY not in span


def test_the_documents_argument_is_resolved_at_decoration() -> None:
    """``documents=`` must name an argument; without one and without a second argument, decorating fails."""
    with pytest.raises(ValueError, match="documents='missing'"):
        cp_observe.reranker(documents="missing")(lambda query, docs: docs)
    with pytest.raises(ValueError, match="no argument for the input documents"):
        cp_observe.reranker(lambda query: query)
