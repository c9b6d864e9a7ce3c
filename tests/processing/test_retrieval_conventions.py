"""The evaluation of a retrieval carries the k it asked for beside the documents it returned, and the evaluation
of a reranker says whether its model is the judge's kind. Judged by ``LLMJudge`` over real HTTP at the loopback
``JudgeServer`` (word-overlap verdicts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.trace import SpanKind

import cp_observe
from cp_observe import _names as n
from cp_observe.replay import load_run, summary_text, write_report
from cp_observe.testing import JudgeServer
from tests.conftest import Otel
from tests.replay_support import collector_json_line

DOCS = ["Paris is the capital of France.", "Bananas are yellow.", "France is in Europe."]
ANSWER = "Paris is the capital of France, in Europe."


def _evaluations(otel: Otel) -> list[dict[str, Any]]:
    return [dict(s.attributes or {}) for s in otel.by_name(n.EVALUATION_SPAN_NAME)]


def test_decorated_retrieval_evaluation_carries_k_and_returned(otel: Otel, server: JudgeServer) -> None:
    """k=5 asked, 3 returned: both on the evaluation, beside the verdicts."""
    processor = otel.processor(cp_observe.LLMJudge("openai/judge", api_base=server.url, api_key="sk-test"))

    @cp_observe.retriever(name="kb")
    def search(query: str, k: int = 5) -> list[str]:
        return DOCS[:k]

    @cp_observe.agent(name="bot")
    def answer(question: str) -> str:
        search(question)
        return ANSWER

    answer("Where is Paris?")
    assert processor.force_flush(30_000)
    [evaluation] = _evaluations(otel)
    assert evaluation[n.CP_RETRIEVAL_TOP_K] == 5
    assert evaluation[n.CP_RETRIEVAL_RETURNED] == 3
    assert evaluation[n.CP_VERDICTS] == (True, False, True)


@pytest.mark.parametrize("key", [n.GEN_AI_RETRIEVAL_TOP_K, n.GEN_AI_REQUEST_TOP_K])
def test_foreign_genai_retrieval_top_k_is_read_in_either_name(otel: Otel, server: JudgeServer, key: str) -> None:
    """A GenAI retrieval span from another instrumentation: its k (current or older name) reaches the evaluation."""
    processor = otel.processor(cp_observe.LLMJudge("openai/judge", api_base=server.url, api_key="sk-test"))
    tracer = otel.tracer_provider.get_tracer("other-instrumentation")
    documents = '[{"id": "a", "score": 0.9, "content": "Paris is the capital of France."}, ' \
                '{"id": "b", "score": 0.5, "content": "Bananas are yellow."}]'
    with tracer.start_as_current_span("retrieval wiki", kind=SpanKind.CLIENT, attributes={
        n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_DATA_SOURCE_ID: "wiki",
        n.GEN_AI_RETRIEVAL_QUERY_TEXT: "Where is Paris?", key: 10, n.GEN_AI_RETRIEVAL_DOCUMENTS: documents,
    }):
        pass
    assert processor.force_flush(30_000)
    [evaluation] = _evaluations(otel)
    assert (evaluation[n.CP_RETRIEVAL_TOP_K], evaluation[n.CP_RETRIEVAL_RETURNED]) == (10, 2)
    assert evaluation[n.GEN_AI_DATA_SOURCE_ID] == "wiki"


def _rerank_turn(otel: Otel, server: JudgeServer, model: str | None) -> dict[str, Any]:
    processor = otel.processor(cp_observe.LLMJudge("openai/judge-test", api_base=server.url, api_key="sk-test"))

    @cp_observe.retriever(name="kb")
    def search(query: str) -> list[str]:
        return list(DOCS)

    @cp_observe.reranker(name="rr", model=model)
    def rerank(query: str, documents: list[str]) -> list[str]:
        return [documents[2], documents[0]]

    @cp_observe.agent(name="bot")
    def answer(question: str) -> str:
        rerank(question, search(question))
        return ANSWER

    answer("Where is Paris?")
    assert processor.force_flush(30_000)
    [evaluation] = [e for e in _evaluations(otel) if e[n.CP_STAGE] == n.STAGE_RERANK]
    return evaluation


@pytest.mark.parametrize(
    ("model", "flag"),
    [("openai/gpt-4o-mini", True), ("azure/gpt-4o", True), ("anthropic/claude-haiku-4-5", False),
     ("BAAI/bge-reranker-v2-m3", False), (None, None)],
)
def test_rerank_evaluation_says_when_the_judge_is_the_rerankers_kind(
    otel: Otel, server: JudgeServer, model: str | None, flag: bool | None
) -> None:
    """An OpenAI judge over an OpenAI-family reranker is flagged; another family is not; no model, nothing said."""
    evaluation = _rerank_turn(otel, server, model)
    assert evaluation.get(n.CP_RERANK_JUDGE_IS_RERANKER) is flag
    assert evaluation[n.CP_RERANK_LIFT] is not None


def test_report_flags_a_self_judged_reranker(otel: Otel, server: JudgeServer, tmp_path: Path) -> None:
    """``cp-observe report`` over the exported spans warns on the rerank line, and says to use another family."""
    _rerank_turn(otel, server, "openai/gpt-4o-mini")
    path = tmp_path / "traces.jsonl"
    path.write_text(collector_json_line(encode_spans(otel.finished())) + "\n", encoding="utf-8")
    run = load_run([path])
    assert dict(run.self_judged) == {"kb (rerank)": 1}
    text = summary_text(run)
    assert "warning: kb (rerank): 1 rerank evaluations judged by the reranker's own model family" in text
    assert "use a judge from another family" in text
    write_report(tmp_path / "report.html", run)
    assert "judge_is_reranker" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_report_is_quiet_for_a_reranker_of_another_family(otel: Otel, server: JudgeServer, tmp_path: Path) -> None:
    """A reranker of another family (the flag false) gets no warning."""
    _rerank_turn(otel, server, "BAAI/bge-reranker-v2-m3")
    path = tmp_path / "traces.jsonl"
    path.write_text(collector_json_line(encode_spans(otel.finished())) + "\n", encoding="utf-8")
    run = load_run([path])
    assert not run.self_judged and "warning" not in summary_text(run)
