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
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, NamedTuple

from cp_observe import _names as n
from cp_observe._processing._record import FINGERPRINT_CHARS, Record

__all__ = ["Assembler", "Fold", "Ready", "Skip"]

_MAX_RETRIEVALS_PER_TRACE = 64
_MAX_REMEMBERED_ANSWER = 4_000
_SPLIT_MEMORY = 10  # a released trace is remembered this many turn timeouts, to recognise its late spans

#: A target ready to judge: its record, completed (reference, agent, segments).
Ready = Record
#: A segment resolver: (span attributes, enclosing span's, reranked retrieval's) -> (label, value) per segment.
Segments = Callable[[Mapping[str, Any] | None, Mapping[str, Any] | None, Mapping[str, Any] | None],
                    tuple[tuple[str, str], ...]]


class Skip(NamedTuple):
    """A sampled target that will not be judged, and why (its record completed, for its labels)."""

    record: Record
    reason: str


class Fold(NamedTuple):
    """A span that is not judged on its own: it describes a retrieval counted under another span, or none."""

    record: Record


class _Answer(NamedTuple):
    """An answer remembered for the retrievals of its trace that end later."""

    start_ns: int
    end_ns: int
    text: str
    agent_name: str | None
    attributes: Any = None  # the answering span's segment attributes only (a small dict), or None


class _Seen:
    """A retrieval's document fingerprint, to find the spans that describe the same retrieval."""

    __slots__ = ("fingerprint", "record")

    def __init__(self, fingerprint: tuple[str, ...], record: Record) -> None:
        self.fingerprint = fingerprint
        self.record = record


class _Turn:
    """The retrievals of one trace waiting for its answer, until ``deadline``."""

    __slots__ = ("deadline", "retrievals")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.retrievals: list[Record] = []


Out = list[Record | Skip | Fold]


class Assembler:
    """Pairs retrievals with their agent's answer; bounded in traces and retrievals per trace."""

    def __init__(self, *, turn_timeout_s: float, max_pending_traces: int, segments: Segments | None = None,
                 segment_attributes: tuple[str, ...] = (), received: bool = False) -> None:
        self.turn_timeout_s = turn_timeout_s
        self.max_pending_traces = max_pending_traces
        self.received = received  # spans from other processes (serve): a missing parent means a split trace
        self._segments = segments
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

    def complete(self, record: Record, reference_text: str = "", reference: str = "",
                 agent_name: str | None = None, enclosing: Mapping[str, Any] | None = None) -> Record:
        """``record`` completed: its reference, agent and segment values (own span, reranked retrieval, enclosing)."""
        segments = self._segments(record.attributes, enclosing, record.reranked) if self._segments else ()
        return replace(record, reference_text=reference_text, reference=reference, agent_name=agent_name,
                       segments=segments)

    def add(self, record: Record, now: float) -> tuple[bool, Out]:
        """Take one record; return whether it counts and what became ready (or skipped, or folded) because of it.

        It does not count when it is not a retrieval of its own: a twin of one counted, or one without documents.
        """
        out: Out = []
        counts = True
        trace_id = record.span_context.trace_id
        if self._released and self._released.pop(trace_id, None) is not None:
            self.split_traces += 1
            if self.on_split is not None:
                self.on_split()
        if self.received:
            self._arrive(trace_id, record.span_context.span_id, now)
        if record.kind == "retriever" and record.target:
            folded, record = self._folded(record, now, out)
            counts = not folded
            if folded:
                pass
            elif record.error:
                out.append(Skip(self.complete(record), "call_error"))
            elif (answered := self._late_answer(record)) is not None:
                out.append(self.complete(record, answered.text, n.REFERENCE_OUTPUT, answered.agent_name,
                                         answered.attributes))
            else:
                turn = self._turns.get(trace_id)
                if turn is None:
                    turn = self._turns[trace_id] = _Turn(deadline=now + self.turn_timeout_s)
                    while len(self._turns) > self.max_pending_traces:
                        _, oldest = self._turns.popitem(last=False)
                        out.extend(self._against_query(oldest.retrievals))
                if len(turn.retrievals) >= _MAX_RETRIEVALS_PER_TRACE:
                    out.extend(self._against_query([record], count=False))
                else:
                    turn.retrievals.append(record)
                    self.pending += 1
        elif record.kind == "agent":
            out.extend(self._agent_ended(record, now))
        if record.local_root:
            if record.kind == "root" and not record.error:
                out.extend(self._answered_by(record, now))  # a chain or workflow root carrying the answer
            turn = self._turns.pop(trace_id, None)
            if turn is not None:  # judged against their queries: the local root encloses them
                out.extend(self._against_query(turn.retrievals, enclosing=record.attributes))
        return counts, out

    def _folded(self, record: Record, now: float, out: Out) -> tuple[bool, Record]:
        """Whether ``record`` is not a retrieval of its own, and the record to go on with.

        Twins are merged (the preferred span kept); a reranker goes on named after the retrieval it reranks.
        """
        if not record.decorated and record.contexts is None and record.document_ids is None:
            out.append(Fold(record))
            return True, record
        reranks = record.stage == n.STAGE_RERANK
        if reranks and record.reranks_nothing:
            out.append(Fold(record))  # it ranks nothing of its own; its input is scored where it was retrieved
            return True, record
        fingerprint = record.fingerprint()
        if fingerprint is None:
            return False, record
        trace_id = record.span_context.trace_id
        entry = self._seen.get(trace_id)
        if entry is None:
            entry = self._seen[trace_id] = (now + self.turn_timeout_s, [])
            while len(self._seen) > self.max_pending_traces:
                self._seen.popitem(last=False)
        for seen in entry[1]:
            twin = seen.record
            if seen.fingerprint != fingerprint or twin.start_ns > record.end_ns or record.start_ns > twin.end_ns:
                continue
            turn = self._turns.get(trace_id)
            if turn is not None and twin in turn.retrievals and record.preference() > twin.preference():
                turn.retrievals[turn.retrievals.index(twin)] = record  # the preferred span takes the twin's place
                seen.record = record
                out.append(Fold(twin))
                return True, record
            out.append(Fold(record))
            return True, record
        if reranks:
            record = self._inherit(record, entry[1])
        if len(entry[1]) < _MAX_RETRIEVALS_PER_TRACE:
            entry[1].append(_Seen(fingerprint, record))
        return False, record

    def _inherit(self, reranker: Record, seen: list[_Seen]) -> Record:
        """Name a reranker after the retrieval of its trace whose documents are its input (one list the other's head).

        The reranker also keeps that retrieval's segment attributes: a variant set on the retrieval span labels
        the rerank evaluation too (``_emission/_segments.py`` says where each source ranks).

        Spans may record fewer documents than were retrieved, so one list being the other's leading part matches.
        """
        if not reranker.before:
            return reranker
        wanted = tuple(c[:FINGERPRINT_CHARS] for c in reranker.before)
        for entry in seen:
            if entry.record.stage != n.STAGE_RETRIEVAL:
                continue
            shorter = min(len(wanted), len(entry.fingerprint))
            if wanted[:shorter] == entry.fingerprint[:shorter]:
                attributes = entry.record.attributes
                reranked = ({k: attributes[k] for k in self.segment_attributes if k in attributes}
                            if self.segment_attributes else None)
                return replace(reranker, name=reranker.name if reranker.named else entry.record.name,
                               reranked=reranked)
        return reranker

    def _arrive(self, trace_id: int, span_id: int, now: float) -> None:
        """Note a span of a received trace; kept until turn_timeout_s after the trace's latest span (so at least as
        long as any turn of the trace waits), the entries in order of that deadline.
        """
        entry = self._arrived.pop(trace_id, None)
        ids = entry[1] if entry is not None else set()
        if len(ids) < 4 * _MAX_RETRIEVALS_PER_TRACE:
            ids.add(span_id)
        self._arrived[trace_id] = (now + self.turn_timeout_s, ids)
        while len(self._arrived) > self.max_pending_traces:
            self._arrived.popitem(last=False)

    def expire(self, now: float) -> Out:
        """Release the retrievals whose agent did not answer in time: judged against their queries, or (received
        spans whose parent never arrived) skipped as ``parent_missing``.
        """
        while self._answers and next(iter(self._answers.values()))[0] <= now:
            self._answers.popitem(last=False)
        while self._seen and next(iter(self._seen.values()))[0] <= now:
            self._seen.popitem(last=False)
        while self._released and next(iter(self._released.values())) <= now:
            self._released.popitem(last=False)
        out: Out = []
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
                    out.append(Skip(self.complete(retrieval), "parent_missing"))
                else:
                    out.extend(self._against_query([retrieval]))
        # After the turns: a trace's arrivals are kept at least as long as its turn waits (same deadline, set first).
        while self._arrived and next(iter(self._arrived.values()))[0] <= now:
            self._arrived.popitem(last=False)
        return out

    def flush(self) -> Out:
        """Release every waiting retrieval, judged against its query (flush and shutdown)."""
        out: Out = []
        for turn in self._turns.values():
            out.extend(self._against_query(turn.retrievals))
        self._turns.clear()
        return out

    def _late_answer(self, record: Record) -> _Answer | None:
        entry = self._answers.get(record.span_context.trace_id)
        if entry is None:
            return None
        inside = [a for a in entry[1] if a.start_ns <= record.start_ns and record.end_ns <= a.end_ns]
        return min(inside, key=lambda a: a.end_ns - a.start_ns) if inside else None  # the innermost agent

    def _remember(self, carrier: Record, answer: str, agent_name: str | None, now: float) -> Mapping[str, Any] | None:
        """Keep ``carrier``'s answer for retrievals of its trace that end later; its segment attributes, returned."""
        kept = None
        if self.segment_attributes:
            kept = {k: carrier.attributes[k] for k in self.segment_attributes if k in carrier.attributes}
        trace_id = carrier.span_context.trace_id
        entry = self._answers.get(trace_id)
        if entry is None:
            entry = self._answers[trace_id] = (now + self.turn_timeout_s, [])
            while len(self._answers) > self.max_pending_traces:
                self._answers.popitem(last=False)
        if len(entry[1]) < _MAX_RETRIEVALS_PER_TRACE:
            # The judge sees at most Budget.reference characters of it; keep no more than that in memory.
            entry[1].append(_Answer(carrier.start_ns, carrier.end_ns, answer[:_MAX_REMEMBERED_ANSWER], agent_name,
                                    kept))
        return kept

    def _answered_by(self, carrier: Record, now: float) -> Out:
        """Give ``carrier``'s answer to the waiting retrievals it encloses (it is the nearest: inner spans end first).

        A span without an answer claims nothing: its retrievals wait for an enclosing span that has one.
        """
        answer = carrier.answer
        if not answer or not answer.strip():
            return []
        value = carrier.attributes.get(n.GEN_AI_AGENT_NAME)
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
        return [self.complete(r, answer, n.REFERENCE_OUTPUT, agent_name, carrier.attributes) for r in inside]

    def _agent_ended(self, agent: Record, now: float) -> Out:
        out: Out = list(self._answered_by(agent, now))
        if agent.target:
            answer = agent.answer
            if agent.error:
                out.append(Skip(self.complete(agent), "call_error"))
            elif answer and answer.strip():
                out.append(self.complete(agent, answer, n.REFERENCE_OUTPUT, agent.name))
            else:
                out.extend(self._against_query([agent], count=False))
        return out

    def _against_query(self, records: list[Record], *, count: bool = True,
                       enclosing: Mapping[str, Any] | None = None) -> Out:
        out: Out = []
        for record in records:
            if count:
                self.pending -= 1
            query = record.query
            if query is None or not query.strip():
                out.append(Skip(self.complete(record, enclosing=enclosing), "no_reference"))
            else:
                out.append(self.complete(record, query, n.REFERENCE_QUERY, enclosing=enclosing))
        return out
