"""What one ended span carries, decoded once on the evaluator thread into a frozen ``Record``.

``on_end`` keeps references only (``Ended``: ids, times, the span's immutable attribute mapping, its events and
the payload the decorators kept) and runs no user code. The evaluator thread turns each into a ``Record`` with
``decode``: the query, the contexts (text, id and score), the ids of documents without text, the answer, the
stage, the requested top_k, a reranker's input list and model, and its name (the user's ``data_source``
callable runs here, never on the host's thread). Each is read once, from the payload when the decorators kept
one, else from the span by convention (``_capture/_conventions.py``), another instrumentation's content
redacted like ours. Assembly (``_assembly.py``) completes a record: what it is judged against,
its agent, its segment values (its own span, the retrieval a reranker reranks, then the span it was assembled
with) and a reranker's inherited data source. Every later stage reads that one record.

Memory: a record holds what its span held (at most ``_MAX_DOCUMENTS`` contexts, each already bounded by the
capture's text cap or the exporter's attribute limit). ``Ended`` spans wait in the evaluator's queue; a record
then lives in a pending turn (at most ``max_pending_traces`` traces of at most 64 retrievals, each for at most
``turn_timeout_s``), the ready list or a judgement (``concurrency`` at once). Targets queued, pending, ready
and judged together never exceed ``queue_size``; nothing else keeps a record (assembly remembers an answer's
first 4,000 characters and a retrieval's document fingerprint per trace, bounded by ``max_pending_traces``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from opentelemetry.trace import SpanContext

from cp_observe import _names as n
from cp_observe._capture._conventions import (
    answer_of,
    convention_name,
    document_ids_of,
    is_decorated,
    query_of,
    reorders,
    reranker_input_of,
    reranker_model_of,
    reranks_nothing,
    retrieved_of,
    top_k_of,
)
from cp_observe._capture._payloads import Payload
from cp_observe._capture._spans import redact_foreign

__all__ = ["FINGERPRINT_CHARS", "Ended", "Record", "decode", "name_of"]

_MAX_DOCUMENTS = 1000
FINGERPRINT_CHARS = 256  # documents compared on their first characters (spans may truncate them differently)


class Ended(NamedTuple):
    """One ended span as ``on_end`` hands it over: references only, nothing read or decoded yet.

    Built positionally (cheaper on the request path). ``kind`` is ``retriever``, ``agent`` (any span that may
    carry an answer) or ``root``.
    """

    kind: str
    span_context: SpanContext
    start_ns: int
    end_ns: int
    error: bool
    local_root: bool
    attributes: Any
    payload: Payload | None
    target: bool
    sampling_reason: str
    span_name: str = ""
    events: Sequence[Any] = ()
    parent_id: int = 0  # the parent's span id in the same process (0: a root or a remote parent)


@dataclasses.dataclass(frozen=True, slots=True, eq=False)  # compared by identity (twins)
class Record:
    """One span as every stage after ``on_end`` reads it; the fields after ``returned`` are set by assembly."""

    kind: str
    span_context: SpanContext
    start_ns: int
    end_ns: int
    error: bool
    local_root: bool
    target: bool
    sampling_reason: str
    span_name: str
    parent_id: int
    attributes: Mapping[str, Any]
    decorated: bool  # a span of cp-observe's own decorators
    name: str  # a retrieval's data source (``unknown`` when nothing names it); an agent's name
    named: bool  # named by the user's mapping or the data source attribute (a reranker then inherits nothing)
    stage: str  # STAGE_RERANK for a reranker's span, else STAGE_RETRIEVAL
    query: str | None = None
    contexts: list[str] | None = None  # texts in rank order; None when the span carries none
    context_ids: list[str | None] | None = None
    context_scores: list[float | None] | None = None
    document_ids: list[str | None] | None = None  # documents named by id only (no text anywhere)
    answer: str | None = None
    before: list[str] | None = None  # a reranker's input documents in their order
    reranks_nothing: bool = False  # a reranker whose output is its input's head in the same order
    top_k: int | None = None
    reranker_model: str | None = None
    user_error: str | None = None  # a callback the user gave raised (nothing sound to judge)
    returned: int | None = None  # how many documents the decorator counted (it may keep fewer)
    reference_text: str = ""
    reference: str = ""
    agent_name: str | None = None
    segments: tuple[tuple[str, str], ...] = ()
    #: A reranker's second place to look for a segment (after its own span, before the enclosing one): the segment
    #: attributes of the retrieval whose documents it reranks (only those: a small dict), set with its name.
    reranked: Mapping[str, Any] | None = None

    def fingerprint(self) -> tuple[str, ...] | None:
        """What identifies the retrieval across the spans describing it: its documents' leading characters."""
        if self.contexts:
            return tuple(c[:FINGERPRINT_CHARS] for c in self.contexts)
        ids = self.document_ids  # documents without text: the same ids describe the same retrieval
        return tuple(f"\0id:{i}" for i in ids) if ids else None

    def preference(self) -> int:
        """Which span of a group describing one retrieval names and carries it (higher wins)."""
        return 2 if self.decorated else 1 if self.attributes.get(n.GEN_AI_DATA_SOURCE_ID) is not None else 0


def name_of(ended: Ended, data_source: Any = None) -> tuple[str, bool, str]:
    """A span's name, whether the user's mapping or the data source attribute gave it, and its stage.

    A retrieval's name: the user's mapping, the data source attribute, the convention's, ``unknown``; an agent's:
    ``gen_ai.agent.name`` or ``unknown``. A reranker's span is ``STAGE_RERANK``, every other ``STAGE_RETRIEVAL``.
    """
    attributes: Mapping[str, Any] = ended.attributes or {}
    if ended.kind != "retriever":
        value = attributes.get(n.GEN_AI_AGENT_NAME)
        return str(value) if value is not None else "unknown", True, n.STAGE_RETRIEVAL
    name = data_source(attributes) if data_source is not None else None
    if name is None:
        value = attributes.get(n.GEN_AI_DATA_SOURCE_ID)
        name = str(value) if value is not None and str(value) else None
    stage = n.STAGE_RERANK if attributes.get(n.OPENINFERENCE_SPAN_KIND) == n.KIND_RERANKER else n.STAGE_RETRIEVAL
    if name is not None:
        return name, True, stage
    return convention_name(ended.span_name, attributes) or "unknown", False, stage


def decode(ended: Ended, data_source: Any = None) -> Record:
    """Read ``ended`` once into a ``Record``; ``data_source`` is the user's mapping of attributes to a name."""
    attributes: Mapping[str, Any] = ended.attributes or {}
    payload = ended.payload
    decorated = payload is not None or is_decorated(attributes)
    kind = ended.kind
    name, named, stage = name_of(ended, data_source)
    fields: dict[str, Any] = {"top_k": top_k_of(attributes)} if kind == "retriever" else {}
    if (kind != "root" and ended.target) or kind == "retriever":
        fields["query"] = payload.query if payload is not None else _foreign(query_of(attributes), decorated)
        _read_documents(ended, attributes, decorated, stage == n.STAGE_RERANK, fields)
        counted = attributes.get(n.CP_CONTEXT_COUNT)
        fields["returned"] = counted if isinstance(counted, int) and not isinstance(counted, bool) else None
        user_error = attributes.get(n.CP_USER_ERROR)
        fields["user_error"] = user_error[:64] if isinstance(user_error, str) and user_error else None
        fields["reranker_model"] = reranker_model_of(attributes)
    if kind != "retriever" and not ended.error:
        answer = payload.answer if payload is not None else None
        fields["answer"] = answer if answer is not None else _foreign(answer_of(attributes), decorated)
    return Record(kind, ended.span_context, ended.start_ns, ended.end_ns, ended.error, ended.local_root,
                  ended.target, ended.sampling_reason, ended.span_name, ended.parent_id, attributes, decorated,
                  name, named, stage, **fields)


def _read_documents(ended: Ended, attributes: Mapping[str, Any], decorated: bool, rerank: bool,
                    fields: dict[str, Any]) -> None:
    """The contexts (payload, else span), a document-only retrieval's ids, and a reranker's input list."""
    payload = ended.payload
    if payload is not None and payload.contexts is not None:
        fields["contexts"] = payload.contexts
        if rerank:
            fields["before"] = payload.before
            fields["reranks_nothing"] = not reorders(payload.before, payload.contexts)
        return
    found = retrieved_of(attributes, ended.events)
    contexts: list[str] | None = found.texts[:_MAX_DOCUMENTS] if found is not None else None
    if contexts is None and attributes.get(n.CP_CONTEXT_COUNT) == 0:
        contexts = []
    if contexts is not None:
        fields["contexts"] = [_foreign(c, decorated) or "" for c in contexts]
        if found is not None:
            fields["context_ids"] = found.ids[:_MAX_DOCUMENTS]
            fields["context_scores"] = found.scores[:_MAX_DOCUMENTS]
    elif payload is None:
        ids = document_ids_of(attributes)
        fields["document_ids"] = ids[:_MAX_DOCUMENTS] if ids else None
    if rerank:
        found = reranker_input_of(attributes)
        before = found.texts[:_MAX_DOCUMENTS] if found is not None else None
        fields["before"] = [_foreign(c, decorated) or "" for c in before] if before else before
        fields["reranks_nothing"] = reranks_nothing(attributes)  # the span's lists (contexts read None there)


def _foreign(text: str | None, decorated: bool) -> str | None:
    """Another instrumentation's content is redacted like ours; ours already was."""
    return text if decorated else redact_foreign(text)

