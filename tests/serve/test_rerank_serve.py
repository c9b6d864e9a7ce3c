"""Rerank lift through ``cp-observe serve``: ``@cp_observe.reranker`` spans sent by the real OTLP/HTTP exporter.

The app process here has no scorer: its decorated spans carry the documents as attributes
(``retrieval.documents.*``, ``reranker.input_documents.*``, ``reranker.output_documents.*``) and go over real
OTLP/HTTP to a ``ScorerService``, which judges through litellm at the loopback ``JudgeServer``. The hand
computation is the one of ``tests/processing/test_rerank_lift.py``: retrieval AP 0.5; rerank AP 1.0, AP before
0.5, lift 0.5, one relevant document dropped; one judge call for both evaluations.
"""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import cp_observe
from cp_observe import _names as n
from cp_observe.testing import JudgeServer
from tests.conftest import Otel
from tests.processing.test_rerank_lift import ANSWER, DOCS, QUESTION, RERANKED
from tests.serve_support import OtlpSink, start_service

pytestmark = pytest.mark.usefixtures("serve_state_restored")


def test_decorated_reranker_through_serve_is_judged_once(otel: Otel, sink: OtlpSink) -> None:
    """Retriever, reranker and agent spans over OTLP/HTTP: two evaluations (by stage), one judge request."""
    with JudgeServer() as server:
        judge = cp_observe.LLMJudge("openai/judge", api_base=server.url, api_key="sk-test", timeout=10)
        with start_service(sink, judge, concurrency=4) as service:
            exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{service.port('http')}/v1/traces")
            otel.tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))

            @cp_observe.retriever(name="products")
            def search(query: str) -> list[str]:
                return list(DOCS)

            @cp_observe.reranker(name="cross-encoder")
            def rerank(query: str, documents: list[str]) -> list[str]:
                return RERANKED

            @cp_observe.agent(name="shop")
            def answer(question: str) -> str:
                rerank(question, search(question))
                return ANSWER

            assert answer(QUESTION) == ANSWER
            assert service.flush(30)
            assert sink.wait_for(lambda s: len(s.evaluations) >= 2 and len(s.logs) >= 2)
            stats = service.stats()
        calls = server.calls

    by_stage = {e.attributes[n.CP_STAGE]: e.attributes for e in sink.evaluations}
    assert set(by_stage) == {n.STAGE_RETRIEVAL, n.STAGE_RERANK}
    retrieval, reranked = by_stage[n.STAGE_RETRIEVAL], by_stage[n.STAGE_RERANK]
    assert retrieval[n.CP_VERDICTS] == (False, True, False, True, False)
    assert retrieval[n.CP_AVERAGE_PRECISION] == pytest.approx(0.5)
    assert reranked[n.CP_VERDICTS] == (True, False, False)
    assert reranked[n.CP_AVERAGE_PRECISION] == pytest.approx(1.0)
    assert reranked[n.CP_RERANK_AP_BEFORE] == pytest.approx(0.5)
    assert reranked[n.CP_RERANK_LIFT] == pytest.approx(0.5)
    assert reranked[n.CP_RERANK_DROPPED_RELEVANT] == 1
    assert reranked[n.GEN_AI_DATA_SOURCE_ID] == retrieval[n.GEN_AI_DATA_SOURCE_ID] == "products"
    assert calls == 1
    assert (stats["sampled"], stats["scored"]) == (2, 2), stats
    assert {log[n.CP_STAGE] for log in sink.logs} == {n.STAGE_RETRIEVAL, n.STAGE_RERANK}
    instance = next(iter(sink.evaluations)).resource["service.instance.id"]
    assert sink.totals(n.METRIC_EVALUATIONS, by=n.STAGE) == {(instance, n.STAGE_RETRIEVAL): 1,
                                                              (instance, n.STAGE_RERANK): 1}
