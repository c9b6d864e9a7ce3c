"""The convention readers and the one-retrieval-one-evaluation rule, with spans written through the OTel API.

These spans follow the conventions as written (GenAI, OpenInference RERANKER) or reproduce shapes the real
instrumentors emit that tests/integration/test_frameworks.py cannot provoke on demand (OpenLLMetry's retriever
span beside a decorated function's). The instrumentors themselves are tested for real in
tests/integration/test_frameworks.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.trace import Event

import cp_observe
from cp_observe import _names as n
from cp_observe._capture._conventions import (
    ROLE_ANSWER,
    ROLE_RETRIEVER,
    answer_of,
    convention_name,
    query_of,
    retrieved_of,
    role,
)
from cp_observe._errors import ConfigurationError
from cp_observe.testing import FakeJudge, JudgeCall
from tests.conftest import Otel

DOCS = ["Paris is the capital of France.", "Bananas are yellow."]


@dataclass(frozen=True)
class _Events:
    """What role() reads of a span besides its attributes."""

    events: tuple[Event, ...]


def _oi_docs(prefix: str, texts: list[str]) -> dict[str, Any]:
    return {f"{prefix}.{i}.document.content": t for i, t in enumerate(texts)}


# --- readers --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({n.OPENINFERENCE_SPAN_KIND: "RETRIEVER"}, ROLE_RETRIEVER),
        ({n.OPENINFERENCE_SPAN_KIND: "RERANKER"}, ROLE_RETRIEVER),
        ({n.OPENINFERENCE_SPAN_KIND: "LLM"}, ROLE_ANSWER),
        ({n.OPENINFERENCE_SPAN_KIND: "AGENT"}, ROLE_ANSWER),
        ({n.OPENINFERENCE_SPAN_KIND: "CHAIN"}, None),
        ({n.OPENINFERENCE_SPAN_KIND: "CHAIN", n.GEN_AI_OPERATION_NAME: "retrieval"}, None),
        ({n.GEN_AI_OPERATION_NAME: "retrieval"}, ROLE_RETRIEVER),
        ({n.GEN_AI_OPERATION_NAME: "vector_db_retrieve"}, ROLE_RETRIEVER),
        ({n.GEN_AI_OPERATION_NAME: "chat"}, ROLE_ANSWER),
        ({n.GEN_AI_OPERATION_NAME: "execute_task"}, None),
        ({"http.method": "GET"}, None),
        ({}, None),
    ],
)
def test_role(attributes: dict[str, Any], expected: str | None) -> None:
    """Each convention's span kind or operation maps to a role; everything else is ignored."""
    assert role(attributes, _Events(())) == expected


def test_vector_db_span_is_a_retrieval_only_with_events() -> None:
    """A span with db.system is a retrieval candidate only when it has events (db.query.result)."""
    assert role({n.DB_SYSTEM: "chroma"}, _Events(())) is None
    event = Event(n.DB_QUERY_RESULT_EVENT, {n.DB_QUERY_RESULT_DOCUMENT: "d", n.DB_QUERY_RESULT_ID: "a"})
    assert role({n.DB_SYSTEM: "chroma"}, _Events((event,))) == ROLE_RETRIEVER
    found = retrieved_of({n.DB_SYSTEM: "chroma"}, (event,))
    assert found is not None and found.texts == ["d"] and found.ids == ["a"]
    assert retrieved_of({n.DB_SYSTEM: "postgresql"}, (Event("exception", {}),)) is None


def test_genai_documents_with_content_and_without() -> None:
    """gen_ai.retrieval.documents is read when it carries content; ids and scores alone are nothing to judge."""
    with_content = json.dumps([{"id": "a", "score": 0.9, "content": DOCS[0]}, {"id": "b", "content": DOCS[1]}])
    found = retrieved_of({n.GEN_AI_RETRIEVAL_DOCUMENTS: with_content})
    assert found is not None
    assert (found.texts, found.ids, found.scores) == (DOCS, ["a", "b"], [0.9, None])
    assert retrieved_of({n.GEN_AI_RETRIEVAL_DOCUMENTS: json.dumps([{"id": "a", "score": 0.9}])}) is None


def test_openllmetry_entity_output_and_input() -> None:
    """OpenLLMetry's entity input and output JSON give the query and the documents."""
    attributes = {
        n.TRACELOOP_ENTITY_INPUT: json.dumps({"query": "capital?", "tags": []}),
        n.TRACELOOP_ENTITY_OUTPUT: json.dumps({"documents": [{"page_content": d, "metadata": {}} for d in DOCS]}),
    }
    found = retrieved_of(attributes)
    assert found is not None and found.texts == DOCS
    assert query_of(attributes) == "capital?"


@pytest.mark.parametrize("bad", ["{", "[1, 2", "null", '"text"', "{}", "x" * 10, json.dumps({"documents": "no"})])
def test_malformed_json_reads_as_absent(bad: str) -> None:
    """Malformed or shapeless JSON values read as carrying nothing, never raise."""
    assert retrieved_of({n.TRACELOOP_ENTITY_OUTPUT: bad, n.GEN_AI_RETRIEVAL_DOCUMENTS: bad}) is None
    if bad != '"text"':  # a JSON string is an answer
        assert answer_of({n.GEN_AI_OUTPUT_MESSAGES: bad, n.OUTPUT_VALUE: bad, n.OUTPUT_MIME_TYPE: n.MIME_JSON}) is None


def test_reranker_is_a_retrieval_only_when_it_reorders() -> None:
    """A RERANKER's output is judged when its order differs from its input; an unchanged order adds nothing."""
    base = {n.OPENINFERENCE_SPAN_KIND: n.KIND_RERANKER, n.RERANKER_QUERY: "q"}
    reordered = {
        **base, **_oi_docs(n.RERANKER_INPUT_DOCUMENTS, DOCS), **_oi_docs(n.RERANKER_OUTPUT_DOCUMENTS, DOCS[::-1])
    }
    same = {**base, **_oi_docs(n.RERANKER_INPUT_DOCUMENTS, DOCS), **_oi_docs(n.RERANKER_OUTPUT_DOCUMENTS, DOCS)}
    found = retrieved_of(reordered)
    assert found is not None and found.texts == DOCS[::-1]
    assert retrieved_of(same) is None
    assert query_of(reordered) == "q"


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({n.OUTPUT_VALUE: "plain answer"}, "plain answer"),
        ({n.OUTPUT_VALUE: json.dumps({"answer": "from json", "context": []}), n.OUTPUT_MIME_TYPE: n.MIME_JSON},
         "from json"),
        ({n.OUTPUT_VALUE: json.dumps({"retriever": {"documents": []}}), n.OUTPUT_MIME_TYPE: n.MIME_JSON}, None),
        ({"llm.output_messages.0.message.content": "first", "llm.output_messages.1.message.content": "last"}, "last"),
        ({n.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "g"}]}])},
         "g"),
        ({n.TRACELOOP_ENTITY_OUTPUT: json.dumps({"outputs": "entity answer"})}, "entity answer"),
        ({}, None),
    ],
)
def test_answer_readers(attributes: dict[str, Any], expected: str | None) -> None:
    """Each convention's answer is read; a JSON result that names no answer gives none."""
    assert answer_of(attributes) == expected


@pytest.mark.parametrize(
    ("span_name", "attributes", "expected"),
    [
        ("VectorIndexRetriever.retrieve", {}, "VectorIndexRetriever"),
        ("VectorIndexRetriever._retrieve", {}, "VectorIndexRetriever"),
        ("VectorStoreRetriever", {}, "VectorStoreRetriever"),
        ("retrieval products", {}, "products"),
        ("chroma.query", {}, "chroma"),
        ("vector_db_retrieve VectorStoreRetriever", {n.TRACELOOP_ENTITY_NAME: "VectorStoreRetriever"},
         "VectorStoreRetriever"),
        ("", {}, None),
    ],
)
def test_convention_name(span_name: str, attributes: dict[str, Any], expected: str | None) -> None:
    """The retriever's name: the entity name, else the span name without operation prefix or method suffix."""
    assert convention_name(span_name, attributes) == expected


# --- through the processor ------------------------------------------------------------------------------------
def _evaluations(otel: Otel) -> list[dict[str, Any]]:
    return [dict(s.attributes or {}) for s in otel.by_name(n.EVALUATION_SPAN_NAME)]


def test_genai_retrieval_span_is_scored_with_its_data_source(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """A GenAI-convention retrieval span (no OpenInference kind) is scored, named by gen_ai.data_source.id."""
    processor = otel.processor(cp_observe_judge)
    tracer = otel.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("retrieval kb", attributes={
        n.GEN_AI_OPERATION_NAME: "retrieval", n.GEN_AI_DATA_SOURCE_ID: "kb",
        n.GEN_AI_RETRIEVAL_QUERY_TEXT: "capital of France",
        n.GEN_AI_RETRIEVAL_DOCUMENTS: json.dumps([{"id": "1", "content": DOCS[0]}]),
    }):
        pass
    assert processor.force_flush(10_000)
    [evaluation] = _evaluations(otel)
    assert evaluation[n.GEN_AI_DATA_SOURCE_ID] == "kb"
    assert cp_observe_judge.calls == [JudgeCall("capital of France", "capital of France", (DOCS[0],))]


def test_answer_of_an_enclosing_llm_span(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """A retrieval inside a GenAI chat span is judged against that span's output message."""
    processor = otel.processor(cp_observe_judge)
    tracer = otel.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("chat", attributes={n.GEN_AI_OPERATION_NAME: "chat"}) as chat:
        with tracer.start_as_current_span("Retriever", attributes={
            n.OPENINFERENCE_SPAN_KIND: "RETRIEVER", n.INPUT_VALUE: "q", **_oi_docs(n.RETRIEVAL_DOCUMENTS, DOCS)}):
            pass
        chat.set_attribute(n.GEN_AI_OUTPUT_MESSAGES, json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "Paris, capital of France"}]}]))
    assert processor.force_flush(10_000)
    assert [c.reference for c in cp_observe_judge.calls] == ["Paris, capital of France"]
    assert _evaluations(otel)[0][n.CP_REFERENCE] == n.REFERENCE_OUTPUT


def test_sibling_spans_with_the_same_documents_are_one_retrieval(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """OpenLLMetry's retriever span beside a decorated function's span: judged once, named by the decorator."""
    processor = otel.processor(cp_observe_judge)
    tracer = otel.tracer_provider.get_tracer("app")

    @cp_observe.retriever(name="capitals")
    def search(query: str) -> list[str]:
        return list(DOCS)

    with tracer.start_as_current_span("request"):
        result = search("capital of France")
        # The instrumentor's span is a sibling of the decorated span, overlapping it in time.
        with tracer.start_as_current_span("vector_db_retrieve VectorStoreRetriever", attributes={
            n.GEN_AI_OPERATION_NAME: "vector_db_retrieve",
            n.TRACELOOP_ENTITY_INPUT: json.dumps({"query": "capital of France"}),
            n.TRACELOOP_ENTITY_OUTPUT: json.dumps({"documents": [{"page_content": d} for d in result]}),
        }, start_time=otel.by_name("retrieval capitals")[0].start_time):
            pass
    assert processor.force_flush(10_000)
    stats = processor.stats()
    assert (stats["sampled"], stats["scored"], stats["skipped"]) == (1, 1, 0)
    [evaluation] = _evaluations(otel)
    assert evaluation[n.GEN_AI_DATA_SOURCE_ID] == "capitals"
    assert len(cp_observe_judge.calls) == 1


def test_same_documents_apart_in_time_are_two_retrievals(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Two retrievals returning the same documents one after the other are two retrievals, judged twice."""
    processor = otel.processor(cp_observe_judge)
    tracer = otel.tracer_provider.get_tracer("app")

    @cp_observe.retriever(name="capitals")
    def search(query: str) -> list[str]:
        return list(DOCS)

    with tracer.start_as_current_span("request"):
        search("capital of France")
        search("capital of France")
    assert processor.force_flush(10_000)
    assert processor.stats()["scored"] == 2


def test_retriever_span_without_documents_is_not_counted(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """A foreign RETRIEVER span carrying no documents is not a sampled target (nothing skipped, nothing judged)."""
    processor = otel.processor(cp_observe_judge)
    tracer = otel.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("Retriever._retrieve", attributes={n.OPENINFERENCE_SPAN_KIND: "RETRIEVER"}):
        pass
    assert processor.force_flush(10_000)
    stats = processor.stats()
    assert (stats["sampled"], stats["skipped"], stats["scored"]) == (0, 0, 0)


@pytest.mark.parametrize("spec", [["kb.name"], "kb.name", lambda attributes: attributes.get("kb.name")])
def test_data_source_override(otel: Otel, cp_observe_judge: FakeJudge, spec: Any) -> None:
    """A user's data_source (attribute names, a list or a comma-separated string, or a callable) names it first."""
    processor = otel.processor(cp_observe_judge, data_source=spec)
    tracer = otel.tracer_provider.get_tracer("app")
    for name in ("products", None):
        attributes = {n.OPENINFERENCE_SPAN_KIND: "RETRIEVER", n.INPUT_VALUE: "q", n.GEN_AI_DATA_SOURCE_ID: "kb",
                      **_oi_docs(n.RETRIEVAL_DOCUMENTS, DOCS)}
        if name:
            attributes["kb.name"] = name
        with tracer.start_as_current_span("Retriever.retrieve", attributes=attributes):
            pass
    assert processor.force_flush(10_000)
    assert sorted(e[n.GEN_AI_DATA_SOURCE_ID] for e in _evaluations(otel)) == ["kb", "products"]


def test_data_source_override_that_raises_keeps_the_conventional_name(
    otel: Otel, cp_observe_judge: FakeJudge
) -> None:
    """A data_source callable that raises falls back to the conventional name; the span is still scored."""

    def broken(attributes: Any) -> str:
        raise RuntimeError("bug in the user's mapping")

    processor = otel.processor(cp_observe_judge, data_source=broken)
    tracer = otel.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("VectorIndexRetriever.retrieve", attributes={
            n.OPENINFERENCE_SPAN_KIND: "RETRIEVER", n.INPUT_VALUE: "q", **_oi_docs(n.RETRIEVAL_DOCUMENTS, DOCS)}):
        pass
    assert processor.force_flush(10_000)
    assert [e[n.GEN_AI_DATA_SOURCE_ID] for e in _evaluations(otel)] == ["VectorIndexRetriever"]


@pytest.mark.parametrize("bad", [[1, 2], {"a": "b"}])
def test_bad_data_source_raises(otel: Otel, cp_observe_judge: FakeJudge, bad: Any) -> None:
    """A data_source that is neither a callable nor attribute names raises at construction."""
    with pytest.raises(ValueError, match="data_source"):
        otel.processor(cp_observe_judge, data_source=bad)


def test_configure_data_source_setting() -> None:
    """configure() and serve read data_source as comma-separated attribute names, from the argument or variable."""
    from cp_observe._config._settings import Settings
    from cp_observe.serve import ServeSettings

    assert Settings.resolve({"data_source": "a, b"}).data_source_attributes() == ("a", "b")
    assert Settings.resolve({}, environ={"CP_OBSERVE_DATA_SOURCE": "kb.name"}).data_source_attributes() == ("kb.name",)
    assert Settings.resolve({}, environ={}).data_source_attributes() is None
    assert ServeSettings.resolve({"data_source": "x"}, environ={}).data_source_attributes() == ("x",)
    with pytest.raises(ConfigurationError):
        cp_observe.configure("lexical", data_source=[1, 2], capture_only=True)


def test_foreign_content_passes_the_redact_hook_before_the_judge(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Query, contexts and answer read off another instrumentation's spans are redacted before the judge."""
    otel.runtime.install(redact=lambda text: text.replace("4111-1111", "[card]"))
    processor = otel.processor(cp_observe_judge)
    tracer = otel.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("chat", attributes={n.GEN_AI_OPERATION_NAME: "chat"}) as chat:
        with tracer.start_as_current_span("retrieval kb", attributes={
            n.GEN_AI_OPERATION_NAME: "retrieval", n.GEN_AI_DATA_SOURCE_ID: "kb",
            n.GEN_AI_RETRIEVAL_QUERY_TEXT: "card 4111-1111 capital?",
            n.GEN_AI_RETRIEVAL_DOCUMENTS: json.dumps([{"id": "1", "content": "Paris 4111-1111"}]),
        }):
            pass
        chat.set_attribute(n.GEN_AI_OUTPUT_MESSAGES, json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "Paris (4111-1111)"}]}]))
    assert processor.force_flush(10_000)
    assert cp_observe_judge.calls == [JudgeCall("card [card] capital?", "Paris ([card])", ("Paris [card]",))]
