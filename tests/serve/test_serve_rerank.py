"""Rerank lift through ``cp-observe serve``: ``@cp_observe.reranker`` spans sent by the real OTLP/HTTP exporter.

The app (``tests/serve/rerank_app.py``) runs in a process of its own with no scorer: its decorated spans carry the
documents as attributes (``retrieval.documents.*``, ``reranker.input_documents.*``, ``reranker.output_documents.*``)
and go over real OTLP/HTTP to a ``ScorerService``, which judges through litellm at the loopback ``JudgeServer``. The
hand computation is the one of ``tests/processing/test_rerank_lift.py``: retrieval AP 0.5; rerank AP 1.0, AP before
0.5, lift 0.5, one relevant document dropped; one judge call for both evaluations.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import cp_observe
from cp_observe import _names as n
from cp_observe.testing import JudgeServer
from tests.serve_support import OtlpSink, start_service, subprocess_env

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("serve_state_restored")


def _serve(sink: OtlpSink, scenario: str, evaluations: int, data_dir: Path,
           **settings: object) -> tuple[dict[str, object], int]:
    """Run the app's ``scenario`` against a fresh service; the service's stats and the judge's request count.

    The service's durable store is the test's own: a shared one could hold targets another run left, which a
    starting service resumes (and judges: more requests at the judge server than this test made).
    """
    with JudgeServer() as server:
        judge = cp_observe.LLMJudge("openai/judge", api_base=server.url, api_key="sk-test", timeout=10)
        with start_service(sink, judge, concurrency=4, data_dir=str(data_dir), **settings) as service:
            app = subprocess.run(
                [sys.executable, "-m", "tests.serve.rerank_app", scenario,
                 "--otlp", f"http://127.0.0.1:{service.port('http')}"],
                cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120, check=False,
            )
            assert app.returncode == 0, app.stderr[-4000:]
            assert service.flush(30)
            assert sink.wait_for(lambda s: len(s.evaluations) >= evaluations and len(s.logs) >= evaluations)
            stats = service.stats()
        return stats, server.calls


def test_decorated_reranker_through_serve_is_judged_once(sink: OtlpSink, tmp_path: Path) -> None:
    """Retriever, reranker and agent spans over OTLP/HTTP: two evaluations (by stage), one judge request."""
    stats, calls = _serve(sink, "reorder", 2, tmp_path)

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


def test_a_reranker_that_reorders_nothing_is_folded_in_serve(sink: OtlpSink, tmp_path: Path) -> None:
    """Read from its attributes (no payload in serve), a truncating reranker is not a target: not counted at all."""
    stats, calls = _serve(sink, "truncate", 1, tmp_path)
    assert [e.attributes[n.CP_STAGE] for e in sink.evaluations] == [n.STAGE_RETRIEVAL]
    assert (stats["sampled"], stats["scored"], stats["skipped"]) == (1, 1, 0), stats
    assert calls == 1


def test_a_reranker_in_serve_takes_the_variant_of_the_retrieval_it_reranks(sink: OtlpSink, tmp_path: Path) -> None:
    """``retriever.version`` on the retrieval span only: both stages' evaluations carry ``v2``, not ``none``."""
    _serve(sink, "variant", 2, tmp_path, segments="retriever.version")
    by_stage = {e.attributes[n.CP_STAGE]: e.attributes for e in sink.evaluations}
    assert {stage: a[n.CP_SEGMENT_PREFIX + "retriever_version"] for stage, a in by_stage.items()} == {
        n.STAGE_RETRIEVAL: "v2", n.STAGE_RERANK: "v2"}
    assert {log[n.CP_STAGE]: log[n.CP_SEGMENT_PREFIX + "retriever_version"] for log in sink.logs} == {
        n.STAGE_RETRIEVAL: "v2", n.STAGE_RERANK: "v2"}
