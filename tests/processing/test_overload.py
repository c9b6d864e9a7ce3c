"""Overload: when targets are refused, the answers that release waiting retrievals are still taken."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import cp_observe
from tests.conftest import Otel
from tests.turn_support import Turn


def test_full_queue_never_stalls_judging(otel: Otel, turn: Turn) -> None:
    """Retrievals waiting for their agent cannot hold every slot: the agent's answer is always taken."""
    release = threading.Event()

    references: list[str] = []

    class Gated:
        model = "gated"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            references.append(reference)
            while not release.is_set():
                await asyncio.sleep(0.005)
            return [cp_observe.Verdict(i, True) for i in range(len(contexts))]

    # A long turn timeout: if answers were refused, the waiting retrievals would sit there for an hour.
    processor = otel.processor(Gated(), queue_size=4, concurrency=1, turn_timeout_s=3600)

    for i in range(40):
        turn.ask(f"q{i}")
    release.set()
    assert processor.force_flush(20_000)
    stats = processor.stats()
    assert stats["pending"] == 0
    assert stats["scored"] >= 4
    assert stats["sampled"] == stats["scored"] + stats["dropped"] + stats["failed"] + stats["skipped"]
    assert stats["reasons"].get("skipped:no_reference", 0) == 0
    # Every scored retrieval was judged against the agent's answer, not left to time out on its query.
    assert set(stats["reasons"]) <= {"scored:ok", "dropped:queue_full"}
    assert len(references) == stats["scored"]
    assert set(references) == {turn.answer}  # the agent's answer (reference "output"), never the query


def test_refused_targets_cost_the_caller_no_metrics_and_no_export(otel: Otel) -> None:
    """A full queue: the caller only counts; metrics and the held span's export happen on the evaluator thread."""
    import threading as _threading

    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

    from cp_observe import _names as n

    release = _threading.Event()
    exported_on: list[tuple[str, str]] = []

    class Recording(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            exported_on.append((span.name, _threading.current_thread().name))

    class Gated:
        model = "gated"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            while not release.is_set():
                await asyncio.sleep(0.005)
            return [cp_observe.Verdict(i, True) for i in range(len(contexts))]

    processor = otel.processor(Gated(), queue_size=1, concurrency=1, export_processor=Recording(), hold_timeout_s=60)

    @cp_observe.retriever(name="kb")
    def search(query: str) -> list[str]:
        return ["a context"]

    for i in range(10):
        search(f"q{i}")
    stats = processor.stats()
    assert stats["dropped"] >= 8  # refused at once, counted on the caller's thread
    release.set()
    assert processor.force_flush(20_000)
    retrievals = [thread for name, thread in exported_on if name == "retrieval kb"]
    assert len(retrievals) == 10
    assert set(retrievals) == {"cp-observe-evaluator"}  # never exported on the request thread
    dropped = sum(p.value for p in otel.metric_points(n.METRIC_EVALUATIONS)
                  if p.attributes.get(n.OUTCOME) == n.OUTCOME_DROPPED)
    assert dropped == processor.stats()["dropped"]


def test_evaluator_thread_runs_before_the_first_span(otel: Otel, cp_observe_judge: Any) -> None:
    """The evaluator thread starts with the processor: no request waits for it to start."""
    import threading as _threading

    before = {t.ident for t in _threading.enumerate() if t.name == "cp-observe-evaluator"}
    otel.processor(cp_observe_judge)
    started = [t for t in _threading.enumerate() if t.name == "cp-observe-evaluator" and t.ident not in before]
    assert len(started) == 1
    assert started[0].is_alive()


def test_a_slow_data_source_callable_never_runs_on_the_calling_thread(otel: Otel, server: Any) -> None:
    """At a full queue the user's data_source callable runs on the evaluator thread, and the drop keeps its label."""
    import time as _time

    from cp_observe import _names as n

    server.latency = 2.0  # the judge is busy: the one slot stays taken while the calls below end
    ran_on: list[int] = []

    def data_source(attributes: Any) -> str:
        ran_on.append(threading.get_ident())
        _time.sleep(0.1)
        return "named-by-callable"

    judge = cp_observe.LLMJudge("openai/judge", api_base=server.url, api_key="sk-test", timeout=10, max_retries=0)
    processor = otel.processor(judge, queue_size=1, concurrency=1, data_source=data_source)

    @cp_observe.retriever(name="kb")
    def search(query: str) -> list[str]:
        return ["a context"]

    caller = threading.get_ident()
    for i in range(20):
        search(f"q{i}")
    assert processor.force_flush(30_000)
    assert ran_on, "the callable names every target"
    assert caller not in ran_on
    stats = processor.stats()
    assert stats["dropped"] >= 1
    dropped = [p for p in otel.metric_points(n.METRIC_EVALUATIONS) if p.attributes.get(n.OUTCOME) == n.OUTCOME_DROPPED]
    assert {p.attributes[n.GEN_AI_DATA_SOURCE_ID] for p in dropped} == {"named-by-callable"}
    assert sum(p.value for p in dropped) == stats["dropped"]


def test_refusals_beyond_the_bound_are_labelled_from_the_span_and_counted(otel: Otel, cp_observe_judge: Any) -> None:
    """Past the bound of refusals waiting for the evaluator, the rest are labelled from the span alone, and counted."""
    from cp_observe import _names as n

    entered, release = threading.Event(), threading.Event()

    def data_source(attributes: Any) -> str:
        entered.set()
        release.wait(30)  # the first call holds the evaluator thread: nothing refused is named meanwhile
        return "named-by-callable"

    processor = otel.processor(cp_observe_judge, queue_size=1, data_source=data_source)

    @cp_observe.retriever(name="kb")
    def search(query: str) -> list[str]:
        return ["a context"]

    search("admitted")
    assert entered.wait(10)
    for i in range(1200):
        search(f"q{i}")
    release.set()
    assert processor.force_flush(30_000)
    stats = processor.stats()
    assert stats["dropped"] == 1200 and stats["reasons"] == {"dropped:queue_full": 1200, "scored:ok": 1}
    kept = 1024  # refusals kept for naming on the evaluator thread: max(1024, 4 x queue_size)
    assert processor._evaluator.refused_unnamed == 1200 - kept
    dropped: dict[str, float] = {}
    for point in otel.metric_points(n.METRIC_EVALUATIONS):
        if point.attributes.get(n.OUTCOME) == n.OUTCOME_DROPPED:
            name = point.attributes[n.GEN_AI_DATA_SOURCE_ID]
            dropped[name] = dropped.get(name, 0) + point.value
    assert dropped == {"named-by-callable": kept, "kb": 1200 - kept}
