"""Turn assembly: decide what each sampled retrieval is judged against, and judge each retrieval once.

The reference: a retrieval is judged against the answer of the nearest span of its trace that encloses it in
time and carries an answer (an agent, an LLM call, or the local root: a chain or workflow root; each read per
convention, see ``_conventions``). So retrievals wait (per trace, bounded, with a deadline) for such a span.
A retrieval with none is judged against its own query when its local root span ends or its deadline passes.
An agent decorated with a ``context_extractor`` is itself a target, judged against its answer.

Received spans (``cp-observe serve``: ``received=True``). A retrieval whose parent span never arrived by its deadline
is skipped as ``parent_missing`` instead of judged against its query: the rest of its trace (its answer among it)
went somewhere else, most often another replica behind a load balancer that does not route by trace id, so a score
against the query would silently mean something else than its neighbours' and cost a judge call. "Arrived" means
handed to assembly: a retrieval, answer-carrying or local root span of the trace (a parent that is none of these
counts as missing, which matters only when the local root did not arrive in time either). A trace is counted
split (``split_traces``) when another of its spans arrives after its retrievals were released at their deadline:
its spans reached this replica more than ``turn_timeout_s`` apart. In process (``received=False``) a parent
always ends in the same process, so neither applies there: a turn longer than the deadline is judged against the
query, as before, and only counted split.

One retrieval, one evaluation: spans that describe the same retrieval (an instrumented retriever inside a
decorated one, OpenLLMetry's retriever span beside a decorated function's span, an outer span over an inner
one) are matched by what they carry: the same documents, in the same trace, overlapping in time. The group is
counted and judged once, under the preferred span (a decorated one, else one naming its data source). A
retrieval span that carries no documents is not a retrieval to score: it is not counted at all. One whose documents
carry ids but no text is a retrieval (counted; judged through a document resolver, else skipped as such).

A reranker (an OpenInference ``RERANKER`` span, ``@cp_observe.reranker`` among them) is a retrieval of its own,
``stage=rerank``, when it reorders (``_conventions.reorders``); one that does not is folded like a twin. It is
named after the retrieval whose documents it reranks when that retrieval was seen in the trace first (its input
documents are that retrieval's documents), so a data source's two stages are told apart by ``stage`` alone.
When a turn holds both, both are scored: the retrieval on its documents (``stage=retrieval``), the reranker on the
union of its input and output (``stage=rerank``, ``_judging/_rerank.py``); the judge's cache shares their verdicts.

Only the evaluator thread touches an ``Assembler``; it needs no lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
    reranks_nothing,
    retrieved_of,
)
from cp_observe._capture._spans import redact_foreign
from cp_observe._capture._payloads import Payload

__all__ = ["Assembler", "Fold", "Item", "Ready", "Skip"]

_MAX_RETRIEVALS_PER_TRACE = 64
_MAX_DOCUMENTS_FROM_ATTRIBUTES = 1000
_MAX_REMEMBERED_ANSWER = 4_000
_FINGERPRINT_CHARS = 256  # documents compared on their first characters (spans may truncate them differently)
_SPLIT_MEMORY = 10  # a released trace is remembered this many turn timeouts, to recognise its late spans
_UNSET: Any = object()


@dataclass(slots=True)
class Item:
    """One ended span handed over by ``on_end``: a target, an agent's answer, or a local root's end.

    ``on_end`` builds it positionally (cheaper on the request path): keep the field order in step with it.
    """

    kind: str  # "retriever", "agent" (any span that may carry an answer) or "root"
    span_context: SpanContext
    start_ns: int
    end_ns: int
    error: bool
    local_root: bool
    attributes: Any  # the span's immutable attribute mapping
    payload: Payload | None
    target: bool
    sampling_reason: str
    span_name: str = ""
    events: Sequence[Any] = ()
    data_source: Callable[[Mapping[str, Any]], str | None] | None = None
    #: False once assembly found this span describes a retrieval already counted (or none): not counted sampled.
    counts: bool = True
    #: Set by the evaluator just before ``on_finished``: "scored", "failed", "dropped:<reason>",
    #: "skipped:<reason>", or "" (folded: counted under another span, or not at all).
    outcome: str = ""
    _name: str | None = None
    _contexts: Any = _UNSET
    #: The attributes of the span this retrieval was assembled with (its answer's span, or its local root): where
    #: a segment missing from the retrieval span is looked for. Set by the assembler (evaluator thread).
    enclosing: Any = None
    #: ``(label, value)`` per segment, resolved once on the evaluator thread (``SegmentValues``); None until then.
    segments: tuple[tuple[str, str], ...] | None = None
    _before: Any = _UNSET
    #: A reranker's data source when nothing on its span names one: the retrieval whose documents it reranks.
    _inherited: str | None = None
    #: A reranker's second place to look for a segment (after its own span, before ``enclosing``): the segment
    #: attributes of the retrieval whose documents it reranks (only those: a small dict), set with ``_inherited``.
    reranked: Any = None
    _ids: Any = _UNSET
    #: The span id of the parent in the same process (0: a root, or a remote parent); read for received spans.
    parent_id: int = 0

    @property
    def name(self) -> str:
        """A retriever's data source (user mapping, data source id, convention, ``unknown``); an agent's name."""
        if self._name is not None:
            return self._name
        attributes = self.attributes or {}
        if self.kind != "retriever":
            value = attributes.get(n.GEN_AI_AGENT_NAME)
            self._name = str(value) if value is not None else "unknown"
            return self._name
        name = self.data_source(attributes) if self.data_source is not None else None
        if name is None:
            value = attributes.get(n.GEN_AI_DATA_SOURCE_ID)
            name = str(value) if value is not None and str(value) else None
        if name is None:
            name = self._inherited
        if name is None:
            name = convention_name(self.span_name, attributes)
        self._name = name or "unknown"
        return self._name

    @property
    def decorated(self) -> bool:
        """A span of cp-observe's own decorators."""
        return self.payload is not None or (self.attributes is not None and is_decorated(self.attributes))

    def query(self) -> str | None:
        """The query: from memory when sampled here, else from the span's attributes (per convention)."""
        if self.payload is not None:
            return self.payload.query
        query = query_of(self.attributes or {})
        return query if self.decorated else redact_foreign(query)

    def contexts(self) -> list[str] | None:
        """The contexts in rank order: from memory, else from the span per convention; ``None`` if it has none."""
        if self.payload is not None and self.payload.contexts is not None:
            return self.payload.contexts
        if self._contexts is _UNSET:
            attributes = self.attributes or {}
            found = retrieved_of(attributes, self.events)
            contexts: list[str] | None = found.texts if found is not None else None
            if contexts is None and attributes.get(n.CP_CONTEXT_COUNT) == 0:
                contexts = []
            if len(contexts or ()) > _MAX_DOCUMENTS_FROM_ATTRIBUTES:
                contexts = contexts[:_MAX_DOCUMENTS_FROM_ATTRIBUTES] if contexts is not None else None
            if contexts and not self.decorated:  # another instrumentation's content: redacted like ours
                contexts = [redact_foreign(c) or "" for c in contexts]
            self._contexts = contexts
        return self._contexts  # type: ignore[no-any-return]

    def document_ids(self) -> list[str | None] | None:
        """The ids of documents that carry no text (``_conventions.document_ids_of``); ``None`` if it has none."""
        if self._ids is _UNSET:
            found = None
            if self.payload is None and self.contexts() is None and self.attributes:
                found = document_ids_of(self.attributes)
            self._ids = found[:_MAX_DOCUMENTS_FROM_ATTRIBUTES] if found else None
        return self._ids  # type: ignore[no-any-return]

    @property
    def stage(self) -> str:
        """``STAGE_RERANK`` for a reranker's span, else ``STAGE_RETRIEVAL`` (an agent scored on its contexts too)."""
        attributes = self.attributes
        if self.kind == "retriever" and attributes and attributes.get(n.OPENINFERENCE_SPAN_KIND) == n.KIND_RERANKER:
            return n.STAGE_RERANK
        return n.STAGE_RETRIEVAL

    def before(self) -> list[str] | None:
        """A reranker's input documents in their order: from memory, else from its span; ``None`` if unknown."""
        if self.payload is not None and self.payload.contexts is not None:
            return self.payload.before
        if self._before is _UNSET:
            found = reranker_input_of(self.attributes or {})
            before = found.texts[:_MAX_DOCUMENTS_FROM_ATTRIBUTES] if found is not None else None
            if before and not self.decorated:
                before = [redact_foreign(c) or "" for c in before]
            self._before = before
        return self._before  # type: ignore[no-any-return]

    def reranks_nothing(self) -> bool:
        """A reranker whose output is its input's leading documents in the same order (``_conventions.reorders``)."""
        payload = self.payload
        if payload is not None and payload.contexts is not None:
            return not reorders(payload.before, payload.contexts)
        return reranks_nothing(self.attributes or {})  # the span's lists (its contexts() reads None for these)

    def answer(self) -> str | None:
        """The answer this span carries: from memory, else per convention."""
        if self.payload is not None and self.payload.answer is not None:
            return self.payload.answer
        answer = answer_of(self.attributes or {})
        return answer if self.decorated else redact_foreign(answer)

    def fingerprint(self) -> tuple[str, ...] | None:
        """What identifies the retrieval across the spans describing it: its documents' leading characters."""
        contexts = self.contexts()
        if contexts:
            return tuple(c[:_FINGERPRINT_CHARS] for c in contexts)
        ids = self.document_ids()  # documents without text: the same ids describe the same retrieval
        return tuple(f"\0id:{i}" for i in ids) if ids else None

    def preference(self) -> int:
        """Which span of a group describing one retrieval names and carries it (higher wins)."""
        attributes = self.attributes or {}
        return 2 if self.decorated else 1 if attributes.get(n.GEN_AI_DATA_SOURCE_ID) is not None else 0


# The outcomes and the assembler's own records are plain classes with slots, not dataclasses: building a
# dataclass costs about a millisecond at import, and these are made at every ``import cp_observe`` set-up.
class Ready:
    """A target ready to judge against ``reference_text`` (``reference`` says whether answer or query)."""

    __slots__ = ("agent_name", "item", "reference", "reference_text")

    def __init__(self, item: Item, reference_text: str, reference: str, agent_name: str | None = None) -> None:
        self.item = item
        self.reference_text = reference_text
        self.reference = reference
        self.agent_name = agent_name

    def __repr__(self) -> str:
        return f"Ready({self.item.span_name!r}, reference={self.reference!r})"


class Skip:
    """A sampled target that will not be judged, and why."""

    __slots__ = ("item", "reason")

    def __init__(self, item: Item, reason: str) -> None:
        self.item = item
        self.reason = reason

    def __repr__(self) -> str:
        return f"Skip({self.item.span_name!r}, {self.reason!r})"


class Fold:
    """A span that is not judged on its own: it describes a retrieval counted under another span, or none."""

    __slots__ = ("item",)

    def __init__(self, item: Item) -> None:
        self.item = item

    def __repr__(self) -> str:
        return f"Fold({self.item.span_name!r})"


class _Answer:
    """An answer remembered for the retrievals of its trace that end later (read only once made)."""

    __slots__ = ("agent_name", "attributes", "end_ns", "start_ns", "text")

    def __init__(self, start_ns: int, end_ns: int, text: str, agent_name: str | None, attributes: Any = None) -> None:
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.text = text
        self.agent_name = agent_name
        self.attributes = attributes  # the answering span's segment attributes only (a small dict), or None


class _Seen:
    """A retrieval's document fingerprint, to find the spans that describe the same retrieval."""

    __slots__ = ("fingerprint", "item")

    def __init__(self, fingerprint: tuple[str, ...], item: Item) -> None:
        self.fingerprint = fingerprint
        self.item = item


class _Turn:
    """The retrievals of one trace waiting for its answer, until ``deadline``."""

    __slots__ = ("deadline", "retrievals")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.retrievals: list[Item] = []


class Assembler:
    """Pairs retrievals with their agent's answer; bounded in traces and retrievals per trace."""

    def __init__(self, *, turn_timeout_s: float, max_pending_traces: int,
                 segment_attributes: tuple[str, ...] = (), received: bool = False) -> None:
        self.turn_timeout_s = turn_timeout_s
        self.max_pending_traces = max_pending_traces
        self.received = received  # spans from other processes (serve): a missing parent means a split trace
        # The segments' attribute names: a remembered answer keeps only these of its span's attributes.
        self.segment_attributes = segment_attributes
        self._turns: OrderedDict[int, _Turn] = OrderedDict()
        # Agents that already ended, per trace: a retrieval arriving after its agent (spans reordered on the
        # way to `cp-observe serve`, say) still gets the answer. Bounded like _turns, expired the same way.
        self._answers: OrderedDict[int, tuple[float, list[_Answer]]] = OrderedDict()
        # Retrievals counted per trace, to recognise other spans describing them. Bounded like _answers.
        self._seen: OrderedDict[int, tuple[float, list[_Seen]]] = OrderedDict()
        self.pending = 0  # retrievals waiting for an answer
        # Received spans only: the span ids handed to assembly per trace, to tell whether a retrieval's parent came.
        # Bounded like _answers, expired the same way.
        self._arrived: OrderedDict[int, tuple[float, set[int]]] = OrderedDict()
        # Traces whose retrievals were released at their deadline, until turn_timeout_s * _SPLIT_MEMORY later: a span
        # of one of them arriving now means the trace came in pieces far apart. Bounded by max_pending_traces.
        self._released: OrderedDict[int, float] = OrderedDict()
        self.split_traces = 0  # traces counted split (read by other threads: an int, written here only)
        self.on_split: Callable[[], None] | None = None  # told once per split trace (the metric)

    def add(self, item: Item, now: float) -> list[Ready | Skip | Fold]:
        """Take one ended span; return what became ready (or skipped, or folded) because of it.

        Sets ``item.counts = False`` when the span is not a retrieval of its own (a twin, or no documents).
        """
        out: list[Ready | Skip | Fold] = []
        trace_id = item.span_context.trace_id
        if self._released and self._released.pop(trace_id, None) is not None:
            self.split_traces += 1
            if self.on_split is not None:
                self.on_split()
        if self.received:
            self._arrive(trace_id, item.span_context.span_id, now)
        if item.kind == "retriever" and item.target and self._folded(item, now, out):
            pass
        elif item.kind == "retriever" and item.target:
            answered = None if item.error else self._late_answer(item)
            if item.error:
                out.append(Skip(item, "call_error"))
            elif answered is not None:
                item.enclosing = answered.attributes
                out.append(Ready(item, answered.text, n.REFERENCE_OUTPUT, answered.agent_name))
            else:
                turn = self._turns.get(trace_id)
                if turn is None:
                    turn = self._turns[trace_id] = _Turn(deadline=now + self.turn_timeout_s)
                    while len(self._turns) > self.max_pending_traces:
                        _, oldest = self._turns.popitem(last=False)
                        out.extend(self._against_query(oldest.retrievals))
                if len(turn.retrievals) >= _MAX_RETRIEVALS_PER_TRACE:
                    out.extend(self._against_query([item], count=False))
                else:
                    turn.retrievals.append(item)
                    self.pending += 1
        elif item.kind == "agent":
            out.extend(self._agent_ended(item, now))
        if item.local_root:
            if item.kind == "root" and not item.error:
                out.extend(self._answered_by(item, now))  # a chain or workflow root carrying the answer
            turn = self._turns.pop(trace_id, None)
            if turn is not None:
                for retrieval in turn.retrievals:
                    retrieval.enclosing = item.attributes  # judged against its query: its local root encloses it
                out.extend(self._against_query(turn.retrievals))
        return out

    def _folded(self, item: Item, now: float, out: list[Ready | Skip | Fold]) -> bool:
        """True when ``item`` is not a retrieval of its own; twins are merged (the preferred span is kept)."""
        if item.payload is None and not item.decorated and item.contexts() is None and item.document_ids() is None:
            item.counts = False
            out.append(Fold(item))
            return True
        reranks = item.stage == n.STAGE_RERANK
        if reranks and item.reranks_nothing():
            item.counts = False  # it ranks nothing of its own; its input is scored where it was retrieved
            out.append(Fold(item))
            return True
        fingerprint = item.fingerprint()
        if fingerprint is None:
            return False
        trace_id = item.span_context.trace_id
        entry = self._seen.get(trace_id)
        if entry is None:
            entry = self._seen[trace_id] = (now + self.turn_timeout_s, [])
            while len(self._seen) > self.max_pending_traces:
                self._seen.popitem(last=False)
        for seen in entry[1]:
            twin = seen.item
            if seen.fingerprint != fingerprint or twin.start_ns > item.end_ns or item.start_ns > twin.end_ns:
                continue
            item.counts = False
            turn = self._turns.get(trace_id)
            if turn is not None and twin in turn.retrievals and item.preference() > twin.preference():
                turn.retrievals[turn.retrievals.index(twin)] = item  # the preferred span takes the twin's place
                seen.item = item
                out.append(Fold(twin))
                return True
            out.append(Fold(item))
            return True
        if reranks:
            self._inherit(item, entry[1])
        if len(entry[1]) < _MAX_RETRIEVALS_PER_TRACE:
            entry[1].append(_Seen(fingerprint, item))
        return False

    def _inherit(self, reranker: Item, seen: list[_Seen]) -> None:
        """Name a reranker after the retrieval of its trace whose documents are its input (one list the other's head).

        The reranker also keeps that retrieval's segment attributes: a variant set on the retrieval span labels
        the rerank evaluation too (``_emission/_segments.py`` says where each source ranks).

        Spans may record fewer documents than were retrieved, so one list being the other's leading part matches.
        """
        before = reranker.before()
        if not before:
            return
        wanted = tuple(c[:_FINGERPRINT_CHARS] for c in before)
        for entry in seen:
            if entry.item.stage != n.STAGE_RETRIEVAL:
                continue
            shorter = min(len(wanted), len(entry.fingerprint))
            if wanted[:shorter] == entry.fingerprint[:shorter]:
                reranker._inherited = entry.item.name
                reranker._name = None
                attributes = entry.item.attributes
                if self.segment_attributes and attributes:
                    reranker.reranked = {k: attributes[k] for k in self.segment_attributes if k in attributes}
                return

    def _arrive(self, trace_id: int, span_id: int, now: float) -> None:
        """Note a span of a received trace; kept until turn_timeout_s after the trace's latest span (so at least as
        long as any turn of the trace waits), the entries in order of that deadline."""
        entry = self._arrived.pop(trace_id, None)
        ids = entry[1] if entry is not None else set()
        if len(ids) < 4 * _MAX_RETRIEVALS_PER_TRACE:
            ids.add(span_id)
        self._arrived[trace_id] = (now + self.turn_timeout_s, ids)
        while len(self._arrived) > self.max_pending_traces:
            self._arrived.popitem(last=False)

    def expire(self, now: float) -> list[Ready | Skip | Fold]:
        """Release the retrievals whose agent did not answer in time: judged against their queries, or (received
        spans whose parent never arrived) skipped as ``parent_missing``."""
        while self._answers and next(iter(self._answers.values()))[0] <= now:
            self._answers.popitem(last=False)
        while self._seen and next(iter(self._seen.values()))[0] <= now:
            self._seen.popitem(last=False)
        while self._released and next(iter(self._released.values())) <= now:
            self._released.popitem(last=False)
        out: list[Ready | Skip | Fold] = []
        while self._turns:
            trace_id, turn = next(iter(self._turns.items()))
            if turn.deadline > now:
                break
            del self._turns[trace_id]
            self._released[trace_id] = now + _SPLIT_MEMORY * self.turn_timeout_s
            while len(self._released) > self.max_pending_traces:
                self._released.popitem(last=False)
            arrived = self._arrived.get(trace_id)
            for retrieval in turn.retrievals:
                if self.received and retrieval.parent_id and (arrived is None or retrieval.parent_id not in arrived[1]):
                    self.pending -= 1
                    out.append(Skip(retrieval, "parent_missing"))
                else:
                    out.extend(self._against_query([retrieval]))
        # After the turns: a trace's arrivals are kept at least as long as its turn waits (same deadline, set first).
        while self._arrived and next(iter(self._arrived.values()))[0] <= now:
            self._arrived.popitem(last=False)
        return out

    def flush(self) -> list[Ready | Skip | Fold]:
        """Release every waiting retrieval, judged against its query (flush and shutdown)."""
        out: list[Ready | Skip | Fold] = []
        for turn in self._turns.values():
            out.extend(self._against_query(turn.retrievals))
        self._turns.clear()
        return out

    def _late_answer(self, item: Item) -> _Answer | None:
        entry = self._answers.get(item.span_context.trace_id)
        if entry is None:
            return None
        inside = [a for a in entry[1] if a.start_ns <= item.start_ns and item.end_ns <= a.end_ns]
        return min(inside, key=lambda a: a.end_ns - a.start_ns) if inside else None  # the innermost agent

    def _remember(self, agent: Item, answer: str, agent_name: str | None, now: float) -> None:
        trace_id = agent.span_context.trace_id
        entry = self._answers.get(trace_id)
        if entry is None:
            entry = self._answers[trace_id] = (now + self.turn_timeout_s, [])
            while len(self._answers) > self.max_pending_traces:
                self._answers.popitem(last=False)
        if len(entry[1]) < _MAX_RETRIEVALS_PER_TRACE:
            # The judge sees at most Budget.reference characters of it; keep no more than that in memory.
            kept = None
            if self.segment_attributes and agent.attributes:
                kept = {k: agent.attributes[k] for k in self.segment_attributes if k in agent.attributes}
            entry[1].append(_Answer(agent.start_ns, agent.end_ns, answer[:_MAX_REMEMBERED_ANSWER], agent_name, kept))

    def _answered_by(self, carrier: Item, now: float) -> list[Ready | Skip | Fold]:
        """Give ``carrier``'s answer to the waiting retrievals it encloses (it is the nearest: inner spans end first).

        A span without an answer claims nothing: its retrievals wait for an enclosing span that has one.
        """
        answer = None if carrier.error else carrier.answer()
        if not answer or not answer.strip():
            return []
        value = carrier.attributes.get(n.GEN_AI_AGENT_NAME) if carrier.attributes else None
        agent_name = str(value) if value is not None else None
        self._remember(carrier, answer, agent_name, now)
        trace_id = carrier.span_context.trace_id
        turn = self._turns.get(trace_id)
        if turn is None:
            return []
        inside = [r for r in turn.retrievals if carrier.start_ns <= r.start_ns and r.end_ns <= carrier.end_ns]
        if not inside:
            return []
        turn.retrievals = [r for r in turn.retrievals if r not in inside]
        if not turn.retrievals:
            del self._turns[trace_id]
        self.pending -= len(inside)
        for retrieval in inside:
            retrieval.enclosing = carrier.attributes
        return [Ready(r, answer, n.REFERENCE_OUTPUT, agent_name) for r in inside]

    def _agent_ended(self, agent: Item, now: float) -> list[Ready | Skip | Fold]:
        out: list[Ready | Skip | Fold] = list(self._answered_by(agent, now))
        if agent.target:
            answer = None if agent.error else agent.answer()
            if agent.error:
                out.append(Skip(agent, "call_error"))
            elif answer and answer.strip():
                out.append(Ready(agent, answer, n.REFERENCE_OUTPUT, agent.name))
            else:
                out.extend(self._against_query([agent], count=False))
        return out

    def _against_query(self, items: list[Item], *, count: bool = True) -> list[Ready | Skip | Fold]:
        out: list[Ready | Skip | Fold] = []
        for item in items:
            if count:
                self.pending -= 1
            query = item.query()
            if query is None or not query.strip():
                out.append(Skip(item, "no_reference"))
            else:
                out.append(Ready(item, query, n.REFERENCE_QUERY))
        return out
