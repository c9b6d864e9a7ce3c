"""Turn assembly: decide what each sampled retrieval is judged against.

A retriever span inside an agent span is judged against the agent's answer, so retrievals wait (per
trace, bounded, with a deadline) for an agent span of their trace that encloses them in time. A
retrieval with no agent is judged against its own query when its local root span ends or its deadline
passes. An agent decorated with a ``context_extractor`` is itself a target, judged against its answer.

Only the evaluator thread touches an ``Assembler``; it needs no lock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import SpanContext

from cp_observe import _names as n
from cp_observe._runtime import Payload

__all__ = ["Assembler", "Item", "Ready", "Skip"]

_MAX_RETRIEVALS_PER_TRACE = 64
_MAX_DOCUMENTS_FROM_ATTRIBUTES = 1000
_MAX_REMEMBERED_ANSWER = 4_000


@dataclass(slots=True)
class Item:
    """One ended span handed over by ``on_end``: a target, an agent's answer, or a local root's end."""

    kind: str  # "retriever", "agent" or "root"
    span_context: SpanContext
    start_ns: int
    end_ns: int
    error: bool
    local_root: bool
    attributes: Any  # the span's immutable attribute mapping
    payload: Payload | None
    target: bool
    sampling_reason: str

    @property
    def name(self) -> str:
        """Data source id of a retriever, agent name of an agent."""
        key = n.GEN_AI_DATA_SOURCE_ID if self.kind == "retriever" else n.GEN_AI_AGENT_NAME
        value = self.attributes.get(key)
        return str(value) if value is not None else "unknown"

    def query(self) -> str | None:
        """The query: from memory when sampled here, else from the span's attributes."""
        if self.payload is not None:
            return self.payload.query
        value = self.attributes.get(n.GEN_AI_RETRIEVAL_QUERY_TEXT) or self.attributes.get(n.INPUT_VALUE)
        return str(value) if value is not None else None

    def contexts(self) -> list[str] | None:
        """The contexts in rank order: from memory, else from ``retrieval.documents.*`` attributes."""
        if self.payload is not None and self.payload.contexts is not None:
            return self.payload.contexts
        out: list[str] = []
        for i in range(_MAX_DOCUMENTS_FROM_ATTRIBUTES):
            value = self.attributes.get(n.document_attribute(i, "content"))
            if value is None:
                break
            out.append(str(value))
        if not out and self.attributes.get(n.CP_CONTEXT_COUNT) != 0:
            return None
        return out

    def answer(self) -> str | None:
        """An agent's answer: from memory, else ``output.value``."""
        if self.payload is not None and self.payload.answer is not None:
            return self.payload.answer
        from cp_observe._answer import answer_from_attribute  # the one answer rule (issue 10)

        return answer_from_attribute(
            self.attributes.get(n.OUTPUT_VALUE), self.attributes.get(n.OUTPUT_MIME_TYPE), _MAX_REMEMBERED_ANSWER * 25
        )


@dataclass(slots=True)
class Ready:
    """A target ready to judge against ``reference_text`` (``reference`` says whether answer or query)."""

    item: Item
    reference_text: str
    reference: str
    agent_name: str | None = None


@dataclass(slots=True)
class Skip:
    """A sampled target that will not be judged, and why."""

    item: Item
    reason: str


@dataclass(frozen=True, slots=True)
class _Answer:
    start_ns: int
    end_ns: int
    text: str
    agent_name: str


@dataclass(slots=True)
class _Turn:
    deadline: float
    retrievals: list[Item] = field(default_factory=list)


class Assembler:
    """Pairs retrievals with their agent's answer; bounded in traces and retrievals per trace."""

    def __init__(self, *, turn_timeout_s: float, max_pending_traces: int) -> None:
        self.turn_timeout_s = turn_timeout_s
        self.max_pending_traces = max_pending_traces
        self._turns: OrderedDict[int, _Turn] = OrderedDict()
        # Agents that already ended, per trace: a retrieval arriving after its agent (spans reordered on the
        # way to `cp-observe serve`, say) still gets the answer. Bounded like _turns, expired the same way.
        self._answers: OrderedDict[int, tuple[float, list[_Answer]]] = OrderedDict()
        self.pending = 0  # retrievals waiting for an answer

    def add(self, item: Item, now: float) -> list[Ready | Skip]:
        """Take one ended span; return what became ready (or skipped) because of it."""
        out: list[Ready | Skip] = []
        trace_id = item.span_context.trace_id
        if item.kind == "retriever" and item.target:
            answered = None if item.error else self._late_answer(item)
            if item.error:
                out.append(Skip(item, "call_error"))
            elif answered is not None:
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
            turn = self._turns.pop(trace_id, None)
            if turn is not None:
                out.extend(self._against_query(turn.retrievals))
        return out

    def expire(self, now: float) -> list[Ready | Skip]:
        """Judge against their queries the retrievals whose agent did not answer in time."""
        while self._answers and next(iter(self._answers.values()))[0] <= now:
            self._answers.popitem(last=False)
        out: list[Ready | Skip] = []
        while self._turns:
            trace_id, turn = next(iter(self._turns.items()))
            if turn.deadline > now:
                break
            del self._turns[trace_id]
            out.extend(self._against_query(turn.retrievals))
        return out

    def flush(self) -> list[Ready | Skip]:
        """Release every waiting retrieval, judged against its query (flush and shutdown)."""
        out: list[Ready | Skip] = []
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

    def _remember(self, agent: Item, answer: str, now: float) -> None:
        trace_id = agent.span_context.trace_id
        entry = self._answers.get(trace_id)
        if entry is None:
            entry = self._answers[trace_id] = (now + self.turn_timeout_s, [])
            while len(self._answers) > self.max_pending_traces:
                self._answers.popitem(last=False)
        if len(entry[1]) < _MAX_RETRIEVALS_PER_TRACE:
            # The judge sees at most Budget.reference characters of it; keep no more than that in memory.
            entry[1].append(_Answer(agent.start_ns, agent.end_ns, answer[:_MAX_REMEMBERED_ANSWER], agent.name))

    def _agent_ended(self, agent: Item, now: float) -> list[Ready | Skip]:
        out: list[Ready | Skip] = []
        answer = None if agent.error else agent.answer()
        agent_name = agent.name
        if answer and answer.strip():
            self._remember(agent, answer, now)
        turn = self._turns.get(agent.span_context.trace_id)
        if turn is not None:
            inside = [r for r in turn.retrievals if agent.start_ns <= r.start_ns and r.end_ns <= agent.end_ns]
            if inside:
                turn.retrievals = [r for r in turn.retrievals if r not in inside]
                if answer and answer.strip():
                    self.pending -= len(inside)
                    out.extend(Ready(r, answer, n.REFERENCE_OUTPUT, agent_name) for r in inside)
                else:
                    out.extend(self._against_query(inside))
            if not turn.retrievals:
                del self._turns[agent.span_context.trace_id]
        if agent.target:
            if agent.error:
                out.append(Skip(agent, "call_error"))
            elif answer and answer.strip():
                out.append(Ready(agent, answer, n.REFERENCE_OUTPUT, agent_name))
            else:
                out.extend(self._against_query([agent], count=False))
        return out

    def _against_query(self, items: list[Item], *, count: bool = True) -> list[Ready | Skip]:
        out: list[Ready | Skip] = []
        for item in items:
            if count:
                self.pending -= 1
            query = item.query()
            if query is None or not query.strip():
                out.append(Skip(item, "no_reference"))
            else:
                out.append(Ready(item, query, n.REFERENCE_QUERY))
        return out
