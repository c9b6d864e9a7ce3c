"""Spans from another language: a Node.js LangChain app, instrumented by OpenInference, sending to ``serve``.

``tests/node/app.mjs`` runs real LangChain JS (``@langchain/core``: a fake vector store with synthetic embeddings and
a fake chat model, no network) under ``@arizeai/openinference-instrumentation-langchain``, exporting with the
standard ``@opentelemetry/exporter-trace-otlp-grpc`` or ``-http`` exporter to a ``ScorerService`` on loopback. The
service applies the same readers as in process: a bare retriever judged against its query, the chain's retriever
against the chain's answer (its root span's ``output.value``). Versions: ``tests/node/package-lock.json``
(``scripts/install-node.sh``, run by ``scripts/test``). Without node, npm or those packages the module is skipped,
saying how to install them, unless ``CP_OBSERVE_REQUIRE_NODE=1`` (``.ci/run``) makes that a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import cp_observe
from cp_observe import _names as n
from cp_observe.testing import JudgeServer

APP = Path(__file__).resolve().parents[1] / "node"
NODE = shutil.which("node")
_MISSING = [what for what, absent in (
    ("node", NODE is None),
    ("npm", shutil.which("npm") is None),
    ("tests/node/node_modules", not (APP / "node_modules" / "@langchain" / "core").is_dir()),
) if absent]
_INSTALL = ("install Node.js 18 or later with npm (Debian/Ubuntu: sudo apt-get install nodejs npm; or "
            "https://nodejs.org), then run scripts/install-node.sh (scripts/test does, unless CP_OBSERVE_SKIP_NODE=1)")
if _MISSING and os.environ.get("CP_OBSERVE_REQUIRE_NODE") == "1":  # CI installed them: missing is a failure
    raise RuntimeError(f"CP_OBSERVE_REQUIRE_NODE=1 but missing: {', '.join(_MISSING)}; {_INSTALL}")
pytestmark = pytest.mark.skipif(bool(_MISSING), reason=f"missing {', '.join(_MISSING)}: {_INSTALL}")


@pytest.fixture
def served() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    from cp_observe.serve import ScorerService, ServeSettings

    evaluations = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(evaluations))
    settings = ServeSettings.resolve({"listen_host": "127.0.0.1", "grpc_port": 0, "http_port": 0, "admin_port": 0},
                                     environ={})
    with JudgeServer() as judge_server:
        judge = cp_observe.LLMJudge("openai/judge", api_base=judge_server.url, api_key="sk-test", timeout=10)
        with ScorerService(settings, judge=judge, tracer_provider=provider) as service:
            yield service, evaluations


def _accepts_chunked(url: str) -> bool:
    """Whether the service takes a chunked request body (what Node's OTLP/HTTP exporter sends)."""
    def body() -> Iterator[bytes]:
        yield b""  # an empty ExportTraceServiceRequest, sent as one empty chunk

    request = urllib.request.Request(url, data=body(), method="POST",
                                     headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as error:
        return error.code != 411


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_node_langchain_spans_are_scored_by_serve(protocol: str, served: tuple[Any, InMemorySpanExporter]) -> None:
    """Each retrieval of the Node app is scored once by serve, the chain's against the chain's answer."""
    service, evaluations = served
    if protocol == "grpc":
        url = f"http://127.0.0.1:{service.port('grpc')}"
    else:
        url = f"http://127.0.0.1:{service.port('http')}"
        if not _accepts_chunked(url + "/v1/traces"):
            pytest.skip("this serve refuses chunked request bodies (411), which Node's OTLP/HTTP exporter sends")
    done = subprocess.run([str(NODE), "app.mjs", protocol, url], cwd=APP, capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    # The app's provider.shutdown() returned once its exporter's last export was answered: every span is in.
    assert service.flush(60)
    stats = service.stats()
    assert (stats["sampled"], stats["scored"], stats["skipped"], stats["failed"]) == (2, 2, 0, 0), stats
    attributes = [dict(s.attributes or {}) for s in evaluations.get_finished_spans()]
    assert sorted((a[n.GEN_AI_DATA_SOURCE_ID], a[n.CP_REFERENCE]) for a in attributes) == [
        ("VectorStoreRetriever", n.REFERENCE_OUTPUT),
        ("VectorStoreRetriever", n.REFERENCE_QUERY),
    ]
