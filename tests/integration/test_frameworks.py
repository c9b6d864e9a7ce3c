"""Zero-code scoring against the real frameworks and instrumentors, in process and through ``cp-observe serve``.

The apps (``tests/frameworks/apps.py``) run in ``.venv-frameworks`` (``scripts/install-frameworks.sh``, pinned
by ``scripts/frameworks.lock``) as subprocesses: real LangChain, LlamaIndex, Haystack and Chroma, instrumented by
real OpenInference and OpenLLMetry instrumentors, judged through litellm over HTTP by the loopback
``JudgeServer``. Without that venv the module is skipped, saying how to install it.

For each app: every retrieval is scored exactly once, against the enclosing answer where there is one, under a
meaningful data source, and the counts match the number of retrievals, both with the processor on the app's
provider and with the app exporting over OTLP/HTTP to a ``ScorerService``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
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
    # The first test sets up the module's run: every family's app, each allowed 600 s, then a 60 s flush.
    pytest.mark.timeout(900),
]

ANSWER = "The capital of France is Paris."
QUESTION = "What is the capital of France?"
LLAMA_ANSWER = "text text text text text text text text"  # what LlamaIndex's MockLLM answers


@dataclass(frozen=True)
class Expected:
    """One app's expected evaluation."""

    data_source: str
    reference: str  # "output" or "query"
    reference_text: str  # must reach the judge
    agent_name: str | None = None


EXPECTED = {
    "oi-lc-bare": Expected("VectorStoreRetriever", n.REFERENCE_QUERY, QUESTION),
    "oi-lc-chain": Expected("VectorStoreRetriever", n.REFERENCE_OUTPUT, ANSWER),
    "oi-lc-decorated": Expected("capitals", n.REFERENCE_QUERY, QUESTION),
    "ll-lc-bare": Expected("VectorStoreRetriever", n.REFERENCE_QUERY, QUESTION),
    "ll-lc-chain": Expected("VectorStoreRetriever", n.REFERENCE_OUTPUT, ANSWER, "RunnableSequence"),
    "ll-lc-decorated": Expected("capitals", n.REFERENCE_QUERY, QUESTION),
    "oi-li-retrieve": Expected("VectorIndexRetriever", n.REFERENCE_QUERY, QUESTION),
    "oi-li-query": Expected("VectorIndexRetriever", n.REFERENCE_OUTPUT, LLAMA_ANSWER),
    "oi-hs-pipeline": Expected("InMemoryBM25Retriever", n.REFERENCE_QUERY, QUESTION),
    "ll-chroma-agent": Expected("chroma", n.REFERENCE_OUTPUT, ANSWER, "geo"),
}


FAMILIES = ("oi-langchain", "ll-langchain", "oi-llama-index", "oi-haystack", "ll-chroma")


@dataclass
class Run:
    """Every family's app output, the service's evaluations and counts, and what the judge was sent."""

    apps: dict[str, Any]
    served: list[dict[str, Any]]
    served_stats: dict[str, Any]
    prompts: str


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    """Run every family's app at once (subprocesses in .venv-frameworks) against one judge and one service."""
    from cp_observe.serve import ScorerService, ServeSettings

    evaluations = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(evaluations))
    settings = ServeSettings.resolve(
        {"listen_host": "127.0.0.1", "grpc_port": 0, "http_port": 0, "admin_port": 0, "turn_timeout_s": 30},
        environ={},
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRACELOOP_TRACE_CONTENT": "true",
           "ANONYMIZED_TELEMETRY": "False", "HAYSTACK_TELEMETRY_ENABLED": "False"}
    with JudgeServer() as judge_server:
        judge = cp_observe.LLMJudge("openai/judge", api_base=judge_server.url, api_key="sk-test", timeout=10)
        with ScorerService(settings, judge=judge, tracer_provider=provider) as service:
            otlp = f"http://127.0.0.1:{service.port('http')}"
            running = {
                family: subprocess.Popen(
                    [str(PYTHON), "-m", "tests.frameworks.apps", family, "--judge", judge_server.url, "--otlp", otlp],
                    cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                )
                for family in FAMILIES
            }
            apps: dict[str, Any] = {}
            for family, process in running.items():
                stdout, stderr = process.communicate(timeout=600)
                assert process.returncode == 0, f"{family}: {stderr[-4000:]}"
                apps.update(json.loads(stdout.strip().splitlines()[-1]))
            # Each app returned once its exporter's last POST was answered: every span is in the service.
            assert service.flush(60)
            stats = service.stats()
        served = [
            {"trace_id": format(s.context.trace_id, "032x"), "attributes": dict(s.attributes or {})}
            for s in evaluations.get_finished_spans()
            if s.context is not None
        ]
        yield Run(apps, served, stats, json.dumps([r.body for r in judge_server.requests]))


def check(expected: Expected, stats: dict[str, Any], evaluations: list[dict[str, Any]]) -> None:
    assert stats["sampled"] == 1, stats
    assert stats["scored"] == 1, stats
    assert stats["skipped"] == stats["failed"] == stats["dropped"] == 0, stats
    assert len(evaluations) == 1, evaluations
    attributes = evaluations[0]["attributes"]
    assert attributes[n.GEN_AI_DATA_SOURCE_ID] == expected.data_source
    assert attributes[n.CP_REFERENCE] == expected.reference
    assert attributes.get(n.GEN_AI_AGENT_NAME) == expected.agent_name


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_in_process(scenario: str, run: Run) -> None:
    """With the processor on the app's provider, each app's retrieval is scored once, as expected."""
    out = run.apps[scenario]
    check(EXPECTED[scenario], out["stats"], out["evaluations"])


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_through_serve(scenario: str, run: Run) -> None:
    """The same spans, exported over OTLP/HTTP to ``cp-observe serve``, get the same single evaluation."""
    traces = set(run.apps[scenario]["traces"])
    mine = [e for e in run.served if e["trace_id"] in traces]
    check(EXPECTED[scenario], {"sampled": 1, "scored": 1, "skipped": 0, "failed": 0, "dropped": 0}, mine)


def test_serve_counts_retrievals_not_spans(run: Run) -> None:
    """The service counted one sampled target per retrieval of all the apps, all scored."""
    assert run.served_stats["sampled"] == len(EXPECTED), run.served_stats
    assert run.served_stats["scored"] == len(EXPECTED), run.served_stats
    assert len(run.served) == len(EXPECTED)


def test_judge_saw_the_answers_and_the_documents(run: Run) -> None:
    """The answers the retrievals were judged against, and the retrieved documents, reached the judge."""
    for text in (ANSWER, LLAMA_ANSWER, QUESTION, "France is in Europe."):
        assert text in run.prompts
