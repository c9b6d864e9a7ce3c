"""The decorators' hot path: start a target span, record content per the capture settings, end it.

Cost matters here: everything static about a call site (span name, kind attributes) is computed at
decoration time; a call does one ``start_span``, one ``set_attributes`` when it returns (what was known at
start, the sampled mark and the query, goes in the same batch as the result), and ``end``. Unsampled calls
keep nothing in memory. Every function here hands its own errors to the one boundary
(``_internal.report_internal_error``): a bug in cp-observe never reaches the host's code. The user's callbacks
(``query=``, ``context_extractor=``, ``output=``, ``redact``) run through ``_internal.call_user``: their
failures are user errors, recorded as ``context_precision.user_error`` and never raised.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _json_string  # json.dumps' own string encoder (C), non-ASCII kept
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
from opentelemetry.trace import Span, Status, StatusCode

from cp_observe import _names as n
from cp_observe._capture._answer import answer_text, query_text
from cp_observe._capture._collecting import COLLECTING, in_collection
from cp_observe._capture._extract import NOT_CAPTURED, Context, extract_contexts
from cp_observe._capture._payloads import PAYLOADS, Payload
from cp_observe._capture._serialize import MAX_JUDGED_CHARS, metadata_json, safe_str, type_name
from cp_observe._config._runtime import RUNTIME_HOLDER, Runtime
from cp_observe._config._sampling import FORCED, is_forced
from cp_observe._internal import USER_FAILED, call_user, report_internal_error, report_user_error

__all__ = ["Call", "State", "attach", "detach", "enter", "fail", "finish", "leave", "redact_foreign", "start"]

# Attribute keys of the first documents, spelled once (by _names) rather than formatted on every call.
_DOC_KEYS = tuple({field: n.document_attribute(i, field) for field in n.DOCUMENT_FIELDS} for i in range(28))
# A reranker's span carries two lists: each is recorded up to 14 documents, so both stay under the SDK's limit of
# 128 attributes per span as one list of 28 does (four attributes a document).
_RERANK_RECORDED = 14
_IN_KEYS = tuple(
    {field: n.document_attribute(i, field, n.RERANKER_INPUT_DOCUMENTS) for field in n.DOCUMENT_FIELDS}
    for i in range(_RERANK_RECORDED)
)
_OUT_KEYS = tuple(
    {field: n.document_attribute(i, field, n.RERANKER_OUTPUT_DOCUMENTS) for field in n.DOCUMENT_FIELDS}
    for i in range(_RERANK_RECORDED)
)
_UNREADABLE = object()
_START_KEYS = frozenset(
    (n.CP_SAMPLED, n.CP_USER_ERROR, n.INPUT_VALUE, n.GEN_AI_RETRIEVAL_QUERY_TEXT, n.CP_CONTENT_CAPTURED)
)
_get_value = otel_context.get_value
_attach = attach = otel_context.attach  # the plain wrappers call these directly (enter/leave, inlined)
_detach = detach = otel_context.detach
_set_span_in_context = trace.set_span_in_context


@dataclass(slots=True)
class Call:
    """What a decorated function's spans have in common, computed once at decoration time."""

    kind: str
    name: str
    query: Callable[[tuple[Any, ...], dict[str, Any]], Any]
    context_extractor: Callable[[Any], Any] | None = None
    output: Callable[[Any], Any] | None = None
    #: A reranker's input documents (a getter like ``query``); ``None`` for the other kinds.
    documents: Callable[[tuple[Any, ...], dict[str, Any]], Any] | None = None
    span_name: str = ""
    start_attributes: dict[str, Any] = field(default_factory=dict)
    scores_contexts: bool = False
    doc_keys: tuple[dict[str, str], ...] = _DOC_KEYS  # where the returned documents are recorded
    recorded: int = len(_DOC_KEYS)  # at most this many of them
    #: The argument naming how many documents to return (``k``, ``top_k``, ``limit``), a getter like ``query``,
    #: resolved at decoration time; ``None`` when the function has none.
    top_k: Callable[[tuple[Any, ...], dict[str, Any]], Any] | None = None
    #: A reranker's model (``@reranker(model=...)``), recorded as ``reranker.model_name``.
    model: str | None = None
    top_k_key: str = n.GEN_AI_RETRIEVAL_TOP_K  # where the requested k is recorded
    #: Whether the documents also go out as the GenAI convention's ``gen_ai.retrieval.documents`` (retrievers).
    convention_documents: bool = False
    #: The sampler's key at span start: a retriever's data source (its name); None (the highest rate) otherwise.
    sample_key: str | None = None

    def __post_init__(self) -> None:
        if self.kind == "reranker":
            # No data source id: the evaluation takes the one of the retrieval it reranks (turn assembly).
            self.span_name = f"{n.RERANK_SPAN_PREFIX} {self.name}"
            self.start_attributes = {n.OPENINFERENCE_SPAN_KIND: n.KIND_RERANKER}
            if self.model:
                self.start_attributes[n.RERANKER_MODEL_NAME] = self.model
            self.scores_contexts = True
            self.doc_keys, self.recorded = _OUT_KEYS, _RERANK_RECORDED
            self.top_k_key = n.RERANKER_TOP_K
        elif self.kind == "retriever":
            self.span_name = f"{n.RETRIEVAL_SPAN_PREFIX} {self.name}"
            self.start_attributes = {
                n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL,
                n.GEN_AI_DATA_SOURCE_ID: self.name,
                n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER,
            }
            self.scores_contexts = True
            self.convention_documents = True
            self.sample_key = self.name
        else:
            self.span_name = f"{n.AGENT_SPAN_PREFIX} {self.name}"
            self.start_attributes = {
                n.GEN_AI_OPERATION_NAME: n.OPERATION_INVOKE_AGENT,
                n.GEN_AI_AGENT_NAME: self.name,
                n.OPENINFERENCE_SPAN_KIND: n.KIND_AGENT,
            }
            self.scores_contexts = self.context_extractor is not None


class State:
    """One call in flight: its span, the context to make current, and whether it is sampled."""

    __slots__ = (
        "before", "call", "ctx", "key", "pending", "query", "recording", "runtime", "sampled", "span", "user_error",
    )

    def __init__(  # noqa: PLR0917 - positional: this runs on every call, and keyword passing costs more
        self, call: Call, span: Span, runtime: Runtime, recording: bool, sampled: bool = False,
        key: tuple[int, int] | None = None, query: str = "", user_error: str | None = None,
        pending: dict[str, Any] | None = None,
    ) -> None:
        self.call = call
        self.span = span
        self.runtime = runtime
        self.sampled = sampled
        self.key = key  # (trace id, span id) when the judge will want this call's content
        self.query = query
        self.user_error = user_error  # the skip reason when a user callback raised
        # Attributes known at start (the sampled mark, the query), set with the result's in one batch at the
        # end: each batch takes the span's lock and walks the SDK's checks once. Only a processor's on_start
        # could have seen them earlier, and it runs before start() returns either way.
        self.pending = pending
        self.recording = recording
        self.ctx = _set_span_in_context(span)
        self.before: list[str] | None = None  # a reranker's input documents, read at start

    @property
    def keep(self) -> int:
        """Items of a generator worth keeping: what can be recorded (capture on) or judged (a payload).

        None when the span does not record, so unsampled and SDK-less calls hold nothing. (A property, read
        once per generator, so plain calls do not pay for it.)
        """
        if not self.recording:
            return 0
        rt = self.runtime
        return max(rt.max_contexts if rt.capture_content else 0, rt.max_judged_contexts if self.key else 0)


def start(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> State | None:
    """Start the span of one call; ``None`` means run the function untraced.

    A call made from a finalizer inside a garbage collection runs untraced: making its span current there would
    set a context variable inside the collection (``_collecting``).
    """
    if _get_value(_SUPPRESS_INSTRUMENTATION_KEY) or (COLLECTING[0] is not None and in_collection()):
        return None
    span: Span | None = None
    try:
        rt = RUNTIME_HOLDER[0]
        span = rt.tracer.start_span(call.span_name, attributes=call.start_attributes)
        if not span.is_recording():
            return State(call, span, rt, False)
        span_context = span.get_span_context()
        trace_id = span_context.trace_id
        sampled = rt.sampler(trace_id, call.sample_key)
        if not sampled and is_forced(None, trace_id):
            FORCED.add(trace_id)  # so the processor, which sees only the ended span, agrees
            sampled = True
        attributes: dict[str, Any] = {n.CP_SAMPLED: sampled}
        if call.top_k is not None:  # not content: recorded whatever the capture settings
            k = call.top_k(args, kwargs)
            if type(k) is int and k >= 0:
                attributes[call.top_k_key] = k
        key = None
        raw_query = call.query(args, kwargs) if sampled or rt.capture_content else None
        user_error = None
        if raw_query is USER_FAILED:  # the user's query= callable raised (already logged and counted)
            raw_query, user_error = None, "query_error"
            attributes[n.CP_USER_ERROR] = user_error
        # No query (None) is recorded as absent, never as the text "None".
        query = "" if raw_query is None else _query(raw_query, rt, MAX_JUDGED_CHARS if sampled else rt.max_value_length)
        if rt.capture_content and raw_query is not None:
            shown = _shown(query, rt.max_value_length)
            attributes[n.INPUT_VALUE] = shown
            if call.kind == "retriever":
                attributes[n.GEN_AI_RETRIEVAL_QUERY_TEXT] = shown
            elif call.kind == "reranker":
                attributes[n.RERANKER_QUERY] = shown
        if sampled and rt.keep_payloads:
            key = (trace_id, span_context.span_id)  # the payload itself is stored once, when the call ends
        if not rt.capture_content:
            attributes[n.CP_CONTENT_CAPTURED] = False
        state = State(call, span, rt, True, sampled, key, query, user_error, attributes)
        if call.documents is not None and (sampled or rt.capture_content):
            _record_input(state, call.documents(args, kwargs), attributes)
        return state
    except Exception as exc:  # noqa: BLE001 - our failure: no span, the call runs untraced
        if span is not None:
            with contextlib.suppress(Exception):
                span.end()
        report_internal_error("span start", exc)
        return None
    except BaseException:  # KeyboardInterrupt in the user's query= callable: end our span and let it through
        if span is not None:
            with contextlib.suppress(Exception):
                span.end()
        raise


def _record_input(state: State, raw: Any, attributes: dict[str, Any]) -> None:
    """A reranker's input documents, read when the call starts (the reranker may reorder them in place).

    Read like a retriever's result (``_read_documents``); an iterator is the host's own and is not read.
    """
    if raw is USER_FAILED:
        state.user_error = state.user_error or "documents_error"
        attributes[n.CP_USER_ERROR] = state.user_error
    elif raw is not None and (type(raw) is list or not isinstance(raw, Iterator)):
        state.before = _read_documents(state.runtime, raw, attributes, _IN_KEYS, _RERANK_RECORDED)[0]


def _read_documents(
    rt: Runtime, raw: Any, attributes: dict[str, Any], doc_keys: tuple[dict[str, str], ...], recorded: int,
    convention: bool = False,
) -> tuple[list[str] | None, int]:
    """Documents by shape, bounded and redacted, recorded at ``doc_keys`` with content capture on.

    Returns the texts the judge reads (``None``: an iterator under a wrapper, not read) and how many documents
    the value held.
    """
    redact = rt.redact
    if type(raw) is list and _plain_texts(raw, rt.max_judged_contexts):
        # The common case, a short list of strings: no Context objects, one pass.
        texts = [_redacted(c, redact) for c in raw] if redact is not None else list(raw)
        if rt.capture_content:
            limit = rt.max_value_length
            for i in range(min(len(texts), rt.max_contexts, recorded)):
                attributes[doc_keys[i]["content"]] = _shown(texts[i], limit)
        return texts, len(raw)
    extracted = extract_contexts(raw, max_items=rt.max_judged_contexts, max_chars=MAX_JUDGED_CHARS)
    if extracted is NOT_CAPTURED:
        return None, 0
    items = extracted.contexts
    texts = [_redacted(c.text, redact) for c in items] if redact is not None else [c.text for c in items]
    if rt.capture_content and items:
        _record_documents(rt, items, texts, attributes, doc_keys=doc_keys, recorded=recorded, convention=convention)
    return texts, extracted.total if extracted.total is not None else len(items)


def enter(state: State) -> object:
    """Make the call's span current; returns the token for ``leave``."""
    return _attach(state.ctx)


def leave(token: object) -> None:
    """Restore the context that was current before ``enter`` (nothing for ``None``: ``enter`` was skipped)."""
    if token is not None:
        _detach(token)  # type: ignore[arg-type]


def finish(state: State, result: Any, *, partial: bool = False, yielded: int | None = None) -> None:
    """Record what the call returned and end its span.

    Args:
        state: the call.
        result: the return value, or for a generator the first ``state.keep`` items it yielded.
        partial: a generator closed (or collected) before its end.
        yielded: for a generator, how many items it yielded in all.
    """
    span = state.span
    try:
        if state.recording:
            _record_result(state, result, partial, yielded)
    except Exception as exc:  # noqa: BLE001 - our failure: the span still ends, the result is untouched
        if state.key is not None:
            PAYLOADS.take(state.key)  # may have been stored before the failure
        with contextlib.suppress(Exception):
            started = {k: v for k, v in (state.pending or {}).items() if k in _START_KEYS}  # not a half result
            span.set_attributes({**started, n.CP_SAMPLED: False})
        _end(span)
        report_internal_error("span finish", exc)
        return
    _end(span)


def fail(state: State, exc: BaseException) -> None:
    """The call raised: mark the span as an error (it will not be scored) and end it."""
    span = state.span
    try:
        if state.recording:
            span.set_attributes({**(state.pending or {}), n.ERROR_TYPE: type(exc).__qualname__})
            span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
            if isinstance(exc, Exception) and state.runtime.capture_content:
                _record_exception(span, exc, state.runtime.max_value_length)
    except Exception as error:  # noqa: BLE001 - our failure must not replace the user's exception
        _end(span)
        report_internal_error("span fail", error)
        return
    _end(span)


def _record_exception(span: Span, exc: BaseException, limit: int) -> None:
    """The SDK's ``record_exception``, bounded, and safe with exceptions whose ``str`` raises."""
    try:
        stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # noqa: BLE001 - formatting calls str(exc), which may raise
        stack = f"{type_name(exc)} (traceback unavailable)"
    span.add_event(
        "exception",
        {
            "exception.type": type_name(exc),
            "exception.message": _shown(safe_str(exc, limit), limit),
            "exception.stacktrace": _shown(stack[-limit:], limit),
            "exception.escaped": True,
        },
    )


def _end(span: Span) -> None:
    try:
        span.end()
    except Exception as exc:  # noqa: BLE001 - an exporter raising inside end() must not reach the host
        report_internal_error("span end", exc)


def _record_result(state: State, result: Any, partial: bool, yielded: int | None) -> None:
    call, rt = state.call, state.runtime
    attributes: dict[str, Any] = state.pending or {}  # this call's own dict: extended, set once below
    contexts: list[str] | None = None
    user_error = state.user_error
    if call.scores_contexts:
        if call.context_extractor is not None:
            raw = call_user("context_extractor", call.context_extractor, result)
            if raw is USER_FAILED:
                raw, user_error = _UNREADABLE, user_error or "extractor_error"
        else:
            raw = result
        if yielded is None and type(raw) is not list and isinstance(raw, Iterator):  # list: the common case
            # An iterator reached through the result (returned, or returned by the extractor) is the host's
            # own: reading it would empty it for the caller. Not captured, not scored (skipped, no_content).
            raw = _UNREADABLE
        if raw is not _UNREADABLE:
            contexts, count = _read_documents(rt, raw, attributes, call.doc_keys, call.recorded,
                                              call.convention_documents)
            if contexts is not None:
                if yielded is not None and type(raw) is list and yielded > len(raw):
                    count += yielded - len(raw)  # items yielded beyond those kept, one context each
                attributes[n.CP_CONTEXT_COUNT] = count
    answer: str | None = None
    if call.kind == "agent":
        answer, answer_error = _record_answer(call, rt, result, attributes)
        user_error = user_error or answer_error
    if partial:
        attributes[n.CP_PARTIAL] = True
    if user_error is not None:
        attributes[n.CP_USER_ERROR] = user_error
    if state.key is not None:
        PAYLOADS.put(state.key, Payload(state.query, contexts, answer, state.before))  # positional: cheaper
    span = state.span
    if attributes:
        span.set_attributes(attributes)


def _record_documents(
    rt: Runtime, items: tuple[Context, ...], contexts: list[str], attributes: dict[str, Any], *,
    doc_keys: tuple[dict[str, str], ...] = _DOC_KEYS, recorded: int = len(_DOC_KEYS), convention: bool = False,
) -> None:
    """The first ``max_contexts`` documents' content, id, score and metadata, as span attributes (at ``doc_keys``).

    With ``convention`` (a retriever's span), the same documents' ids and scores also go out as the GenAI
    convention's ``gen_ai.retrieval.documents``: a JSON array of ``{"id", "score"}`` in rank order. The
    convention's schema requires both fields, so the attribute is written only when every recorded document has
    both; the content is not repeated there (it stays once, in the OpenInference attributes Phoenix shows). Like
    every recorded text it stays within ``max_value_length``: then it lists the leading documents that fit.
    Recorded only with content capture on, like the ids: the convention makes the attribute opt-in, and ids
    (paths, URLs, titles) can say what a document holds.
    """
    limit, redact = rt.max_value_length, rt.redact
    documents: list[str] | None = [] if convention else None  # each document's JSON object
    for i in range(min(len(items), rt.max_contexts, recorded)):
        item, text = items[i], contexts[i]
        keys = doc_keys[i]
        attributes[keys["content"]] = _shown(text, limit)
        ident = score = None
        if item.id is not None:
            ident = attributes[keys["id"]] = _shown(_redacted(item.id, redact) if redact else item.id, limit)
        if item.score is not None:  # finite: extraction keeps no other
            score = attributes[keys["score"]] = item.score
        if documents is not None:
            if ident is None or score is None:
                documents = None  # the schema requires both: no partial list (its ranks would not match)
            else:  # what json.dumps writes for {"id": ident, "score": score}, at half its cost
                documents.append('{"id": ' + _json_string(ident) + ', "score": ' + float.__repr__(score) + "}")
        if item.metadata:
            meta = metadata_json(item.metadata, limit)
            if meta is not None:
                attributes[keys["metadata"]] = _shown(_redacted(meta, redact) if redact else meta, limit + 64)
    if documents:
        _record_convention_documents(documents, attributes, limit)


def _record_convention_documents(documents: list[str], attributes: dict[str, Any], limit: int) -> None:
    """``gen_ai.retrieval.documents`` within ``max_value_length``: the leading documents that fit, in rank order.

    ``documents`` are the JSON objects, one per document. A prefix stays valid JSON and keeps the ranks; a text
    cut in the middle would be neither.
    """
    text = "[" + ", ".join(documents) + "]"
    if len(text) > limit:
        size, kept = 2, 0  # the brackets
        for piece in documents:
            size += len(piece) + (2 if kept else 0)
            if size > limit:
                break
            kept += 1
        if not kept:
            return
        text = "[" + ", ".join(documents[:kept]) + "]"
    attributes[n.GEN_AI_RETRIEVAL_DOCUMENTS] = text


def _record_answer(call: Call, rt: Runtime, result: Any, attributes: dict[str, Any]) -> tuple[str | None, str | None]:
    """The agent's answer by the one answer rule (``cp_observe._capture._answer``), and the user error, if any."""
    raw_answer = call_user("output", call.output, result) if call.output is not None else result
    if raw_answer is USER_FAILED:
        return None, "output_error"
    text = answer_text(raw_answer)  # None: no answer, judged on the query instead
    if text is None:
        return None, None
    answer = _redacted(text, rt.redact) if rt.redact is not None else text
    if rt.capture_content:
        attributes[n.OUTPUT_VALUE] = _shown(answer, rt.max_value_length)
    return answer, None


def _plain_texts(values: list[Any], max_items: int) -> bool:
    if len(values) > max_items:
        return False
    for value in values:  # noqa: SIM110 - a plain loop is measurably faster than all() over a generator here
        if type(value) is not str or len(value) > MAX_JUDGED_CHARS:
            return False
    return True


def _shown(text: str, limit: int) -> str:
    """The text as recorded on a span: bounded, and encodable (a lone surrogate would fail the OTLP export)."""
    if len(text) > limit:
        text = safe_str(text, limit)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _query(value: Any, rt: Runtime, limit: int) -> str:
    """The query argument's text by the query rule (``_answer.query_text``), redacted."""
    text = value if type(value) is str and len(value) <= limit else query_text(value, limit)
    redact = rt.redact
    return _redacted(text, redact) if redact is not None else text


def redact_foreign(text: str | None) -> str | None:
    """Apply the ``redact`` hook to content another instrumentation recorded (the judge sees it redacted too).

    Our decorators redact before recording; spans of other instrumentations reach us unredacted, so their query,
    contexts and answer pass through the same hook, fail-closed, before the judge. Runs on the evaluator thread.
    """
    redact = RUNTIME_HOLDER[0].redact
    return text if text is None or redact is None else _redacted(text, redact)


def _redacted(text: str, redact: Callable[[str], str]) -> str:
    try:
        out = redact(text)
    except Exception as exc:  # noqa: BLE001 - fail closed: a broken redactor must not let content through
        report_user_error("redact", exc)
        return "[redaction failed]"
    return out if isinstance(out, str) else "[redaction failed]"
