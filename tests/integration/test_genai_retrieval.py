"""A retrieval from ``opentelemetry-util-genai``'s own handler (the newest GenAI conventions: documents as ids and
scores, no text), in process and through ``cp-observe serve``.

The app (``tests/frameworks/genai_app.py``) runs in ``.venv-frameworks`` (which pins the newest
``opentelemetry-util-genai``), judged through litellm over HTTP by the loopback ``JudgeServer``. Without a
document resolver the retrieval is counted as ``skipped/no_document_text``; with one (a callable in process, the
``module:function`` for ``serve``) it is scored, and its evaluation carries the requested k beside the documents
returned. Without that venv the module is skipped, saying how to install it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
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
]
RESOLVER = "tests.frameworks.genai_app:resolve"


def _run(resolver: bool) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """The app once, exporting to a service configured alike (resolver or none): its output, the service's side."""
    from cp_observe.serve import ScorerService, ServeSettings

    evaluations = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(evaluations))
    settings = ServeSettings.resolve(
        {"listen_host": "127.0.0.1", "grpc_port": 0, "http_port": 0, "admin_port": 0, "turn_timeout_s": 2,
         "durable": False, **({"document_resolver": RESOLVER} if resolver else {})},
        environ={},
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with JudgeServer() as judge_server:
        judge = cp_observe.LLMJudge("openai/judge", api_base=judge_server.url, api_key="sk-test", timeout=10)
        with ScorerService(settings, judge=judge, tracer_provider=provider) as service:
            otlp = f"http://127.0.0.1:{service.port('http')}"
            done = subprocess.run(
                [str(PYTHON), "-m", "tests.frameworks.genai_app", "--judge", judge_server.url, "--otlp", otlp,
                 *(["--resolver"] if resolver else [])],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
            )
            assert done.returncode == 0, done.stderr[-4000:]
            assert service.flush(60)
            stats = service.stats()
        served = [dict(s.attributes or {}) for s in evaluations.get_finished_spans()]
    return json.loads(done.stdout.strip().splitlines()[-1]), served, stats


@pytest.fixture(scope="module")
def without_resolver() -> Iterator[tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]]:
    """The app and a service, neither with a document resolver."""
    yield _run(resolver=False)


@pytest.fixture(scope="module")
def with_resolver() -> Iterator[tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]]:
    """The app with the resolver callable, and a service with ``--document-resolver module:function``."""
    yield _run(resolver=True)


def test_the_handler_writes_the_current_convention(without_resolver: Any) -> None:
    """The span really is the newest convention's: top_k, and documents with ids and scores only."""
    app, _, _ = without_resolver
    span = app["retrieval"]
    assert span[n.GEN_AI_OPERATION_NAME] == n.OPERATION_RETRIEVAL
    assert span[n.GEN_AI_RETRIEVAL_TOP_K] == 5
    documents = json.loads(span[n.GEN_AI_RETRIEVAL_DOCUMENTS])
    assert [d["id"] for d in documents] == ["doc-paris", "doc-banana", "doc-europe"]
    assert all(set(d) == {"id", "score"} for d in documents)


def test_without_a_resolver_it_is_counted_as_documents_without_text(without_resolver: Any) -> None:
    """In process and through serve: one sampled retrieval, skipped under no_document_text; nothing judged."""
    app, served, stats = without_resolver
    for counts in (app["stats"], stats):
        assert counts["sampled"] == counts["skipped"] == 1, counts
        assert counts["reasons"] == {f"{n.OUTCOME_SKIPPED}:{n.SKIP_NO_DOCUMENT_TEXT}": 1}, counts
    assert app["evaluations"] == [] and served == []


def test_with_a_resolver_it_is_scored_with_its_top_k(with_resolver: Any) -> None:
    """In process (a callable) and through serve (module:function): scored on the resolved text, k beside returned."""
    app, served, stats = with_resolver
    assert app["stats"]["scored"] == stats["scored"] == 1, (app["stats"], stats)
    for evaluation in (*app["evaluations"], *served):
        assert list(evaluation[n.CP_VERDICTS]) == [True, False, True]  # capital/France; bananas; France
        assert evaluation[n.CP_RETRIEVAL_TOP_K] == 5
        assert evaluation[n.CP_RETRIEVAL_RETURNED] == 3
        assert evaluation[n.GEN_AI_DATA_SOURCE_ID] == "wiki"
        assert evaluation[n.CP_REFERENCE] == n.REFERENCE_QUERY
    assert len(app["evaluations"]) == len(served) == 1
