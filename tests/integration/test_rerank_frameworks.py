"""Rerank lift from REAL OpenInference RERANKER spans: LlamaIndex's ``StructuredLLMRerank`` under its instrumentor.

``tests/frameworks/rerank_app.py`` runs in ``.venv-frameworks`` (real LlamaIndex 0.14 and
openinference-instrumentation-llama-index 4.6). Its retriever returns the documents of
``tests/processing/test_rerank_lift.py`` in the same order and the real reranker keeps documents 2, 1, 3, so the
hand computation is the same: retrieval AP 0.5; rerank AP 1.0, AP before 0.5, lift 0.5, one relevant document cut.
Each scorer (the app's in-process processor, and ``cp-observe serve`` fed by the app's OTLP/HTTP exporter) has its
own loopback judge server, and each must make exactly one judge call for the two evaluations.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import cp_observe
from cp_observe import _names as n
from cp_observe.testing import JudgeServer
from tests.integration.frameworks_support import NEEDS_FRAMEWORKS, PYTHON, ROOT

pytestmark = [
    NEEDS_FRAMEWORKS,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("serve_state_restored"),
]


def _check(evaluations: list[dict[str, Any]]) -> None:
    by_stage = {e[n.CP_STAGE]: e for e in evaluations}
    assert len(evaluations) == 2 and set(by_stage) == {n.STAGE_RETRIEVAL, n.STAGE_RERANK}, evaluations
    retrieval, reranked = by_stage[n.STAGE_RETRIEVAL], by_stage[n.STAGE_RERANK]
    assert list(retrieval[n.CP_VERDICTS]) == [False, True, False, True, False]
    assert retrieval[n.CP_AVERAGE_PRECISION] == pytest.approx(0.5)
    assert n.CP_RERANK_LIFT not in retrieval
    assert list(reranked[n.CP_VERDICTS]) == [True, False, False]
    assert reranked[n.CP_AVERAGE_PRECISION] == pytest.approx(1.0)
    assert reranked[n.CP_RERANK_AP_BEFORE] == pytest.approx(0.5)
    assert reranked[n.CP_RERANK_LIFT] == pytest.approx(0.5)
    assert reranked[n.CP_RERANK_DROPPED_RELEVANT] == 1
    # The reranker is named after the retrieval whose documents it reranked: one data source, two stages.
    assert reranked[n.GEN_AI_DATA_SOURCE_ID] == retrieval[n.GEN_AI_DATA_SOURCE_ID] == "FixedRetriever"
    assert reranked[n.CP_REFERENCE] == retrieval[n.CP_REFERENCE] == n.REFERENCE_OUTPUT


def test_llama_index_reranker_spans_in_process_and_through_serve(tmp_path: Path) -> None:
    """The real RERANKER span: two evaluations and one judge call, in the app's process and in serve alike."""
    from cp_observe.serve import ScorerService, ServeSettings

    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    settings = ServeSettings.resolve(
        {"listen_host": "127.0.0.1", "grpc_port": 0, "http_port": 0, "admin_port": 0, "turn_timeout_s": 30,
         "concurrency": 4, "data_dir": str(tmp_path)},  # its own durable store: nothing another run left
        environ={},
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with JudgeServer() as app_judge, JudgeServer() as serve_judge:
        judge = cp_observe.LLMJudge("openai/judge", api_base=serve_judge.url, api_key="sk-test", timeout=10)
        with ScorerService(settings, judge=judge, tracer_provider=provider) as service:
            app = subprocess.run(
                [str(PYTHON), "-m", "tests.frameworks.rerank_app", "--judge", app_judge.url,
                 "--otlp", f"http://127.0.0.1:{service.port('http')}"],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=540, check=False,
            )
            assert app.returncode == 0, app.stderr[-4000:]
            out = json.loads(app.stdout.strip().splitlines()[-1])
            assert service.flush(60)
            served_stats = service.stats()
        app_calls, serve_calls = app_judge.calls, serve_judge.calls

    rerankers = [s for s in out["spans"] if s["attributes"].get(n.OPENINFERENCE_SPAN_KIND) == n.KIND_RERANKER]
    assert [s["name"] for s in rerankers] == ["StructuredLLMRerank._postprocess_nodes"]
    assert out["answer"] == "Paris is the capital of France, in Europe."

    assert out["stats"] == {"sampled": 2, "scored": 2, "failed": 0, "dropped": 0, "skipped": 0}
    _check([e["attributes"] for e in out["evaluations"]])
    assert app_calls == 1

    served = [dict(s.attributes or {}) for s in exported.get_finished_spans()]
    _check(served)
    assert (served_stats["sampled"], served_stats["scored"]) == (2, 2), served_stats
    assert serve_calls == 1
