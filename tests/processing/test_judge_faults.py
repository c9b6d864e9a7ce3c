"""Reliability: judge faults under load through real litellm, the circuit breaker, and the processor's lifecycle.

Every judge here is an ``LLMJudge`` talking real HTTP (litellm → openai client → httpx) to the loopback
``JudgeServer``, which fails on cue. Load comes from several threads running decorated agent + retriever turns
(sync, and async ones gathered on their own loop). After every scenario the host's return values are compared,
``processor.force_flush`` must succeed, and ``sampled == scored + failed + dropped + skipped`` must hold exactly,
in ``processor.stats()`` and in the exported ``context_precision.evaluations`` counter alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import cp_observe
from cp_observe import _names as n
from cp_observe._capture import _payloads
from cp_observe._judging._litellm import load_litellm
from cp_observe.testing import FakeJudge, JudgeServer, ProcessorProbe, delay, good, raw, reset, status
from tests.conftest import Otel

DOCS = (
    "Paris is the capital of France.",
    "Bananas are rich in potassium.",
    "France borders Spain and Italy.",
)
CIRCUIT_FAILURES = 3
CONCURRENCY = 4
THREADS = 4
TURNS_PER_THREAD = 40
TURNS = THREADS * TURNS_PER_THREAD


@pytest.fixture(scope="session")
def litellm_ready() -> None:
    """Import litellm once, up front, so its import (seconds) never counts against a timing assertion."""
    load_litellm()


@pytest.fixture(autouse=True)
def _litellm_worker_hygiene() -> Iterator[None]:
    """After each test, move litellm's logging worker off the evaluator loops this test closed.

    The evaluator closes its loop without cancelling the tasks litellm left on it (reported as a bug, see
    ``test_shutdown_leaves_no_task_pending_on_the_evaluator_loop``). litellm drops that stale worker the next
    time it runs on another loop, and its coroutine then dies with "Event loop is closed" as an unraisable
    exception -- in whatever test (of whichever module) comes next. Retiring it here keeps that noise out of
    other suites; any other unraisable exception still reaches pytest.
    """
    yield
    rebind_litellm_logging_worker()


def rebind_litellm_logging_worker() -> None:
    """Retire litellm's logging worker if it is stuck on a closed loop, and bind it to a fresh one.

    The stale worker coroutine is closed here, where its "Event loop is closed" error can be caught, instead of
    by the garbage collector in some later test. Anything unexpected still reaches pytest's unraisable hook.
    """
    if "litellm" not in sys.modules:
        return
    from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER

    bound = getattr(GLOBAL_LOGGING_WORKER, "_bound_loop", None)
    if bound is None or not bound.is_closed():
        return
    task = getattr(GLOBAL_LOGGING_WORKER, "_worker_task", None)
    if task is not None and not task.done():
        with contextlib.suppress(RuntimeError):  # "Event loop is closed", raised by the queue getter's cancel
            task.get_coro().close()

    async def rebind() -> None:
        GLOBAL_LOGGING_WORKER.start()

    asyncio.run(rebind())  # asyncio.run cancels the fresh worker cleanly before closing its loop


def llm_judge(url: str, **kwargs: Any) -> cp_observe.LLMJudge:
    """An LLMJudge on the loopback server: small timeout, one retry, fast backoff, no verdict cache."""
    options: dict[str, Any] = {
        "api_base": url,
        "api_key": "sk-reliability-0000",
        "timeout": 2.0,
        "max_retries": 1,
        "backoff_base": 0.005,
        "backoff_max": 0.01,
        "cache_size": 0,
    }
    options.update(kwargs)
    return cp_observe.LLMJudge("openai/judge-test", **options)


@dataclass
class Reply:
    """What the decorated agent returns: the host compares it after every scenario."""

    question: str
    answer: str
    sources: int


@cp_observe.retriever(name="kb")
def search(query: str) -> list[str]:
    return list(DOCS)


@cp_observe.agent(name="bot", output=lambda reply: reply.answer)
def answer(question: str) -> Reply:
    docs = search(question)
    return Reply(question, f"Paris is the capital of France ({question}).", len(docs))


@cp_observe.retriever(name="kb")
async def asearch(query: str) -> list[str]:
    await asyncio.sleep(0)
    return list(DOCS)


@cp_observe.agent(name="bot", output=lambda reply: reply.answer)
async def aanswer(question: str) -> Reply:
    docs = await asearch(question)
    return Reply(question, f"Paris is the capital of France ({question}).", len(docs))


def expected(question: str) -> Reply:
    return Reply(question, f"Paris is the capital of France ({question}).", len(DOCS))


def run_load(prefix: str, threads: int = THREADS, per_thread: int = TURNS_PER_THREAD) -> None:
    """Run ``threads * per_thread`` turns at once (one thread async, the others sync); check every result."""
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    mismatches: list[str] = []

    def sync_worker(worker: int) -> None:
        barrier.wait(10)
        for i in range(per_thread):
            question = f"{prefix} sync {worker}-{i} capital of France?"
            result = answer(question)
            if result != expected(question):
                mismatches.append(question)

    def async_worker(worker: int) -> None:
        async def main() -> None:
            questions = [f"{prefix} async {worker}-{i} capital of France?" for i in range(per_thread)]
            results = await asyncio.gather(*(aanswer(q) for q in questions))
            mismatches.extend(q for q, r in zip(questions, results, strict=True) if r != expected(q))

        barrier.wait(10)
        asyncio.run(main())

    def guarded(target: Callable[[int], None], worker: int) -> None:
        try:
            target(worker)
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread below
            errors.append(exc)

    workers = [
        threading.Thread(target=guarded, args=(async_worker if w == 0 else sync_worker, w), name=f"load-{w}")
        for w in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not any(worker.is_alive() for worker in workers), "load threads did not finish"
    assert errors == []
    assert mismatches == []


def assert_invariant(processor: cp_observe.ContextPrecisionProcessor, otel: Otel | None = None) -> dict[str, Any]:
    """``sampled == scored + failed + dropped + skipped`` with nothing pending; the exported counters agree."""
    stats = processor.stats()
    assert stats["pending"] == 0, stats
    assert stats["sampled"] == stats["scored"] + stats["failed"] + stats["dropped"] + stats["skipped"], stats
    by_outcome: Counter[str] = Counter()
    for key, count in stats["reasons"].items():
        by_outcome[key.split(":", 1)[0]] += count
    for outcome in n.OUTCOMES:
        assert by_outcome[outcome] == stats[outcome], stats
    if otel is not None:
        exported: Counter[str] = Counter()
        for point in otel.metric_points(n.METRIC_EVALUATIONS):
            exported[f"{point.attributes[n.OUTCOME]}:{point.attributes[n.REASON]}"] += point.value
        assert dict(exported) == stats["reasons"]
        assert sum(p.value for p in otel.metric_points(n.METRIC_SAMPLED)) == stats["sampled"]
    return stats


def evaluation_spans(otel: Otel) -> list[ReadableSpan]:
    return otel.by_name(n.EVALUATION_SPAN_NAME)


# --- the fault matrix ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One way for the judge to misbehave, what it should be counted as, and how many calls a failure costs."""

    name: str
    reason: str | None  # None: the judge is healthy and every target is scored
    calls_per_failure: int | None  # None: the server cannot count (it is down)
    judge: dict[str, Any]
    processor: dict[str, Any]


FAULTS = [
    Fault("healthy", None, None, {}, {}),
    Fault("down", "judge_unavailable", None, {}, {}),
    Fault("slower_than_timeout", "judge_unavailable", 1, {"timeout": 0.3, "max_retries": 0}, {}),
    Fault(
        "slower_than_evaluation_timeout",
        "timeout",
        1,
        {"timeout": 5.0, "max_retries": 0},
        {"evaluation_timeout_s": 0.3},
    ),
    Fault("429_storm", "judge_unavailable", 2, {}, {}),
    Fault("500s", "judge_unavailable", 2, {}, {}),
    Fault("garbage", "judge_error", 2 + len(DOCS), {}, {}),
    Fault("truncated_json", "judge_error", 2 + len(DOCS), {}, {}),
    Fault("reset_mid_body", "judge_unavailable", 2, {}, {}),
]


def _break(server: JudgeServer, fault: str) -> str:
    """Make the server misbehave as ``fault`` says; returns the URL the judge should use."""
    url = server.url
    if fault == "down":
        server.stop()  # the port is closed: connection refused
    elif fault.startswith("slower"):
        server.default = delay(5.0)  # cut short when the server stops at teardown
    elif fault == "429_storm":
        server.default = status(429, headers={"Retry-After": "0.01"})
    elif fault == "500s":
        server.default = status(500)
    elif fault == "garbage":
        server.default = raw("Context one looks fine to me, the others less so. Hope that helps!")
    elif fault == "truncated_json":
        server.default = raw('{"verdicts": [{"context_index": 0, "verdict": "yes", "reason": "Par')
    elif fault == "reset_mid_body":
        server.default = reset()
    return url


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault_matrix_under_load(otel: Otel, server: JudgeServer, litellm_ready: None, fault: Fault) -> None:
    """Each judge fault under 160 concurrent turns: results unchanged, exact accounting, the circuit opens."""
    url = _break(server, fault.name)
    processor = otel.processor(
        llm_judge(url, **fault.judge),
        concurrency=CONCURRENCY,
        circuit_failures=CIRCUIT_FAILURES,
        circuit_cooldown_s=120.0,
        **fault.processor,
    )
    run_load(fault.name)
    assert processor.force_flush(60_000)
    stats = assert_invariant(processor, otel)
    assert stats["sampled"] == TURNS
    if fault.reason is None:
        assert stats["reasons"] == {"scored:ok": TURNS}
        assert server.calls == TURNS
        assert processor.circuit_state == "closed"
        assert len(evaluation_spans(otel)) == TURNS
        return

    failed = stats["failed"]
    # Calls already in flight when the circuit opens still fail; no call starts once it is open.
    assert CIRCUIT_FAILURES <= failed <= CIRCUIT_FAILURES + CONCURRENCY - 1, stats
    assert stats["reasons"] == {f"failed:{fault.reason}": failed, "skipped:circuit_open": TURNS - failed}
    assert processor.circuit_state == "open"
    errors = evaluation_spans(otel)
    assert len(errors) == failed
    assert all(span.status.status_code is StatusCode.ERROR and span.attributes[n.ERROR_TYPE] for span in errors)
    assert otel.metric_points(n.METRIC_SCORE) == []
    if fault.calls_per_failure is not None:
        assert server.calls == failed * fault.calls_per_failure

    # While the circuit is open, more load reaches the judge not at all.
    calls = server.calls if fault.name != "down" else 0
    run_load(f"{fault.name}-more", threads=2, per_thread=10)
    assert processor.force_flush(30_000)
    stats = assert_invariant(processor, otel)
    assert stats["sampled"] == TURNS + 20
    assert stats["reasons"]["skipped:circuit_open"] == TURNS + 20 - failed
    if fault.name != "down":
        assert server.calls == calls


# --- the circuit breaker -----------------------------------------------------------------------------------


def _wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Bounded polling for a state that only the clock can bring about (a cool-down ending)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_circuit_opens_skips_probes_once_and_closes(otel: Otel, server: JudgeServer, litellm_ready: None) -> None:
    """After N failures calls stop; after the cool-down exactly one probe goes out; a healthy probe closes it."""
    server.default = status(503)
    processor = otel.processor(
        llm_judge(server.url, max_retries=0), concurrency=CONCURRENCY, circuit_failures=3, circuit_cooldown_s=1.0
    )
    turn = iter(range(10_000))

    def one_turn() -> None:
        question = f"turn {next(turn)}: capital of France?"
        assert answer(question) == expected(question)

    for _ in range(8):  # one at a time, so the count of calls that go out is exact
        one_turn()
        assert processor.force_flush(10_000)
    assert server.calls == 3
    assert processor.stats()["reasons"] == {"failed:judge_unavailable": 3, "skipped:circuit_open": 5}
    assert processor.circuit_state == "open"

    # Cool-down over, judge still failing: one probe, it fails, the circuit opens again at once.
    assert _wait_until(lambda: processor.circuit_state == "half_open", 5.0)
    one_turn()
    one_turn()
    assert processor.force_flush(10_000)
    assert server.calls == 4
    assert processor.stats()["reasons"] == {"failed:judge_unavailable": 4, "skipped:circuit_open": 6}
    assert processor.circuit_state == "open"

    # Cool-down over, judge healthy but slow: while the single probe is in flight everything else is skipped.
    assert _wait_until(lambda: processor.circuit_state == "half_open", 5.0)
    server.default = good()
    server.latency = 0.5
    for _ in range(5):
        one_turn()
    assert processor.force_flush(10_000)
    assert server.calls == 5
    assert processor.stats()["reasons"] == {
        "failed:judge_unavailable": 4,
        "scored:ok": 1,
        "skipped:circuit_open": 10,
    }
    assert processor.circuit_state == "closed"

    # Closed again: every target is judged.
    server.latency = 0.0
    for _ in range(5):
        one_turn()
    assert processor.force_flush(10_000)
    assert server.calls == 10
    stats = assert_invariant(processor, otel)
    assert stats["reasons"]["scored:ok"] == 6
    assert stats["sampled"] == 20


def test_probe_refused_by_the_rate_cap_does_not_wedge_the_circuit(otel: Otel) -> None:
    """A half-open probe that the rate cap refuses is not lost: a later target probes and can close the circuit."""
    healthy = threading.Event()

    class Flaky:
        model = "flaky"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            if not healthy.is_set():
                raise RuntimeError("judge down")
            return [cp_observe.Verdict(i, True) for i in range(len(contexts))]

    now = [0.0]
    processor = otel.processor(Flaky(), circuit_failures=1, circuit_cooldown_s=0.2, max_evaluations_per_minute=1)
    ProcessorProbe(processor).use_rate_clock(lambda: now[0])  # a fake clock for the rate cap only
    question = "capital of France?"
    answer(question)
    assert processor.force_flush(10_000)
    assert processor.circuit_state == "open"
    assert _wait_until(lambda: processor.circuit_state == "half_open", 5.0)
    answer(question)  # takes the probe; the rate cap (no token left) skips it
    assert processor.force_flush(10_000)
    healthy.set()
    now[0] += 120.0  # two minutes later for the rate cap: a token is available again
    answer(question)
    assert processor.force_flush(10_000)
    assert processor.stats()["reasons"] == {
        "failed:judge_exception": 1,
        "skipped:rate_limited": 1,
        "scored:ok": 1,
    }
    assert processor.circuit_state == "closed"


# --- lifecycle ------------------------------------------------------------------------------------------------


def _evaluator_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "cp-observe-evaluator"}


def test_shutdown_with_work_queued_loses_no_span_and_counts_the_rest(
    otel: Otel, server: JudgeServer, litellm_ready: None
) -> None:
    """A stuck judge at shutdown: returns within its timeout, every span exported, the rest dropped/shutdown."""
    server.default = delay(30.0)
    before = _evaluator_threads()
    processor = otel.processor(
        llm_judge(server.url, timeout=60.0, max_retries=0), concurrency=2, shutdown_timeout_s=0.5
    )
    for i in range(30):
        question = f"q{i} capital of France?"
        assert answer(question) == expected(question)
    assert server.wait_for_requests(2, 10.0)
    started = time.monotonic()
    processor.shutdown()
    elapsed = time.monotonic() - started
    assert elapsed < 0.5 + 1.5
    stats = assert_invariant(processor, otel)
    assert stats["sampled"] == 30
    assert stats["reasons"] == {"dropped:shutdown": 30}
    names = Counter(span.name for span in otel.finished())
    assert names["retrieval kb"] == 30 and names["invoke_agent bot"] == 30
    assert not any(t.is_alive() for t in _evaluator_threads() - before)
    # After shutdown the host keeps working; nothing more is sampled or judged.
    assert answer("after shutdown") == expected("after shutdown")
    assert processor.stats()["sampled"] == 30
    assert server.calls == 2
    processor.shutdown()  # idempotent


def test_shutdown_leaves_no_task_pending_on_the_evaluator_loop(
    otel: Otel, server: JudgeServer, litellm_ready: None
) -> None:
    """Shutdown winds the evaluator loop down like asyncio.run does: no task is left pending on it."""
    processor = otel.processor(llm_judge(server.url))
    answer("capital of France?")
    assert processor.force_flush(10_000)
    loop = ProcessorProbe(processor).event_loop
    assert loop is not None
    processor.shutdown()
    assert loop.is_closed()
    pending = [repr(task.get_coro()) for task in asyncio.all_tasks(loop) if not task.done()]
    assert pending == []


def test_shutdown_counts_targets_arriving_while_it_drains(otel: Otel) -> None:
    """Targets ending while shutdown drains are counted dropped/shutdown, never silently lost."""
    release = threading.Event()
    entered = threading.Event()

    class Gate:
        model = "gate"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            entered.set()
            while not release.is_set():
                await asyncio.sleep(0.01)
            return [cp_observe.Verdict(i, True) for i in range(len(contexts))]

    processor = otel.processor(Gate(), concurrency=1, shutdown_timeout_s=5.0)
    answer("first")
    assert entered.wait(5)
    stopper = threading.Thread(target=processor.shutdown)
    stopper.start()
    assert _wait_until(lambda: ProcessorProbe(processor).closed, 5.0)
    for i in range(5):
        answer(f"late {i}")
    release.set()
    stopper.join(10)
    assert not stopper.is_alive()
    stats = assert_invariant(processor, otel)
    assert stats["reasons"] == {"scored:ok": 1, "dropped:shutdown": 5}


def test_force_flush_honours_its_timeout_when_the_judge_is_stuck(
    otel: Otel, server: JudgeServer, litellm_ready: None
) -> None:
    """force_flush returns False in about its timeout while the judge hangs, True once the judge is back."""
    server.script(delay(2.5), delay(2.5))  # the first two calls hang well past both flushes below
    processor = otel.processor(llm_judge(server.url, timeout=60.0, max_retries=0), concurrency=2)
    for i in range(6):
        answer(f"q{i} capital?")
    assert server.wait_for_requests(2, 10.0)
    for timeout_ms in (300, 800):
        started = time.monotonic()
        assert processor.force_flush(timeout_ms) is False
        elapsed = time.monotonic() - started
        assert timeout_ms / 1000 * 0.9 <= elapsed < timeout_ms / 1000 + 0.5
    assert processor.stats()["pending"] == 6
    # The judge answers in the end, and well: everything finishes and is scored.
    assert processor.force_flush(30_000)
    stats = assert_invariant(processor, otel)
    assert stats["reasons"] == {"scored:ok": 6}
    assert server.calls == 6


class _StuckExport(SpanProcessor):
    """Another span processor on the same provider whose flush waits as long as it is allowed to."""

    def __init__(self) -> None:
        self.given: list[int] = []
        self._never = threading.Event()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self.given.append(timeout_millis)
        return self._never.wait(timeout_millis / 1000)


def test_force_flush_deadline_covers_the_provider_flush(otel: Otel) -> None:
    """One deadline for the whole force_flush: a stuck judge plus a slow exporter still return in ~timeout."""
    release = threading.Event()

    class Stuck:
        model = "stuck"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            while not release.is_set():
                await asyncio.sleep(0.01)
            return [cp_observe.Verdict(i, True) for i in range(len(contexts))]

    stuck_export = _StuckExport()
    otel.tracer_provider.add_span_processor(stuck_export)
    processor = otel.processor(Stuck())
    answer("capital?")
    try:
        started = time.monotonic()
        assert processor.force_flush(600) is False
        elapsed = time.monotonic() - started
    finally:
        release.set()
    assert elapsed < 0.6 * 1.5, f"force_flush(600) took {elapsed:.2f}s; the provider got {stuck_export.given} ms"


# --- pre-fork servers ---------------------------------------------------------------------------------------


def _read_child(fd: int, pid: int, timeout: float) -> tuple[bytes, int | None]:
    """Read everything a child writes to ``fd`` and reap it; kill it if it is not done within ``timeout``."""
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    while time.monotonic() < deadline:
        done, status_ = os.waitpid(pid, os.WNOHANG)
        if done:
            return b"".join(chunks), status_
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return b"".join(chunks), None


def _fork(child: Callable[[], dict[str, Any]]) -> tuple[int, int]:
    """Fork; the child runs ``child`` and writes its JSON result (or error) to a pipe, then ``_exit``s."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            os.close(read_fd)
            try:
                payload = {"ok": True, **child()}
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                payload = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            os.write(write_fd, json.dumps(payload, default=str).encode())
        except BaseException:  # noqa: BLE001 - nothing may unwind into the parent's pytest in the child
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_pre_fork_children_score_their_own_turns(otel: Otel, server: JudgeServer, litellm_ready: None) -> None:
    """Configured in the parent (its evaluator already running), forked children judge and emit on their own."""
    processor = otel.processor(llm_judge(server.url, timeout=5.0), concurrency=2)
    assert answer("parent warm-up capital?") == expected("parent warm-up capital?")
    assert processor.force_flush(10_000)
    parent_scores = sum(p.count for p in otel.metric_points(n.METRIC_SCORE))
    assert parent_scores == 1

    def child_work(worker: int) -> Callable[[], dict[str, Any]]:
        def work() -> dict[str, Any]:
            otel.spans.clear()  # the parent's spans were copied into the child
            questions = [f"child {worker} turn {i} capital?" for i in range(5)]
            results_ok = all(answer(q) == expected(q) for q in questions)
            flushed = processor.force_flush(20_000)
            evaluations = [
                {
                    "verdicts": list(s.attributes[n.CP_VERDICTS]),
                    "parent": s.parent.span_id if s.parent else None,
                    "status": s.status.status_code.name,
                }
                for s in otel.by_name(n.EVALUATION_SPAN_NAME)
            ]
            retrievals = {s.context.span_id for s in otel.by_name("retrieval kb")}
            return {
                "pid": os.getpid(),
                "results_ok": results_ok,
                "flushed": flushed,
                "stats": processor.stats(),
                "evaluations": evaluations,
                "parents_are_retrievals": all(e["parent"] in retrievals for e in evaluations),
                "score_count": sum(p.count for p in otel.metric_points(n.METRIC_SCORE)),
                "threads": sorted(t.name for t in threading.enumerate()),
            }

        return work

    children = [_fork(child_work(worker)) for worker in range(2)]
    reports = []
    for pid, fd in children:
        data, exit_status = _read_child(fd, pid, 45.0)
        assert exit_status is not None, "a child hung"
        assert os.waitstatus_to_exitcode(exit_status) == 0
        reports.append(json.loads(data))
    for report in reports:
        assert report["ok"], report
        assert report["results_ok"] and report["flushed"]
        assert report["stats"]["reasons"] == {"scored:ok": 5}
        assert report["stats"]["sampled"] == 5 and report["stats"]["pending"] == 0
        assert len(report["evaluations"]) == 5 and report["parents_are_retrievals"]
        assert all(e["verdicts"] == [True, False, True] and e["status"] == "UNSET" for e in report["evaluations"])
        assert report["score_count"] == parent_scores + 5  # the child's meter carries on from the fork
        assert "cp-observe-evaluator" in report["threads"]
    assert len({r["pid"] for r in reports}) == 2
    # The parent is unaffected: its accounting holds only its own work, and it keeps scoring.
    assert processor.stats()["sampled"] == 1
    assert answer("parent again capital?") == expected("parent again capital?")
    assert processor.force_flush(10_000)
    stats = assert_invariant(processor, otel)
    assert stats["reasons"] == {"scored:ok": 2}
    assert server.calls == 1 + 2 * 5 + 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_while_a_thread_is_inside_the_payload_store(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """A fork that lands while another thread holds the payload store's lock leaves a working child."""
    otel.processor(cp_observe_judge)
    holding, release = threading.Event(), threading.Event()

    def request_thread() -> None:  # stands for a request thread caught inside PAYLOADS.put at fork time
        with _payloads.PAYLOADS._lock:
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=request_thread)
    holder.start()
    assert holding.wait(5)
    try:

        def work() -> dict[str, Any]:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(3)  # a hung child dies of SIGALRM instead of hanging the test
            result = answer("in the child")
            signal.alarm(0)
            return {"result_ok": result == expected("in the child")}

        pid, fd = _fork(work)
    finally:
        release.set()
        holder.join(5)
    data, exit_status = _read_child(fd, pid, 10.0)
    assert exit_status is not None and os.waitstatus_to_exitcode(exit_status) == 0, "the child hung"
    assert json.loads(data) == {"ok": True, "result_ok": True}


_FORK_DURING_IMPORT = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from cp_observe._judging import _litellm
    assert "litellm" not in sys.modules
    importer = threading.Thread(target=_litellm.load_litellm, daemon=True)  # the evaluator's first judge call
    importer.start()
    deadline = time.monotonic() + 10
    while not _litellm._lock.locked() and time.monotonic() < deadline:
        time.sleep(0.001)
    pid = os.fork()  # a pre-fork server forking its workers while that import runs
    if pid == 0:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(90)  # a hung child dies of SIGALRM (it imports litellm afresh: seconds on a loaded machine)
        _litellm.load_litellm()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status))
    os._exit(0)
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_during_the_first_litellm_import_leaves_a_working_child() -> None:
    """A child forked while litellm is being imported by the evaluator can still import it and judge."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run(
        [sys.executable, "-c", _FORK_DURING_IMPORT], capture_output=True, text=True, timeout=240, env=env, check=False
    )
    assert out.stdout.strip().splitlines()[-1:] == ["0"], (out.stdout[-500:], out.stderr[-2000:])


# --- several providers and the judge's own path ---------------------------------------------------------------


@dataclass
class Pipeline:
    """A second, independent in-memory OpenTelemetry pipeline."""

    tracer_provider: TracerProvider
    spans: InMemorySpanExporter
    meter_provider: MeterProvider
    metrics: InMemoryMetricReader


def _pipeline() -> Pipeline:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    metrics = InMemoryMetricReader()
    return Pipeline(tracer_provider, spans, MeterProvider(metric_readers=[metrics]), metrics)


def _score_count(reader: InMemoryMetricReader) -> int:
    data = reader.get_metrics_data()
    if data is None:
        return 0
    return sum(
        point.count
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == n.METRIC_SCORE
        for point in metric.data.data_points
    )


def _foreign_retrieval(provider: TracerProvider, query: str, docs: list[str]) -> None:
    """A retriever span made by another instrumentation (OpenInference conventions) on ``provider``."""
    with provider.get_tracer("other").start_as_current_span("vector search") as span:
        span.set_attribute(n.OPENINFERENCE_SPAN_KIND, "RETRIEVER")
        span.set_attribute(n.INPUT_VALUE, query)
        for i, doc in enumerate(docs):
            span.set_attribute(n.document_attribute(i, "content"), doc)


def test_two_providers_with_two_processors_stay_independent(otel: Otel) -> None:
    """Two pipelines in one process: each processor judges, emits and counts only its own provider's spans."""
    judge_a, judge_b = FakeJudge(model="judge-a"), FakeJudge(model="judge-b")
    other = _pipeline()
    processor_a = otel.processor(judge_a)
    processor_b = cp_observe.ContextPrecisionProcessor(
        judge_b,
        tracer_provider=other.tracer_provider,
        meter_provider=other.meter_provider,
        logger_provider=otel.logger_provider,
    )
    other.tracer_provider.add_span_processor(processor_b)
    try:
        for i in range(3):
            assert answer(f"a{i} capital of France") == expected(f"a{i} capital of France")
        for i in range(2):
            _foreign_retrieval(other.tracer_provider, f"b{i} bananas potassium", ["Bananas have potassium.", "Rome."])
        assert processor_a.force_flush(10_000) and processor_b.force_flush(10_000)
        assert assert_invariant(processor_a, otel)["reasons"] == {"scored:ok": 3}
        assert assert_invariant(processor_b)["reasons"] == {"scored:ok": 2}
        assert len(judge_a.calls) == 3 and all(call.query.startswith("a") for call in judge_a.calls)
        assert len(judge_b.calls) == 2 and all(call.query.startswith("b") for call in judge_b.calls)
        a_evals = otel.by_name(n.EVALUATION_SPAN_NAME)
        b_evals = [s for s in other.spans.get_finished_spans() if s.name == n.EVALUATION_SPAN_NAME]
        assert {s.attributes[n.CP_JUDGE_MODEL] for s in a_evals} == {"judge-a"} and len(a_evals) == 3
        assert {s.attributes[n.CP_JUDGE_MODEL] for s in b_evals} == {"judge-b"} and len(b_evals) == 2
        assert [s.attributes[n.CP_VERDICTS] for s in b_evals] == [(True, False)] * 2
        assert sum(p.count for p in otel.metric_points(n.METRIC_SCORE)) == 3
        assert _score_count(other.metrics) == 2
        # Shutting one down leaves the other working.
        processor_b.shutdown()
        assert answer("a3 capital of France") == expected("a3 capital of France")
        assert processor_a.force_flush(10_000)
        assert processor_a.stats()["scored"] == 4
    finally:
        processor_b.shutdown()


def test_a_second_processor_does_not_change_the_first_ones_sampling(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Building a rate-0 processor for another provider does not stop the first (rate 1) from judging its calls."""
    otel.runtime.install(capture_content=False)  # the judge can then only work from the in-memory payloads
    processor = otel.processor(cp_observe_judge, sample_rate=1.0)
    other = _pipeline()
    quiet = cp_observe.ContextPrecisionProcessor(
        FakeJudge(model="other"),
        sample_rate=0.0,
        tracer_provider=other.tracer_provider,
        meter_provider=other.meter_provider,
    )
    other.tracer_provider.add_span_processor(quiet)
    try:
        answer("capital of France")
        assert processor.force_flush(10_000)
        [retrieval] = otel.by_name("retrieval kb")
        assert retrieval.attributes[n.CP_SAMPLED] is True
        assert processor.stats()["reasons"] == {"scored:ok": 1}
    finally:
        quiet.shutdown()


def test_no_payloads_are_kept_after_shutdown(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Once the processor is shut down, calls keep no query/contexts/answer in memory."""
    processor = otel.processor(cp_observe_judge)
    answer("before")
    assert processor.force_flush(10_000)
    processor.shutdown()
    for i in range(50):
        answer(f"after {i}")
    assert otel.runtime.payloads_held == 0


def test_calls_on_the_judge_path_are_neither_traced_nor_scored(
    otel: Otel, server: JudgeServer, litellm_ready: None
) -> None:
    """Decorated calls made while judging (sync, async, to_thread, generator) make no spans and no targets."""
    from opentelemetry import context as otel_context
    from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY

    inner = llm_judge(server.url)
    seen: list[Any] = []

    @cp_observe.retriever(name="judge-side")
    def lookup(query: str) -> list[str]:
        return ["Reference material about France."]

    @cp_observe.retriever(name="judge-side")
    def lookup_gen(query: str) -> Iterator[str]:
        yield "More reference material."

    class RetrievingJudge:
        """A judge that looks things up with the application's own decorated retrievers before judging."""

        model = "retrieving-judge"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            seen.append(otel_context.get_value(_SUPPRESS_INSTRUMENTATION_KEY))
            lookup(query)
            await asearch(query)
            await asyncio.to_thread(lookup, query)
            list(lookup_gen(query))
            return await inner.judge(query, reference, contexts)

    processor = otel.processor(RetrievingJudge())
    for i in range(5):
        assert answer(f"host {i} capital of France?") == expected(f"host {i} capital of France?")
    assert processor.force_flush(20_000)
    stats = assert_invariant(processor, otel)
    assert stats["reasons"] == {"scored:ok": 5}
    assert seen == [True] * 5
    assert otel.by_name("retrieval judge-side") == []
    assert len(otel.by_name("retrieval kb")) == 5  # the host's sync retrievals only, not the judge's asearch
    assert server.calls == 5
