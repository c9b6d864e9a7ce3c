"""``cp-observe replay --document-resolver module:function``: stored GenAI retrieval spans whose documents carry
ids and scores only are judged on the text the resolver gives, and counted as documents without text without it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cp_observe import _names as n
from cp_observe.cli import main
from tests.replay_support import collector_json_line

RESOLVER = "tests.frameworks.genai_app:resolve"  # the same corpus the util-genai integration test uses


def _stored(path: Path) -> None:
    """One trace: a GenAI retrieval of three documents named by id, as opentelemetry-util-genai writes it."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    documents = json.dumps([{"id": i, "score": 1 - k / 10} for k, i in enumerate(
        ("doc-paris", "doc-banana", "doc-europe"))])
    with provider.get_tracer("genai").start_as_current_span("retrieval wiki", attributes={
            n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_DATA_SOURCE_ID: "wiki",
            n.GEN_AI_RETRIEVAL_QUERY_TEXT: "What is the capital of France?", n.GEN_AI_RETRIEVAL_TOP_K: 3,
            n.GEN_AI_RETRIEVAL_DOCUMENTS: documents}):
        pass
    path.write_text(collector_json_line(encode_spans(spans.get_finished_spans())) + "\n", encoding="utf-8")


def _evaluations(path: Path) -> list[dict[str, object]]:
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    if span["name"] == n.EVALUATION_SPAN_NAME:
                        found.append({a["key"]: next(iter(a["value"].values())) for a in span["attributes"]})
    return found


@pytest.mark.parametrize("resolver", [True, False], ids=["resolver", "none"])
def test_replay_resolves_documents_named_by_id(tmp_path: Path, resolver: bool,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """With the resolver the retrieval is scored (k beside returned); without it, none is (skipped, counted)."""
    stored, out = tmp_path / "traces.jsonl", tmp_path / "out.jsonl"
    _stored(stored)
    args = ["replay", str(stored), "-o", str(out), "--judge", "lexical", "--sample-rate", "1", "-q"]
    assert main([*args, *(["--document-resolver", RESOLVER] if resolver else [])]) == 0
    evaluations = _evaluations(out)
    printed = capsys.readouterr()
    if resolver:
        [evaluation] = evaluations
        assert evaluation[n.CP_RETRIEVAL_TOP_K] in (3, "3") and evaluation[n.CP_RETRIEVAL_RETURNED] in (3, "3")
    else:
        assert evaluations == []
        assert n.SKIP_NO_DOCUMENT_TEXT in printed.out + printed.err


def test_replay_refuses_a_resolver_it_cannot_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unimportable module:function is a configuration error (exit 2), named before anything is read."""
    stored = tmp_path / "traces.jsonl"
    _stored(stored)
    code = main(["replay", str(stored), "-o", str(tmp_path / "o.jsonl"), "--judge", "lexical",
                 "--document-resolver", "cp_no_such_module_x:resolve", "-q"])
    assert code == 2
    assert "cannot import" in capsys.readouterr().err
