"""Readers of the tracing conventions: which spans are retrievals or answers, and what they carry.

One table, used in process (``ContextPrecisionProcessor.on_end``) and by ``cp-observe serve`` alike:

================================  =======================================  ====================================
convention                        retrieval span                           what is read
================================  =======================================  ====================================
cp-observe decorators             ``openinference.span.kind=RETRIEVER``    payload in memory, else as OpenInference
                                  (``@reranker``: ``RERANKER``)
OpenInference RETRIEVER           ``openinference.span.kind=RETRIEVER``    ``input.value`` (JSON ``query``),
                                                                           ``retrieval.documents.{i}.document.*``
OpenInference RERANKER            ``openinference.span.kind=RERANKER``     ``reranker.query``,
                                  (a target only when it reorders)         ``reranker.output_documents.{i}.*``,
                                                                           ``reranker.input_documents.{i}.*``
OpenLLMetry                       ``gen_ai.operation.name``                ``traceloop.entity.input`` /
                                  ``= vector_db_retrieve``                 ``traceloop.entity.output`` (JSON)
OpenLLMetry vector DBs            ``db.system`` + ``db.query.result``      each event's ``db.query.result.*``
                                  events
GenAI conventions                 ``gen_ai.operation.name=retrieval``      ``gen_ai.retrieval.query.text``,
                                                                           ``gen_ai.retrieval.documents`` (JSON)
================================  =======================================  ====================================

The k a retrieval asked for (``top_k_of``) is ``gen_ai.retrieval.top_k``; on a retrieval span (by ``role``)
``gen_ai.request.top_k``, which GenAI instrumentations before the retrieval attribute existed wrote there (newer
conventions keep that name for decoding, so on any other span it means something else); on a RERANKER span
``reranker.top_k``. A reranker's model is OpenInference's ``reranker.model_name`` (``reranker_model_of``).

Answers (the reference a retrieval is judged against) come from the nearest span enclosing the retrieval
in time that carries one: an agent (``AGENT``, ``gen_ai.operation.name=invoke_agent``, ``@cp_observe.agent``),
an LLM call (``LLM``, ``gen_ai.operation.name=chat|text_completion|generate_content``) or the trace's local
root (a chain or workflow root). Which spans those are is ``role``'s; what answer one carries is the answer
rule's (``_capture/_answer.py``, ``answer_of``): the decorator's payload, else its conventions, all read alike.

A retrieval whose documents carry ids but no text (``document_ids_of``) is still a retrieval: it is counted, and
judged when a document resolver gives the text (``_processing/_resolver.py``), else skipped as such.

``role`` runs on the hot path (``on_end`` of every span): a few dictionary look-ups. Everything else runs on
the evaluator thread. Every reader is bounded and never raises: a malformed value reads as absent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from cp_observe import _names as n
from cp_observe._capture._answer import (
    answer_of,  # re-exported: a span's answer beside its other readers
    query_in,
)
from cp_observe._capture._extract import extract_contexts
from cp_observe._capture._serialize import MAX_JUDGED_CHARS
from cp_observe._capture._serialize import json_value as _json

__all__ = [
    "ROLE_ANSWER",
    "ROLE_RETRIEVER",
    "DataSource",
    "Retrieved",
    "answer_of",
    "convention_name",
    "data_source_reader",
    "document_ids_of",
    "is_decorated",
    "plain_attributes",
    "query_of",
    "reorders",
    "reranker_input_of",
    "reranker_model_of",
    "reranks_nothing",
    "retrieved_of",
    "role",
    "top_k_of",
]

#: A user's data-source mapping: a callable of a span's attributes, or attribute names tried in order.
DataSource = Callable[[Mapping[str, Any]], Any] | Sequence[str] | None

ROLE_RETRIEVER: Final = "retriever"
ROLE_ANSWER: Final = "answer"  # a span that may carry the answer retrievals inside it are judged against

_MAX_DOCUMENTS: Final = 1000
_MAX_MODEL_NAME: Final = 200

_ROLE_OF_KIND: Final[Mapping[object, str]] = {
    n.KIND_RETRIEVER: ROLE_RETRIEVER,
    n.KIND_RERANKER: ROLE_RETRIEVER,
    n.KIND_AGENT: ROLE_ANSWER,
    n.KIND_LLM: ROLE_ANSWER,
}
_ROLE_OF_OPERATION: Final[Mapping[object, str]] = {
    n.OPERATION_RETRIEVAL: ROLE_RETRIEVER,
    n.OPERATION_VECTOR_DB_RETRIEVE: ROLE_RETRIEVER,
    n.OPERATION_INVOKE_AGENT: ROLE_ANSWER,
    n.OPERATION_CHAT: ROLE_ANSWER,
    n.OPERATION_TEXT_COMPLETION: ROLE_ANSWER,
    n.OPERATION_GENERATE_CONTENT: ROLE_ANSWER,
}
_METHOD_OPERATIONS: Final = (
    n.OPERATION_RETRIEVAL + " ", n.OPERATION_VECTOR_DB_RETRIEVE + " ", n.RERANK_SPAN_PREFIX + " "
)


def plain_attributes(span: Any) -> Mapping[str, Any] | None:
    """An ended SDK span's attributes as the plain dict under them, for cheap look-ups; else its ``attributes``.

    The SDK's ``BoundedAttributes`` answers a missing key by raising and catching ``KeyError`` (about 0.3 µs per
    look-up), and most look-ups on the hot path miss. An ended span's attributes are immutable, so reading the
    dict under them is safe; anything else (a span whose attributes are a plain dict, another SDK) falls back.
    """
    raw = getattr(span, "_attributes", None)
    inner = getattr(raw, "_dict", None)
    if type(inner) is dict:
        return inner
    if type(raw) is dict:
        return raw
    attributes: Mapping[str, Any] | None = span.attributes
    return attributes


def role(attributes: Mapping[str, Any] | None, span: Any) -> str | None:
    """``ROLE_RETRIEVER``, ``ROLE_ANSWER`` or ``None``: the hot-path classification of one ended span.

    ``span`` is read (its ``events``, which the SDK copies on every read) only for a span with ``db.system``.
    """
    if not attributes:
        return None
    kind = attributes.get(n.OPENINFERENCE_SPAN_KIND)
    if kind is not None:
        return _ROLE_OF_KIND.get(kind)
    operation = attributes.get(n.GEN_AI_OPERATION_NAME)
    if operation is not None:
        return _ROLE_OF_OPERATION.get(operation)
    if attributes.get(n.DB_SYSTEM) is not None and span.events:
        return ROLE_RETRIEVER  # a vector-DB query; it is a retrieval if its events carry results
    return None


def is_decorated(attributes: Mapping[str, Any]) -> bool:
    """True for spans of cp-observe's own decorators (they mark every span they start)."""
    return n.CP_SAMPLED in attributes


@dataclass(frozen=True, slots=True)
class Retrieved:
    """What one retrieval span carries, in rank order."""

    texts: list[str]
    ids: list[str | None]
    scores: list[float | None]


def retrieved_of(attributes: Mapping[str, Any], events: Sequence[Any] = ()) -> Retrieved | None:
    """The documents a retrieval span carries, by convention; ``None`` when it carries none."""
    try:
        if attributes.get(n.OPENINFERENCE_SPAN_KIND) == n.KIND_RERANKER:
            out = _indexed(attributes, n.RERANKER_OUTPUT_DOCUMENTS)
            if out is None or not _reorders(attributes, out):
                return None
            return out
        out = _indexed(attributes, n.RETRIEVAL_DOCUMENTS)
        if out is not None:
            return out
        for key in (n.GEN_AI_RETRIEVAL_DOCUMENTS, n.TRACELOOP_ENTITY_OUTPUT):
            value = attributes.get(key)
            if value is not None:
                out = _from_json(value)
                if out is not None:
                    return out
        if events:
            return _from_events(events)
    except Exception:  # noqa: BLE001 - a malformed span reads as carrying nothing
        return None
    return None


def document_ids_of(attributes: Mapping[str, Any]) -> list[str | None] | None:
    """The ids of a retrieval's documents when they carry no text; ``None`` when it names no such documents.

    Read where ``retrieved_of`` finds nothing to judge: the GenAI convention's ``gen_ai.retrieval.documents`` of
    ids and scores only (``opentelemetry-util-genai``'s ``RetrievalDocument`` has no other field), else
    OpenInference ``retrieval.documents.{i}.document.id`` without content. A document without an id is ``None``
    in the list (it cannot be resolved).
    """
    try:
        parsed = _json(attributes.get(n.GEN_AI_RETRIEVAL_DOCUMENTS))
        if isinstance(parsed, list) and parsed and all(isinstance(item, dict) for item in parsed):
            if any(_has_text(item) for item in parsed):
                return None
            return [_id_text(item.get("id")) for item in parsed[:_MAX_DOCUMENTS]]
        ids: list[str | None] = []
        for i in range(_MAX_DOCUMENTS):
            base = f"{n.RETRIEVAL_DOCUMENTS}.{i}.document."
            ident = attributes.get(base + "id")
            if ident is None or attributes.get(base + "content") is not None:
                break
            ids.append(_id_text(ident))
        return ids or None
    except Exception:  # noqa: BLE001 - see retrieved_of
        return None


def _id_text(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value).strip()[:MAX_JUDGED_CHARS]
    return text or None


def reranker_input_of(attributes: Mapping[str, Any]) -> Retrieved | None:
    """A RERANKER span's input documents (``reranker.input_documents.{i}.document.*``); ``None`` if it has none."""
    try:
        return _indexed(attributes, n.RERANKER_INPUT_DOCUMENTS)
    except Exception:  # noqa: BLE001 - see retrieved_of
        return None


def reranks_nothing(attributes: Mapping[str, Any]) -> bool:
    """A RERANKER span whose recorded output is its input's head in the same order (so not a target)."""
    try:
        after = _indexed(attributes, n.RERANKER_OUTPUT_DOCUMENTS)
    except Exception:  # noqa: BLE001 - see retrieved_of
        return False
    return after is not None and not _reorders(attributes, after)


def reorders(before: Sequence[str] | None, after: Sequence[str] | None) -> bool:
    """A reranker reorders unless its output is its input's leading documents in the same order.

    One that does not adds no ranking of its own, so it is not a target (for its span per convention and for
    ``@reranker``'s alike). Without the input there is nothing to compare: it counts as reordering.
    """
    if before is None or after is None:
        return True
    return list(before[: len(after)]) != list(after)


def top_k_of(attributes: Mapping[str, Any]) -> int | None:
    """The number of documents a retrieval (or reranker) span asked for, by convention; ``None`` if not stated.

    A whole number >= 0 (an integral float, as some exporters send numbers, counts); anything else reads as absent.
    """
    try:
        value = attributes.get(n.GEN_AI_RETRIEVAL_TOP_K)
        if value is None:
            kind = attributes.get(n.OPENINFERENCE_SPAN_KIND)
            if kind == n.KIND_RERANKER:
                value = attributes.get(n.RERANKER_TOP_K)
            elif kind == n.KIND_RETRIEVER or attributes.get(n.GEN_AI_OPERATION_NAME) == n.OPERATION_RETRIEVAL:
                value = attributes.get(n.GEN_AI_REQUEST_TOP_K)
        return _count(value)
    except Exception:  # noqa: BLE001 - see retrieved_of
        return None


def reranker_model_of(attributes: Mapping[str, Any]) -> str | None:
    """The model a RERANKER span names (``reranker.model_name``); ``None`` for other spans or none named."""
    if attributes.get(n.OPENINFERENCE_SPAN_KIND) != n.KIND_RERANKER:
        return None
    value = attributes.get(n.RERANKER_MODEL_NAME)
    return value.strip()[:_MAX_MODEL_NAME] or None if isinstance(value, str) else None


def query_of(attributes: Mapping[str, Any]) -> str | None:
    """The query of a retrieval span, by convention; a JSON input is read by the query rule (``query_in``)."""
    try:
        for key in (n.GEN_AI_RETRIEVAL_QUERY_TEXT, n.RERANKER_QUERY, n.DB_QUERY_TEXT):
            value = attributes.get(key)
            if isinstance(value, str):
                return value
        entity = attributes.get(n.TRACELOOP_ENTITY_INPUT)
        if isinstance(entity, str):
            found = query_in(_json(entity))
            if found is not None:
                return found
        value = attributes.get(n.INPUT_VALUE)
        if value is None:
            return None
        text = str(value)
        if attributes.get(n.INPUT_MIME_TYPE) == n.MIME_JSON or text[:1] in ("{", "["):
            return query_in(_json(text)) or text
        return text
    except Exception:  # noqa: BLE001 - see retrieved_of
        return None


def convention_name(span_name: str, attributes: Mapping[str, Any]) -> str | None:
    """The retriever's name by convention: the entity name, else the span name without its method suffix.

    ``VectorIndexRetriever.retrieve`` -> ``VectorIndexRetriever``; ``retrieval products`` -> ``products``;
    ``chroma.query`` -> ``chroma``.
    """
    entity = attributes.get(n.TRACELOOP_ENTITY_NAME)
    if isinstance(entity, str) and entity:
        return entity
    name = span_name
    for prefix in _METHOD_OPERATIONS:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    head, dot, method = name.rpartition(".")
    if dot and head and method and (method[0].islower() or method[0] == "_") and method.replace("_", "").isalnum():
        name = head
    return name.strip() or None


def data_source_reader(spec: DataSource) -> Callable[[Mapping[str, Any]], str | None] | None:
    """A user's data-source mapping as one callable: a callable of the attributes, or attribute names tried in order.

    The callable returning ``None`` (or raising) leaves the conventional name in place.
    """
    if spec is None:
        return None
    if callable(spec):
        user = spec

        def by_callable(attributes: Mapping[str, Any]) -> str | None:
            try:
                value = user(attributes)
            except Exception:  # noqa: BLE001 - the user's mapping failing falls back to the conventional name
                return None
            return str(value) if value is not None and str(value) else None

        return by_callable
    keys = tuple(str(key) for key in spec)

    def by_attributes(attributes: Mapping[str, Any]) -> str | None:
        for key in keys:
            value = attributes.get(key)
            if value is not None and str(value):
                return str(value)
        return None

    return by_attributes


# --- helpers ---------------------------------------------------------------------------------------------------
def _count(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 <= value < 1 << 31 else None


def _indexed(attributes: Mapping[str, Any], prefix: str) -> Retrieved | None:
    get = attributes.get

    def documents() -> Iterator[tuple[Any, Any, Any]]:
        for i in range(_MAX_DOCUMENTS):
            base = f"{prefix}.{i}.document."
            content = get(base + "content")
            if content is None:
                return
            yield content, get(base + "id"), get(base + "score")

    return _retrieved(documents())


def _retrieved(documents: Iterable[tuple[Any, Any, Any]]) -> Retrieved | None:
    """Documents given as ``(content, id, score)`` in rank order; ``None`` when there are none."""
    texts: list[str] = []
    ids: list[str | None] = []
    scores: list[float | None] = []
    for content, ident, score in documents:
        texts.append(str(content)[:MAX_JUDGED_CHARS])
        ids.append(None if ident is None else str(ident))
        scores.append(float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None)
    return Retrieved(texts, ids, scores) if texts else None


def _reorders(attributes: Mapping[str, Any], output: Retrieved) -> bool:
    """A reranker is a target only when its output order differs from its input (``reorders``)."""
    before = _indexed(attributes, n.RERANKER_INPUT_DOCUMENTS)
    return reorders(before.texts if before is not None else None, output.texts)


def _from_json(value: object) -> Retrieved | None:
    parsed = _json(value) if isinstance(value, str) else value
    if not parsed or not isinstance(parsed, (list, dict)):
        return None
    if (
        isinstance(parsed, list)
        and all(isinstance(item, dict) for item in parsed)
        and not any(_has_text(item) for item in parsed)
    ):
        return None  # gen_ai.retrieval.documents with ids and scores only: nothing to judge
    extracted = extract_contexts(parsed, max_items=_MAX_DOCUMENTS, max_chars=MAX_JUDGED_CHARS)
    if not extracted.contexts:
        return None
    if isinstance(parsed, dict) and not any(isinstance(v, list) for v in parsed.values()):
        return None  # an object that wraps no list of documents is not a retrieval result
    items = extracted.contexts
    return Retrieved([c.text for c in items], [c.id for c in items], [c.score for c in items])


def _has_text(item: Mapping[str, Any]) -> bool:
    return any(isinstance(item.get(key), str) for key in ("content", "page_content", "text", "document"))


def _from_events(events: Sequence[Any]) -> Retrieved | None:
    found = (getattr(event, "attributes", None) or {} for event in events[:_MAX_DOCUMENTS]
             if getattr(event, "name", None) == n.DB_QUERY_RESULT_EVENT)
    return _retrieved((a[n.DB_QUERY_RESULT_DOCUMENT], a.get(n.DB_QUERY_RESULT_ID), a.get(n.DB_QUERY_RESULT_SCORE))
                      for a in found if a.get(n.DB_QUERY_RESULT_DOCUMENT) is not None)
