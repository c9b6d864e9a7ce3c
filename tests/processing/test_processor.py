"""The production hook end to end, in memory: decorators, processor, evaluation span, event and metrics."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import cp_observe
from cp_observe import _names as n
from cp_observe.testing import FakeJudge, JudgeCall
from tests.conftest import Otel
from tests.turn_support import TURN_ANSWER, TURN_DOCS, TURN_QUERY, TURN_VERDICTS, Turn, make_turn

DOCS = list(TURN_DOCS)
ANSWER = TURN_ANSWER


def _evaluations(otel: Otel) -> list[Any]:
    return otel.by_name(n.EVALUATION_SPAN_NAME)


def test_retriever_inside_agent_is_scored_against_the_answer(  # noqa: PLR0915 - one turn, every signal checked
    otel: Otel, cp_observe_judge: FakeJudge, turn: Turn
) -> None:
    """A retrieval inside an agent is judged against the agent's answer and emits span, event and metrics."""
    processor = otel.processor(cp_observe_judge)
    assert turn.run() == ANSWER
    assert processor.force_flush(10_000)

    retrieval = otel.by_name("retrieval kb")[0]
    agent = otel.by_name("invoke_agent helper")[0]
    attrs = retrieval.attributes
    assert attrs[n.GEN_AI_OPERATION_NAME] == "retrieval"
    assert attrs[n.GEN_AI_DATA_SOURCE_ID] == "kb"
    assert attrs[n.OPENINFERENCE_SPAN_KIND] == "RETRIEVER"
    assert attrs[n.INPUT_VALUE] == TURN_QUERY
    assert attrs[n.GEN_AI_RETRIEVAL_QUERY_TEXT] == TURN_QUERY
    assert attrs[n.CP_SAMPLED] is True
    assert [attrs[n.document_attribute(i, "content")] for i in range(3)] == DOCS
    assert agent.attributes[n.OUTPUT_VALUE] == ANSWER
    assert agent.attributes[n.GEN_AI_AGENT_NAME] == "helper"
    assert retrieval.parent.span_id == agent.context.span_id

    [evaluation] = _evaluations(otel)
    e = evaluation.attributes
    assert evaluation.parent.span_id == retrieval.context.span_id
    assert evaluation.context.trace_id == retrieval.context.trace_id
    assert [link.context.span_id for link in evaluation.links] == [retrieval.context.span_id]
    assert e[n.OPENINFERENCE_SPAN_KIND] == "EVALUATOR"
    assert e[n.GEN_AI_EVALUATION_NAME] == "context_precision"
    assert e[n.CP_VERDICTS] == TURN_VERDICTS
    assert e[n.GEN_AI_EVALUATION_SCORE_VALUE] == 0.83
    assert e[n.CP_AVERAGE_PRECISION] == pytest.approx(5 / 6)
    assert e[n.GEN_AI_EVALUATION_SCORE_LABEL] == "pass"
    assert e[n.CP_REFERENCE] == "output"
    assert e[n.CP_JUDGE_MODEL] == "fake-judge"
    assert e[n.GEN_AI_DATA_SOURCE_ID] == "kb"
    assert e[n.GEN_AI_AGENT_NAME] == "helper"
    assert e[n.OI_EVALUATION_SCORE] == 0.83
    assert e[n.OI_EVALUATION_LABEL] == "pass"
    assert "0.83" in e[n.GEN_AI_EVALUATION_EXPLANATION]
    assert e[n.CP_REASONS] == ("fake judge",) * 3
    assert cp_observe_judge.calls == [JudgeCall(TURN_QUERY, ANSWER, TURN_DOCS)]

    [log] = otel.logs.get_finished_logs()
    record = log.log_record
    assert record.event_name == "gen_ai.evaluation.result"
    assert record.trace_id == retrieval.context.trace_id
    assert record.span_id == retrieval.context.span_id
    assert record.attributes[n.GEN_AI_EVALUATION_SCORE_VALUE] == 0.83

    [score] = otel.metric_points(n.METRIC_SCORE)
    assert score.count == 1
    assert score.sum == pytest.approx(5 / 6)
    assert dict(score.attributes) == {
        n.GEN_AI_DATA_SOURCE_ID: "kb",
        n.GEN_AI_EVALUATION_NAME: "context_precision",
        n.GEN_AI_AGENT_NAME: "helper",
        n.CP_JUDGE_MODEL: "fake-judge",
        n.CP_JUDGE_PROMPT_VERSION: "none",
        n.CP_JUDGE_KIND: n.JUDGE_KIND_CUSTOM,
        n.STAGE: n.STAGE_RETRIEVAL,
    }
    points = otel.metric_points(n.METRIC_EVALUATIONS)
    outcomes = {(p.attributes[n.OUTCOME], p.attributes[n.REASON]): p.value for p in points}
    assert outcomes == {("scored", "ok"): 1}
    stats = processor.stats()
    assert (stats["sampled"], stats["scored"], stats["pending"]) == (1, 1, 0)


def test_retriever_alone_is_scored_against_its_query(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Without an agent, the retrieval is judged against its own query when its root ends."""
    processor = otel.processor(cp_observe_judge)

    @cp_observe.retriever
    def lookup(question: str) -> list[str]:
        return ["Bananas are yellow.", "Capital cities of Europe."]

    lookup("capital cities")
    processor.force_flush(10_000)
    [evaluation] = _evaluations(otel)
    assert evaluation.attributes[n.CP_REFERENCE] == "query"
    assert evaluation.attributes[n.CP_VERDICTS] == (False, True)
    assert evaluation.attributes[n.GEN_AI_EVALUATION_SCORE_VALUE] == 0.5
    assert cp_observe_judge.calls[0].reference == "capital cities"


class Store:
    """A retriever as a method, a static method and a class method."""

    docs = DOCS

    @cp_observe.retriever(name="method")
    def method(self, query: str) -> list[str]:
        return self.docs

    @cp_observe.retriever(name="static")
    @staticmethod
    def static(query: str) -> list[str]:
        return DOCS

    @staticmethod
    @cp_observe.retriever(name="static2")
    def static2(query: str) -> list[str]:
        return DOCS


@cp_observe.retriever(name="sync")
def sync_search(query: str) -> list[str]:
    return DOCS


@cp_observe.retriever(name="async")
async def async_search(query: str) -> list[str]:
    await asyncio.sleep(0)
    return DOCS


@cp_observe.retriever(name="gen")
def gen_search(query: str) -> Iterator[str]:
    yield from DOCS


@cp_observe.retriever(name="agen")
async def agen_search(query: str) -> AsyncIterator[str]:
    for doc in DOCS:
        await asyncio.sleep(0)
        yield doc


def _run_kind(kind: str) -> list[str]:
    query = "capital of France"
    if kind == "sync":
        return sync_search(query)
    if kind == "async":
        return asyncio.run(async_search(query))
    if kind == "gen":
        return list(gen_search(query))
    if kind == "agen":

        async def collect() -> list[str]:
            return [d async for d in agen_search(query)]

        return asyncio.run(collect())
    if kind == "method":
        return Store().method(query)
    if kind == "static":
        return Store.static(query)
    return Store.static2(query)


@pytest.mark.parametrize("kind", ["sync", "async", "gen", "agen", "method", "static", "static2"])
def test_every_function_kind_is_traced_and_scored(otel: Otel, cp_observe_judge: FakeJudge, kind: str) -> None:
    """Sync, async, generator, async generator, method and static method retrievers all work the same."""
    processor = otel.processor(cp_observe_judge)
    assert _run_kind(kind) == DOCS
    processor.force_flush(10_000)
    [retrieval] = otel.by_name(f"retrieval {kind}")
    assert retrieval.attributes[n.INPUT_VALUE] == "capital of France"
    assert [retrieval.attributes[n.document_attribute(i, "content")] for i in range(3)] == DOCS
    [evaluation] = _evaluations(otel)
    assert evaluation.attributes[n.CP_VERDICTS] == (True, False, True)


def test_signature_docstring_and_hints_are_preserved() -> None:
    """The wrapper looks like the function it wraps."""

    def documented(query: str, k: int = 3) -> list[str]:
        """Find things."""
        return []

    wrapped = cp_observe.retriever(documented)
    assert wrapped.__doc__ == "Find things."
    assert wrapped.__name__ == "documented"
    assert inspect.signature(wrapped) == inspect.signature(documented)
    assert wrapped.__annotations__ == documented.__annotations__
    assert wrapped.__wrapped__ is documented  # type: ignore[attr-defined]
    assert inspect.iscoroutinefunction(async_search)
    assert inspect.isasyncgenfunction(agen_search)
    assert inspect.isgeneratorfunction(gen_search)


def test_unknown_query_argument_is_refused_at_decoration() -> None:
    """Naming an argument the function does not have fails when decorating, not when called."""
    with pytest.raises(ValueError, match="no argument named 'q'"):

        @cp_observe.retriever(query="q")
        def search(query: str) -> list[str]:
            return []


def test_query_by_name_keyword_and_callable(otel: Otel) -> None:
    """The query can be named, passed by keyword, or computed by a callable."""

    @cp_observe.retriever(name="named", query="text")
    def named(top_k: int, text: str) -> list[str]:
        return []

    @cp_observe.retriever(name="computed", query=lambda request: request["q"])
    def computed(request: dict[str, str]) -> list[str]:
        return []

    named(3, text="by name")
    named(top_k=2, text="by keyword")
    computed({"q": "by callable"})
    queries = sorted(s.attributes[n.INPUT_VALUE] for s in otel.by_name("retrieval"))
    assert queries == ["by callable", "by keyword", "by name"]


def test_user_exception_passes_through_and_is_not_scored(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """The user's exception is re-raised unchanged; the span is an error and the target is skipped."""
    processor = otel.processor(cp_observe_judge)
    error = KeyError("boom")

    @cp_observe.retriever(name="broken")
    def broken(query: str) -> list[str]:
        raise error

    with pytest.raises(KeyError) as caught:
        broken("anything")
    assert caught.value is error
    processor.force_flush(10_000)
    [span] = otel.by_name("retrieval broken")
    assert span.status.status_code.name == "ERROR"
    assert span.attributes[n.ERROR_TYPE] == "KeyError"
    assert _evaluations(otel) == []
    assert cp_observe_judge.calls == []
    stats = processor.stats()
    assert (stats["sampled"], stats["skipped"], stats["reasons"]) == (1, 1, {"skipped:call_error": 1})


def test_sample_rate_zero_scores_nothing_unless_forced(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """At rate 0 nothing is sampled; force_evaluation() scores the current call anyway."""
    processor = otel.processor(cp_observe_judge, sample_rate=0.0)
    sync_search("first")
    with cp_observe.force_evaluation():
        sync_search("second")
    processor.force_flush(10_000)
    marks = {s.attributes[n.INPUT_VALUE]: s.attributes[n.CP_SAMPLED] for s in otel.by_name("retrieval sync")}
    assert marks == {"first": False, "second": True}
    [evaluation] = _evaluations(otel)
    assert evaluation.attributes[n.CP_SAMPLING_REASON] == "forced"
    assert processor.stats()["sampled"] == 1


def test_sampling_is_by_trace_id_and_consistent(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Every span of a trace gets the same decision; about the configured share of traces is sampled."""
    processor = otel.processor(cp_observe_judge, sample_rate=0.3)

    @cp_observe.agent(name="a")
    def run(question: str) -> str:
        sync_search(question)
        sync_search(question + "!")
        return "France"

    for i in range(300):
        run(f"q{i}")
    processor.force_flush(30_000)
    by_trace: dict[int, set[bool]] = {}
    for span in otel.by_name("retrieval sync"):
        by_trace.setdefault(span.context.trace_id, set()).add(span.attributes[n.CP_SAMPLED])
    assert all(len(marks) == 1 for marks in by_trace.values())
    sampled_traces = sum(1 for marks in by_trace.values() if True in marks)
    assert 50 <= sampled_traces <= 130
    assert processor.stats()["sampled"] == 2 * sampled_traces


def test_capture_off_exports_no_content_but_still_scores(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """With capture off, spans carry no query, contexts, answer or reasons; the judge still sees them."""
    otel.runtime.install(capture_content=False)
    processor = otel.processor(cp_observe_judge)

    make_turn(agent="quiet").ask("SECRET-QUERY capital")
    processor.force_flush(10_000)
    text = repr([dict(s.attributes) for s in otel.finished()])
    for secret in ("SECRET-QUERY", "Paris", "Bananas", "fake judge"):
        assert secret not in text
    [evaluation] = _evaluations(otel)
    assert evaluation.attributes[n.CP_VERDICTS] == TURN_VERDICTS
    assert n.CP_REASONS not in evaluation.attributes
    assert cp_observe_judge.calls[0].query == "SECRET-QUERY capital"


def test_redaction_runs_before_recording_and_judging(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """The redaction hook changes what is recorded and what the judge receives."""
    otel.runtime.install(redact=lambda text: text.replace("Paris", "[CITY]"))
    processor = otel.processor(cp_observe_judge)
    sync_search("Is Paris big?")
    processor.force_flush(10_000)
    [span] = otel.by_name("retrieval sync")
    assert span.attributes[n.INPUT_VALUE] == "Is [CITY] big?"
    assert span.attributes[n.document_attribute(0, "content")].startswith("[CITY] is the capital")
    query, contexts = cp_observe_judge.calls[0].query, list(cp_observe_judge.calls[0].contexts)
    assert "Paris" not in query and all("Paris" not in c for c in contexts)


def test_agent_with_context_extractor_is_itself_a_target(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """An agent given a context_extractor is scored on the contexts it reports, against its answer."""
    processor = otel.processor(cp_observe_judge)

    @cp_observe.agent(name="rag", output=lambda r: r["answer"], context_extractor=lambda r: r["sources"])
    def rag(question: str) -> dict[str, Any]:
        return {"answer": ANSWER, "sources": ["Nothing here.", "Paris is the capital of France."]}

    rag("capital?")
    processor.force_flush(10_000)
    [evaluation] = _evaluations(otel)
    assert evaluation.attributes[n.CP_VERDICTS] == (False, True)
    assert evaluation.attributes[n.GEN_AI_DATA_SOURCE_ID] == "rag"
    assert evaluation.attributes[n.CP_REFERENCE] == "output"


def test_failing_judge_is_a_failed_outcome_not_an_exception(otel: Otel) -> None:
    """A judge that raises yields an ERROR evaluation span and a failed count; the host is untouched."""

    class Broken:
        model = "broken"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            raise RuntimeError("judge down")

    processor = otel.processor(Broken())
    assert sync_search("capital") == DOCS
    processor.force_flush(10_000)
    [evaluation] = _evaluations(otel)
    assert evaluation.status.status_code.name == "ERROR"
    assert evaluation.attributes[n.ERROR_TYPE] == "RuntimeError"
    stats = processor.stats()
    assert (stats["sampled"], stats["failed"]) == (1, 1)
    assert otel.metric_points(n.METRIC_SCORE) == []


def test_misaligned_user_judge_is_refused(otel: Otel) -> None:
    """A judge returning fewer verdicts than contexts fails the evaluation instead of scoring."""
    from cp_observe import Verdict

    class Short:
        model = "short"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            return [Verdict(0, True)]

    processor = otel.processor(Short())
    sync_search("capital")
    processor.force_flush(10_000)
    assert processor.stats()["failed"] == 1
    assert processor.stats()["reasons"] == {"failed:judge_error": 1}


def test_full_queue_drops_and_counts(otel: Otel) -> None:
    """Beyond queue_size targets are dropped, counted, and the invariant holds."""
    release = asyncio.Event()
    started: list[int] = []

    class Slow:
        model = "slow"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            started.append(1)
            await asyncio.wait_for(release.wait(), timeout=0.2)
            return [cp_observe.Verdict(i, True) for i in range(len(contexts))]

    processor = otel.processor(Slow(), queue_size=3, concurrency=1)
    for i in range(20):
        sync_search(f"q{i}")
    processor.force_flush(30_000)
    stats = processor.stats()
    assert stats["dropped"] >= 10
    assert stats["sampled"] == 20
    assert stats["sampled"] == stats["scored"] + stats["failed"] + stats["dropped"] + stats["skipped"]
    assert stats["reasons"].get("dropped:queue_full", 0) == stats["dropped"]


def test_query_whose_repr_raises_does_not_break_the_call(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """An argument whose str/repr raise gives a placeholder, never an exception."""

    class Hostile:
        def __str__(self) -> str:
            raise RuntimeError("no str")

        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    processor = otel.processor(cp_observe_judge)

    @cp_observe.retriever(name="hostile")
    def search(query: Hostile) -> list[str]:
        return DOCS

    assert search(Hostile()) == DOCS
    processor.force_flush(10_000)
    [span] = otel.by_name("retrieval hostile")
    assert "unrepresentable" in span.attributes[n.INPUT_VALUE]


def test_exporter_raising_does_not_reach_the_host(
    otel: Otel, cp_observe_judge: FakeJudge, production_errors: None
) -> None:
    """A span processor that raises in on_end does not break the decorated call."""

    class Exploding:
        def on_start(self, span: Any, parent_context: Any = None) -> None: ...

        def on_end(self, span: Any) -> None:
            raise RuntimeError("exporter down")

        def shutdown(self) -> None: ...

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    otel.tracer_provider.add_span_processor(Exploding())  # type: ignore[arg-type]
    assert sync_search("capital") == DOCS


def test_foreign_retriever_spans_are_scored(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """A retriever span made by another instrumentation with the same conventions is scored from attributes."""
    processor = otel.processor(cp_observe_judge)
    tracer = otel.tracer_provider.get_tracer("other-instrumentation")
    with tracer.start_as_current_span("vector search") as span:
        span.set_attribute(n.OPENINFERENCE_SPAN_KIND, "RETRIEVER")
        span.set_attribute(n.INPUT_VALUE, "capital cities")
        span.set_attribute(n.document_attribute(0, "content"), "The capital of Peru is Lima.")
        span.set_attribute(n.document_attribute(1, "content"), "Bananas.")
    processor.force_flush(10_000)
    [evaluation] = _evaluations(otel)
    assert evaluation.attributes[n.CP_VERDICTS] == (True, False)
    assert evaluation.attributes[n.CP_REFERENCE] == "query"


def test_instrumentation_is_suppressed_on_the_judge_path(otel: Otel) -> None:
    """Decorated calls made by the judge itself are neither traced nor scored."""
    inner_calls: list[str] = []

    class Recursive:
        model = "recursive"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            inner_calls.append(repr(sync_search("from the judge")))
            return [cp_observe.Verdict(i, True) for i in range(len(contexts))]

    processor = otel.processor(Recursive())
    sync_search("from the host")
    processor.force_flush(10_000)
    assert inner_calls
    assert [s.attributes[n.INPUT_VALUE] for s in otel.by_name("retrieval sync")] == ["from the host"]
    assert processor.stats()["scored"] == 1


def test_hold_mode_writes_the_score_onto_the_scored_span(cp_observe_judge: FakeJudge) -> None:
    """With an export processor handed over, sampled spans are exported with their score on them."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from cp_observe.testing import IsolatedRuntime

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    processor = cp_observe.ContextPrecisionProcessor(
        cp_observe_judge, tracer_provider=provider, export_processor=SimpleSpanProcessor(exporter)
    )
    provider.add_span_processor(processor)
    runtime = IsolatedRuntime(tracer_provider=provider).open()
    try:
        assert sync_search("capital of France") == DOCS
        processor.force_flush(10_000)
    finally:
        runtime.close()
        processor.shutdown()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    retrieval = spans["retrieval sync"]
    assert retrieval.attributes[n.CP_SCORE] == 0.83
    assert retrieval.attributes[n.GEN_AI_EVALUATION_SCORE_LABEL] == "pass"
    assert n.EVALUATION_SPAN_NAME in spans
    assert len(exporter.get_finished_spans()) == 2


def test_hold_mode_releases_unenriched_when_time_is_up(cp_observe_judge: FakeJudge) -> None:
    """A span whose judgement outlasts the hold is exported without a score, never lost."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from cp_observe.testing import IsolatedRuntime

    gate = threading.Event()

    class Stuck:
        model = "stuck"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            while not gate.is_set():
                await asyncio.sleep(0.01)
            return [cp_observe.Verdict(i, True) for i in range(len(contexts))]

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    processor = cp_observe.ContextPrecisionProcessor(
        Stuck(), tracer_provider=provider, export_processor=SimpleSpanProcessor(exporter), hold_timeout_s=0.2
    )
    provider.add_span_processor(processor)
    runtime = IsolatedRuntime(tracer_provider=provider).open()
    try:
        sync_search("capital")
        deadline = time.monotonic() + 5
        while not exporter.get_finished_spans() and time.monotonic() < deadline:
            time.sleep(0.02)
        [released] = exporter.get_finished_spans()
        assert released.name == "retrieval sync"
        assert n.CP_SCORE not in released.attributes
    finally:
        gate.set()
        processor.force_flush(10_000)
        runtime.close()
        processor.shutdown()
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == [n.EVALUATION_SPAN_NAME, "retrieval sync"]


def _snapshot(otel: Otel) -> list[dict[str, Any]]:
    """Exported spans as plain dicts: name, parent's name, links by name, attributes without volatile values."""
    spans = otel.finished()
    names = {s.context.span_id: s.name for s in spans}
    out = []
    for span in sorted(spans, key=lambda s: s.name):
        attributes = dict(span.attributes or {})
        attributes.pop(n.GEN_AI_EVALUATION_EXPLANATION, None)
        attributes.pop(n.OI_EVALUATION_EXPLANATION, None)
        out.append({
            "name": span.name,
            "parent": names.get(span.parent.span_id) if span.parent else None,
            "links": [names.get(link.context.span_id) for link in span.links],
            "status": span.status.status_code.name,
            "attributes": attributes,
        })
    return out


def test_exported_spans_snapshot(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """The whole exported trace of one turn, compared to an inline snapshot."""
    processor = otel.processor(cp_observe_judge)
    make_turn(docs=[
        {"page_content": DOCS[0], "id": "d1", "score": 0.9, "metadata": {"source": "atlas"}},
        {"page_content": DOCS[1], "id": "d2", "score": 0.4},
    ]).ask("capital?")
    processor.force_flush(10_000)
    assert _snapshot(otel) == [
        {
            "name": "evaluation context_precision",
            "parent": "retrieval kb",
            "links": ["retrieval kb"],
            "status": "UNSET",
            "attributes": {
                "openinference.span.kind": "EVALUATOR",
                "gen_ai.evaluation.name": "context_precision",
                "gen_ai.evaluation.score.value": 1.0,
                "gen_ai.evaluation.score.label": "pass",
                "context_precision.average_precision": 1.0,
                "context_precision.verdicts": (True, False),
                "context_precision.reference": "output",
                "context_precision.judge.model": "fake-judge",
                "context_precision.judge.prompt_version": "none",
                "context_precision.judge.kind": "custom",
                "context_precision.judge.calls": 1,
                "context_precision.context.count": 2,
                "context_precision.sampling.reason": "ratio",
                "evaluations.0.evaluation.name": "context_precision",
                "evaluations.0.evaluation.score": 1.0,
                "evaluations.0.evaluation.label": "pass",
                "gen_ai.data_source.id": "kb",
                "gen_ai.agent.name": "helper",
                "context_precision.stage": "retrieval",
                "context_precision.retrieval.returned": 2,
                "context_precision.reasons": ("fake judge", "fake judge"),
            },
        },
        {
            "name": "invoke_agent helper",
            "parent": None,
            "links": [],
            "status": "UNSET",
            "attributes": {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "helper",
                "openinference.span.kind": "AGENT",
                "context_precision.sampled": True,
                "input.value": "capital?",
                "output.value": ANSWER,
            },
        },
        {
            "name": "retrieval kb",
            "parent": "invoke_agent helper",
            "links": [],
            "status": "UNSET",
            "attributes": {
                "gen_ai.operation.name": "retrieval",
                "gen_ai.data_source.id": "kb",
                "openinference.span.kind": "RETRIEVER",
                "context_precision.sampled": True,
                "input.value": "capital?",
                "gen_ai.retrieval.query.text": "capital?",
                "context_precision.context.count": 2,
                "retrieval.documents.0.document.content": DOCS[0],
                "retrieval.documents.0.document.id": "d1",
                "retrieval.documents.0.document.score": 0.9,
                "retrieval.documents.0.document.metadata": '{"source":"atlas"}',
                "retrieval.documents.1.document.content": DOCS[1],
                "retrieval.documents.1.document.id": "d2",
                "retrieval.documents.1.document.score": 0.4,
                "gen_ai.retrieval.documents": '[{"id": "d1", "score": 0.9}, {"id": "d2", "score": 0.4}]',
            },
        },
    ]


def test_processor_with_llm_judge_over_loopback(otel: Otel) -> None:
    """The hook with a real LLMJudge: litellm over HTTP to the loopback server, scored in the background."""
    from cp_observe.testing import JudgeServer

    with JudgeServer() as server:
        judge = cp_observe.LLMJudge("openai/judge-test", api_base=server.url, api_key="sk-test", timeout=5)
        processor = otel.processor(judge)

        turn = make_turn()
        for question in ("capital of France?", "largest city of France?"):
            assert turn.ask(question) == ANSWER
        assert processor.force_flush(30_000)
        assert server.calls == 2
    evaluations = _evaluations(otel)
    assert [e.attributes[n.CP_VERDICTS] for e in evaluations] == [TURN_VERDICTS, TURN_VERDICTS]
    assert {e.attributes[n.CP_JUDGE_MODEL] for e in evaluations} == {"openai/judge-test"}
    tokens = otel.metric_points(n.METRIC_TOKEN_USAGE)
    assert {p.attributes[n.GEN_AI_TOKEN_TYPE] for p in tokens} == {"input", "output"}
    stats = processor.stats()
    assert (stats["sampled"], stats["scored"]) == (2, 2)


def test_returned_iterator_is_left_for_the_caller(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """A plain function returning an iterator: the caller gets every item; the call is skipped, not scored."""
    processor = otel.processor(cp_observe_judge)

    @cp_observe.retriever(name="lazy")
    def search(query: str) -> Iterator[str]:
        return iter(DOCS)

    assert list(search("capital")) == DOCS
    processor.force_flush(10_000)
    assert processor.stats()["reasons"] == {"skipped:no_content": 1}


def test_lone_surrogates_are_recorded_encodable(otel: Otel) -> None:
    """A context with a lone surrogate is recorded in a form the OTLP exporter can encode."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    @cp_observe.retriever(name="odd")
    def search(query: str) -> list[str]:
        return ["ok \udcff text"]

    search("q\ud800")
    [span] = otel.by_name("retrieval odd")
    encode_spans([span]).SerializeToString()
    assert "\udcff" not in span.attributes[n.document_attribute(0, "content")]


OWN_PROVIDER_PROGRAM = '''
import os
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import cp_observe
from cp_observe.testing import JudgeServer

exporter, provider = InMemorySpanExporter(), TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
reader = InMemoryMetricReader()
with JudgeServer() as server:
    judge = cp_observe.LLMJudge("openai/judge", api_base=server.url, api_key="sk-test")
    processor = cp_observe.ContextPrecisionProcessor(
        judge, tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[reader])
    )
    provider.add_span_processor(processor)

    @cp_observe.retriever(name="kb")
    def search(q):
        return ["Paris is the capital of France.", "Bananas are yellow."]

    @cp_observe.agent(name="bot")
    def ask(q):
        search(q)
        return "Paris is the capital of France."

    ask("What is the capital of France?")
    processor.force_flush()
print(sorted(s.name for s in exporter.get_finished_spans()))
print(processor.stats()["scored"])
'''


def test_program_with_its_own_provider_and_no_global_one() -> None:
    """A program that never sets a global provider: the decorators follow the processor's provider."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", OWN_PROVIDER_PROGRAM], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    names, scored = out.stdout.strip().splitlines()
    assert names == "['evaluation context_precision', 'invoke_agent bot', 'retrieval kb']"
    assert scored == "1"
