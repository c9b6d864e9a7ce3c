"""cp-observe's own retrieval spans in the GenAI retrieval convention: ``gen_ai.retrieval.top_k`` and
``gen_ai.retrieval.documents`` (checked against a JSON schema written from the convention's definition), and the
reranker's model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import cp_observe
from cp_observe import _names as n
from cp_observe._capture._conventions import reranker_model_of, top_k_of
from tests.conftest import Otel

SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "gen_ai_retrieval_documents.schema.json").read_text())


def _docs(count: int) -> list[dict[str, Any]]:
    return [{"id": f"doc-{i}", "content": f"Document {i} about Paris.", "score": 1.0 / (i + 1)} for i in range(count)]


def _span(otel: Otel, name: str) -> dict[str, Any]:
    [span] = otel.by_name(name)
    return dict(span.attributes or {})


def test_own_retrieval_documents_pass_the_convention_schema(otel: Otel) -> None:
    """Documents with ids and scores go out as the convention's JSON list, valid against its schema, in rank order."""
    @cp_observe.retriever(name="kb")
    def search(query: str, k: int = 3) -> list[dict[str, Any]]:
        return _docs(k)

    search("Paris?", k=4)
    span = _span(otel, "retrieval kb")
    documents = json.loads(span[n.GEN_AI_RETRIEVAL_DOCUMENTS])
    jsonschema.validate(documents, SCHEMA)
    assert documents == [{"id": f"doc-{i}", "score": pytest.approx(1.0 / (i + 1))} for i in range(4)]
    assert "Document" not in span[n.GEN_AI_RETRIEVAL_DOCUMENTS]  # the content is written once, in OpenInference's
    assert span[n.document_attribute(0, "content")] == "Document 0 about Paris."
    assert span[n.GEN_AI_RETRIEVAL_TOP_K] == 4


def test_the_schema_check_can_fail() -> None:
    """A list missing a score, or with a numeric id, fails the schema (so the check above means something)."""
    for bad in ([{"id": "a"}], [{"id": 1, "score": 0.5}], {"id": "a", "score": 1.0}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, SCHEMA)


@pytest.mark.parametrize(
    "result",
    [
        ["Paris is in France.", "Bananas are yellow."],  # plain strings: no id, no score
        [{"id": "a", "content": "Paris."}, {"id": "b", "content": "Bananas.", "score": 0.2}],  # a score missing
        [{"content": "Paris.", "score": 0.9}],  # an id missing
    ],
)
def test_documents_lacking_an_id_or_score_write_no_convention_list(otel: Otel, result: list[Any]) -> None:
    """The schema requires both fields: without them for every document, no list (never a partial one)."""
    @cp_observe.retriever(name="kb")
    def search(query: str) -> list[Any]:
        return result

    search("Paris?")
    span = _span(otel, "retrieval kb")
    assert n.GEN_AI_RETRIEVAL_DOCUMENTS not in span
    assert span[n.document_attribute(0, "content")].startswith("Paris")


def test_capture_off_writes_top_k_but_no_document_ids(otel: Otel) -> None:
    """With content capture off, the requested k (not content) is recorded; the opt-in document list is not."""
    otel.runtime.install(capture_content=False)

    @cp_observe.retriever(name="kb")
    def search(query: str, top_k: int = 2) -> list[dict[str, Any]]:
        return _docs(top_k)

    search("Paris?")
    span = _span(otel, "retrieval kb")
    assert span[n.GEN_AI_RETRIEVAL_TOP_K] == 2  # the default, read like the query's
    assert n.GEN_AI_RETRIEVAL_DOCUMENTS not in span
    assert not any(key.startswith(n.RETRIEVAL_DOCUMENTS) for key in span)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda f: f("q", 5), 5),  # positional
        (lambda f: f("q", limit=7), 7),  # by keyword
        (lambda f: f("q"), 10),  # the default
        (lambda f: f("q", limit=None), None),  # not a number: not recorded
        (lambda f: f("q", limit=True), None),  # a bool is not a count
        (lambda f: f("q", limit=-1), None),
    ],
)
def test_top_k_is_read_from_the_argument_named_for_it(otel: Otel, call: Any, expected: int | None) -> None:
    """``limit`` (like ``k`` and ``top_k``) is found at decoration time; only a whole number >= 0 is recorded."""
    @cp_observe.retriever(name="kb")
    def search(query: str, limit: int | None = 10) -> list[str]:
        return ["Paris."]

    call(search)
    assert _span(otel, "retrieval kb").get(n.GEN_AI_RETRIEVAL_TOP_K) == expected


def test_top_k_argument_is_resolved_once_and_the_first_name_wins(otel: Otel) -> None:
    """``k`` before ``top_k`` before ``limit``; a function with none of them records no top_k."""
    @cp_observe.retriever(name="both")
    def both(query: str, limit: int = 1, k: int = 2) -> list[str]:
        return ["Paris."]

    @cp_observe.retriever(name="none")
    def none(query: str, n_results: int = 3) -> list[str]:
        return ["Paris."]

    both("q")
    none("q")
    assert _span(otel, "retrieval both")[n.GEN_AI_RETRIEVAL_TOP_K] == 2
    assert n.GEN_AI_RETRIEVAL_TOP_K not in _span(otel, "retrieval none")


def test_reranker_records_its_model_and_top_k(otel: Otel) -> None:
    """``@reranker(model=...)`` writes ``reranker.model_name``; its ``top_k`` goes to ``reranker.top_k``."""
    @cp_observe.reranker(name="llm-rerank", model=" openai/gpt-4o-mini ")
    def rerank(query: str, documents: list[str], top_k: int = 2) -> list[str]:
        return list(reversed(documents))[:top_k]

    rerank("q", ["a", "b", "c"])
    span = _span(otel, "rerank llm-rerank")
    assert span[n.RERANKER_MODEL_NAME] == "openai/gpt-4o-mini"
    assert span[n.RERANKER_TOP_K] == 2
    assert n.GEN_AI_RETRIEVAL_DOCUMENTS not in span  # a reranker is not a GenAI retrieval


@pytest.mark.parametrize("model", ["", "  ", 3])
def test_reranker_model_must_be_a_string(model: Any) -> None:
    """A blank or non-string ``model=`` is refused when the decorator is applied."""
    with pytest.raises(ValueError, match="model"):
        cp_observe.reranker(model=model)


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_RETRIEVAL_TOP_K: 5}, 5),
        # the older name, on a retrieval span (by operation or by OpenInference kind)
        ({n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_REQUEST_TOP_K: 8}, 8),
        ({n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.GEN_AI_REQUEST_TOP_K: 8.0}, 8),
        # the current name wins over the older one
        ({n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_RETRIEVAL_TOP_K: 3, n.GEN_AI_REQUEST_TOP_K: 9}, 3),
        # on a chat span gen_ai.request.top_k is a decoding parameter, not a retrieval's k
        ({n.GEN_AI_OPERATION_NAME: n.OPERATION_CHAT, n.GEN_AI_REQUEST_TOP_K: 40}, None),
        ({n.OPENINFERENCE_SPAN_KIND: n.KIND_RERANKER, n.RERANKER_TOP_K: 2}, 2),
        ({n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_RETRIEVAL_TOP_K: "5"}, None),
        ({n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_RETRIEVAL_TOP_K: 2.5}, None),
        ({n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_RETRIEVAL_TOP_K: True}, None),
        ({n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_RETRIEVAL_TOP_K: -1}, None),
    ],
)
def test_top_k_of_reads_the_current_and_the_older_convention(attributes: dict[str, Any], expected: int | None) -> None:
    """``gen_ai.retrieval.top_k``, else ``gen_ai.request.top_k`` on retrieval spans only; malformed reads absent."""
    assert top_k_of(attributes) == expected


def test_reranker_model_of_reads_only_reranker_spans() -> None:
    """``reranker.model_name`` on a RERANKER span; the same key elsewhere, or blank, is no reranker model."""
    assert reranker_model_of({n.OPENINFERENCE_SPAN_KIND: n.KIND_RERANKER, n.RERANKER_MODEL_NAME: " m "}) == "m"
    assert reranker_model_of({n.OPENINFERENCE_SPAN_KIND: n.KIND_RERANKER, n.RERANKER_MODEL_NAME: " "}) is None
    assert reranker_model_of({n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.RERANKER_MODEL_NAME: "m"}) is None


def test_convention_list_stays_within_max_value_length(otel: Otel) -> None:
    """A list longer than ``max_value_length`` keeps the leading documents that fit: valid JSON, ranks kept."""
    otel.runtime.install(max_value_length=120)

    @cp_observe.retriever(name="kb")
    def search(query: str) -> list[dict[str, Any]]:
        return _docs(10)

    search("Paris?")
    text = _span(otel, "retrieval kb")[n.GEN_AI_RETRIEVAL_DOCUMENTS]
    documents = json.loads(text)
    jsonschema.validate(documents, SCHEMA)
    assert len(text) <= 120
    assert [d["id"] for d in documents] == [f"doc-{i}" for i in range(len(documents))]
    assert 1 <= len(documents) < 10


def test_convention_list_is_exactly_jsons_for_awkward_ids_and_scores(otel: Otel) -> None:
    """Quotes, newlines, non-ASCII and control characters in ids, tiny and whole scores: the text json.dumps writes."""
    rows = [{"id": 'a"b', "content": "one", "score": 1e-07}, {"id": "línea\nnueva\t\x01", "content": "two",
            "score": 3}, {"id": "東京", "content": "three", "score": 0.1 + 0.2}]

    @cp_observe.retriever(name="kb")
    def search(query: str) -> list[dict[str, Any]]:
        return rows

    search("q")
    text = _span(otel, "retrieval kb")[n.GEN_AI_RETRIEVAL_DOCUMENTS]
    expected = [{"id": r["id"], "score": float(r["score"])} for r in rows]
    assert text == json.dumps(expected, ensure_ascii=False)
    jsonschema.validate(json.loads(text), SCHEMA)
