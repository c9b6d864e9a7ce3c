"""Turn assembly on its own: which reference each retrieval is judged against."""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import SpanContext

from cp_observe import _names as n
from cp_observe._capture._payloads import Payload
from cp_observe._processing._assembly import Assembler, Fold, Ready, Skip
from cp_observe._processing._record import Ended, decode


def _item(kind: str, span_id: int, start: int, end: int, *, trace_id: int = 1, root: bool = False,
          answer: str | None = None, error: bool = False) -> Ended:
    attributes: dict[str, Any] = {n.GEN_AI_DATA_SOURCE_ID: "kb", n.GEN_AI_AGENT_NAME: "bot"}
    payload = Payload(query=f"query {span_id}", contexts=["c"], answer=answer)
    return Ended(kind=kind, span_context=SpanContext(trace_id, span_id, False), start_ns=start, end_ns=end,
                 error=error, local_root=root, attributes=attributes, payload=payload,
                 target=kind == "retriever", sampling_reason="ratio")


def _add(assembler: Assembler, ended: Ended, now: float) -> list[Ready | Skip | Fold]:
    """Decode ``ended`` as the evaluator does and hand it to ``assembler``; what became ready, skipped or folded."""
    return assembler.add(decode(ended), now)[1]


def _refs(outcomes: list[Ready | Skip | Fold]) -> list[tuple[int, str]]:
    return [(o.record.span_context.span_id, o.reason) if isinstance(o, Skip) else (o.span_context.span_id,
            o.reference_text) for o in outcomes if not isinstance(o, Fold)]


def test_retrieval_waits_for_its_agent() -> None:
    """A retrieval inside an agent is ready when the agent ends, judged against the answer."""
    assembler = Assembler(turn_timeout_s=60, max_pending_traces=10)
    assert _add(assembler, _item("retriever", 2, 10, 20), 0.0) == []
    assert assembler.pending == 1
    out = _add(assembler, _item("agent", 1, 5, 30, root=True, answer="the answer"), 0.0)
    assert _refs(out) == [(2, "the answer")]
    assert assembler.pending == 0


def test_retrieval_outside_the_agent_window_waits_for_the_root() -> None:
    """A retrieval not enclosed by the agent's time is judged on its query when the local root ends."""
    assembler = Assembler(turn_timeout_s=60, max_pending_traces=10)
    _add(assembler, _item("retriever", 2, 40, 50), 0.0)
    assert _add(assembler, _item("agent", 1, 5, 30, answer="late"), 0.0) == []
    out = _add(assembler, _item("root", 9, 0, 60, root=True), 0.0)
    assert _refs(out) == [(2, "query 2")]


def test_late_retrieval_gets_the_earlier_agent_answer() -> None:
    """Spans reordered on the wire: a retrieval arriving after its agent still gets the agent's answer."""
    assembler = Assembler(turn_timeout_s=60, max_pending_traces=10)
    assert _add(assembler, _item("agent", 1, 5, 30, root=True, answer="early answer"), 0.0) == []
    out = _add(assembler, _item("retriever", 2, 10, 20), 1.0)
    assert _refs(out) == [(2, "early answer")]


def test_deadline_judges_on_the_query_and_forgets_answers() -> None:
    """Past the turn timeout waiting retrievals are judged on their query, and remembered answers expire."""
    assembler = Assembler(turn_timeout_s=5, max_pending_traces=10)
    _add(assembler, _item("retriever", 2, 10, 20), 0.0)
    assert _refs(assembler.expire(6.0)) == [(2, "query 2")]
    _add(assembler, _item("agent", 3, 5, 30, trace_id=7, answer="a"), 10.0)
    assembler.expire(16.0)
    out = _add(assembler, _item("retriever", 4, 10, 20, trace_id=7, root=True), 17.0)
    assert _refs(out) == [(4, "query 4")]


def test_pending_traces_are_bounded() -> None:
    """Beyond max_pending_traces the oldest trace's retrievals are released on their query, not lost."""
    assembler = Assembler(turn_timeout_s=60, max_pending_traces=2)
    released: list[Ready | Skip | Fold] = []
    for trace_id in range(1, 5):
        released += _add(assembler, _item("retriever", 10 + trace_id, 1, 2, trace_id=trace_id), 0.0)
    assert _refs(released) == [(11, "query 11"), (12, "query 12")]
    assert assembler.pending == 2


def test_failed_retrieval_is_skipped() -> None:
    """A retrieval whose call raised is skipped with call_error."""
    assembler = Assembler(turn_timeout_s=60, max_pending_traces=10)
    assert _refs(_add(assembler, _item("retriever", 2, 1, 2, error=True), 0.0)) == [(2, "call_error")]


def _child(span_id: int, parent_id: int, start: int, end: int, **kwargs: Any) -> Ended:
    return _item("retriever", span_id, start, end, **kwargs)._replace(parent_id=parent_id)


def test_received_retrieval_whose_parent_never_arrived_is_skipped_as_parent_missing() -> None:
    """Received spans: at the deadline, a retrieval whose parent never came is skipped, not judged on its query."""
    assembler = Assembler(turn_timeout_s=5, max_pending_traces=10, received=True)
    _add(assembler, _child(2, 1, 10, 20), 0.0)
    assert _refs(assembler.expire(6.0)) == [(2, "parent_missing")]
    assert assembler.pending == 0


def test_received_retrieval_whose_parent_arrived_without_an_answer_is_judged_on_its_query() -> None:
    """Received spans: the parent came (no answer, no root in time), so the retrieval is judged on its query."""
    assembler = Assembler(turn_timeout_s=5, max_pending_traces=10, received=True)
    _add(assembler, _child(2, 1, 10, 20), 0.0)
    assert _add(assembler, _item("agent", 1, 5, 30), 1.0) == []  # an agent span that carries no answer
    assert _refs(assembler.expire(6.0)) == [(2, "query 2")]


def test_in_process_a_long_turn_is_still_judged_on_its_query() -> None:
    """In process a parent always ends later in the same process: past the deadline the query is the reference."""
    assembler = Assembler(turn_timeout_s=5, max_pending_traces=10)
    _add(assembler, _child(2, 1, 10, 20), 0.0)
    assert _refs(assembler.expire(6.0)) == [(2, "query 2")]


def test_a_span_arriving_after_its_trace_was_released_counts_the_trace_split_once() -> None:
    """A trace whose spans come more than turn_timeout_s apart is counted split, once, and told to on_split."""
    assembler = Assembler(turn_timeout_s=5, max_pending_traces=10, received=True)
    told: list[int] = []
    assembler.on_split = lambda: told.append(1)
    _add(assembler, _child(2, 1, 10, 20), 0.0)
    _add(assembler, _child(3, 1, 10, 20, trace_id=8), 0.0)
    assembler.expire(6.0)
    _add(assembler, _item("agent", 1, 5, 30, answer="late"), 30.0)  # the rest of trace 1, 30 s later
    _add(assembler, _item("root", 9, 0, 40, root=True), 30.0)
    assert assembler.split_traces == 1 and told == [1]
    assembler.expire(100.0)  # trace 8's memory ends after ten turn timeouts: a span now is a new trace
    _add(assembler, _item("agent", 4, 5, 30, trace_id=8, answer="much later"), 100.0)
    assert assembler.split_traces == 1


def test_a_trace_arriving_in_one_piece_is_not_split() -> None:
    """Spans of a trace within turn_timeout_s of each other: nothing is skipped or counted split."""
    assembler = Assembler(turn_timeout_s=5, max_pending_traces=10, received=True)
    _add(assembler, _child(2, 1, 10, 20), 0.0)
    out = _add(assembler, _item("agent", 1, 5, 30, root=True, answer="the answer"), 4.0)
    assert _refs(out) == [(2, "the answer")] and assembler.split_traces == 0
    assert assembler.expire(100.0) == []
