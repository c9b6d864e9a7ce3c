"""Scenarios that make the garbage collector run cp-observe's finalizer paths *inside* cp-observe's own code.

Run as ``python -m tests.processing.gc_reentrancy_support SCENARIO`` (``tests/processing/test_gc_reentrancy.py``
does, one subprocess per scenario: a deadlock there cannot poison the test session's locks). Automatic collection
is off; instead a trace
function runs on every line that cp-observe executes, in every thread (the host's and the evaluator's), and at each
line makes garbage whose finalizer reaches cp-observe and collects it right there. Whatever lock of ours is held
at that line is held while the finalizer runs, exactly as when the collector lands on an allocation inside the
critical section (the line-by-line version of loguru's test for its PR #720). A finalizer path that waits on a
lock the same thread holds deadlocks; ``faulthandler`` then dumps every thread's stack and exits non-zero.

The garbage of each scenario is what a host really leaves behind: a decorated generator (sync or async) abandoned
half-consumed in a reference cycle, whose collection ends its span (``finish`` -> ``span.end`` -> ``on_end`` ->
``Evaluator.submit``); an object whose ``__del__`` calls a decorated function (user code in a finalizer); a
processor dropped in a cycle (its ``weakref.finalize`` unregisters its sampler).

On success a scenario prints one JSON line: how many collections landed inside cp-observe, how many finalizers ran,
and the processor's accounting, which must balance.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import gc
import json
import os
import random
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

import cp_observe
from cp_observe import ContextPrecisionProcessor, Judgement, Usage, Verdict

DEADLOCK_TIMEOUT_S = float(os.environ.get("CP_OBSERVE_GC_SCENARIO_TIMEOUT_S", "30"))  # only a hang gets there
_PACKAGE = str(Path(cp_observe.__file__).parent)


# --- the parts of a host ----------------------------------------------------------------------------------------
class SlowJudge:
    """A judge that takes ``delay_s`` per call (so a small queue stays full) and finds every context relevant."""

    model = "slow-judge"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Judgement:
        """One verdict per context, after the delay."""
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        verdicts = tuple(Verdict(i, True, "relevant") for i in range(len(contexts)))
        return Judgement(verdicts=verdicts, model=self.model, usage=Usage(calls=1), cost_usd=None)


class Downstream(SpanProcessor):
    """An export processor that only counts (a deque append: reentrant, unlike the SDK's exporters' locks)."""

    def __init__(self) -> None:
        self.ended: deque[str] = deque(maxlen=100_000)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do."""

    def on_end(self, span: ReadableSpan) -> None:
        """Count the span."""
        self.ended.append(span.name)


def provider() -> TracerProvider:
    """A provider whose only other processor is lock-free, so every lock a finalizer meets is cp-observe's."""
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(Downstream())
    return tracer_provider


def processor(tracer_provider: TracerProvider, **kwargs: Any) -> ContextPrecisionProcessor:
    """A processor scoring every call, wired to ``tracer_provider`` (which the decorators then follow)."""
    kwargs.setdefault("judge", SlowJudge())
    made = ContextPrecisionProcessor(
        tracer_provider=tracer_provider, meter_provider=_meters(), shutdown_timeout_s=5.0, **kwargs
    )
    if "export_processor" not in kwargs:
        tracer_provider.add_span_processor(made)
    return made


@cp_observe.retriever(name="docs")
def search(query: str) -> Iterator[str]:
    """A streaming retriever."""
    for i in range(6):
        yield f"document {i} about {query}"


@cp_observe.retriever(name="adocs")
async def asearch(query: str) -> Any:
    """A streaming async retriever."""
    for i in range(6):
        yield f"document {i} about {query}"


def _raising_extractor(result: Any) -> Any:
    raise ValueError("the user's extractor fails")


@cp_observe.retriever(name="broken", context_extractor=_raising_extractor)
def broken_search(query: str) -> Iterator[str]:
    """A streaming retriever whose user-supplied extractor raises (a user error, counted by the boundary)."""
    yield f"document about {query}"
    yield "another document"


@cp_observe.retriever(name="plain")
def plain_search(query: str) -> list[str]:
    """A plain retriever."""
    return [f"document about {query}", "another document"]


def _raising_query(*args: Any) -> str:
    raise ValueError("the user's query getter fails")


@cp_observe.retriever(name="badquery", query=_raising_query)
def bad_query_search(query: str) -> list[str]:
    """A retriever whose user-supplied ``query=`` raises (another site of the error boundary)."""
    return ["a document"]


# --- garbage whose finalizer reaches cp-observe -----------------------------------------------------------------
def abandoned_generator(make: Callable[[str], Iterator[str]] = search) -> list[Any]:
    """A decorated generator consumed halfway and left in a reference cycle (only the collector frees it)."""
    generator = make("abandoned")
    next(generator)
    cycle: list[Any] = [generator]
    cycle.append(cycle)
    return cycle


def abandoned_async_generator() -> list[Any]:
    """A decorated async generator stepped by hand (no event loop, so no asyncgen hooks) and left in a cycle.

    Collected, it is closed synchronously by the interpreter: its span ends inside the collector.
    """
    generator = asearch("abandoned")
    step = generator.asend(None)
    with contextlib.suppress(StopIteration):  # the first item: the coroutine finishes without suspending
        step.send(None)
    cycle: list[Any] = [generator]
    cycle.append(cycle)
    return cycle


class CallsInDel:
    """User code in a finalizer: ``__del__`` calls a decorated function (here inside ``force_evaluation``)."""

    def __init__(self, forced: bool) -> None:
        self.forced = forced
        self.cycle = self

    def __del__(self) -> None:
        if self.forced:
            with cp_observe.force_evaluation():
                plain_search("from a finalizer")
        else:
            plain_search("from a finalizer")


# --- collecting inside cp-observe ------------------------------------------------------------------------------
class CollectInside:
    """A trace function that, on lines of cp-observe (optionally only in ``files``), collects fresh garbage."""

    def __init__(self, make: Callable[[], object], *, files: Sequence[str] = (), limit: int = 3000,
                 pool: deque[object] | None = None, every: int = 1) -> None:
        self.make = make
        # Collect on one line in ``every`` only, chosen by a seeded generator (the same lines each run): a finalizer
        # that restores an invariant at every line would keep the traced code from ever restoring it itself, and a
        # fixed stride can fall in step with a loop and miss the same lines every time.
        self.every = every
        self._chance = random.Random(21)
        self.files = tuple(os.path.join(_PACKAGE, f) for f in files) or (_PACKAGE,)
        self.limit = limit
        self.pool = pool  # garbage prepared in advance (popped first), for garbage too costly to make per line
        self.collections = 0  # collections that landed on a line of ours
        self.finalized = 0  # objects the collector freed there

    def _collect(self) -> None:
        if self.collections >= self.limit:
            return
        self.collections += 1
        garbage: object = None
        if self.pool is not None:
            try:
                garbage = self.pool.pop()
            except IndexError:
                return
        else:
            garbage = self.make()
        del garbage  # only the cycle holds it now
        self.finalized += gc.collect()

    def _line(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and (self.every == 1 or self._chance.randrange(self.every) == 0):
            self._collect()
        return self._line

    def _call(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code.co_filename.startswith(self.files):
            return self._line
        return None

    def __enter__(self) -> CollectInside:
        sys.settrace(self._call)
        threading.settrace(self._call)  # threads started from now on: the evaluator's, the sinks'
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]


def _untraced_threads_stop_tracing() -> None:
    """Stop tracing the threads we traced (a thread's trace function is its own)."""
    sys.settrace(None)


# --- the scenarios ----------------------------------------------------------------------------------------------
def _balanced(made: ContextPrecisionProcessor) -> dict[str, Any]:
    assert made.force_flush(20_000), "the processor did not go idle"
    stats = made.stats()
    outcomes = stats["scored"] + stats["failed"] + stats["dropped"] + stats["skipped"]
    assert stats["pending"] == 0 and stats["sampled"] == outcomes, stats
    return stats


def _calls(n: int) -> None:
    for i in range(n):
        for document in search(f"query {i}"):
            del document
        plain_search(f"query {i}")


def on_end_queue_full() -> dict[str, Any]:
    """Host thread: abandoned generators end spans while a full queue refuses them (``submit``, accounting)."""
    tracer_provider = provider()
    made = processor(tracer_provider, judge=SlowJudge(0.2), queue_size=1)
    with CollectInside(abandoned_generator, limit=1500) as inside:
        _calls(60)
    stats = _balanced(made)
    assert stats["reasons"].get("dropped:queue_full", 0) > 0, stats
    return {"collections": inside.collections, "finalized": inside.finalized, "stats": stats}


def evaluator_thread() -> dict[str, Any]:
    """Evaluator thread: host generators it collects end spans while it counts, assembles and emits."""
    tracer_provider = provider()
    with CollectInside(abandoned_generator, limit=3000) as inside:
        made = processor(tracer_provider, queue_size=2)  # created inside: its thread is traced
        _untraced_threads_stop_tracing()  # the host thread only calls; the evaluator thread collects
        for i in range(40):
            plain_search(f"query {i}")
            time.sleep(0.01)
        stats = _balanced(made)
    assert stats["scored"] > 0, stats
    return {"collections": inside.collections, "finalized": inside.finalized, "stats": stats}


def async_generators() -> dict[str, Any]:
    """Async generators stepped without a loop, collected inside our code: their spans end in the collector."""
    tracer_provider = provider()
    made = processor(tracer_provider, judge=SlowJudge(0.1), queue_size=1)
    with CollectInside(abandoned_async_generator, limit=1500) as inside:
        _calls(40)
    stats = _balanced(made)
    return {"collections": inside.collections, "finalized": inside.finalized, "stats": stats}


def payload_eviction() -> dict[str, Any]:
    """The payload store, full, evicts while finalizers store more payloads."""
    from cp_observe._capture._payloads import PAYLOADS
    from cp_observe.testing import IsolatedRuntime

    # A store of 10,000 would need 10,000 untaken payloads to evict.
    with IsolatedRuntime(payload_capacity=2):
        tracer_provider = provider()
        # A processor that is not on the provider: calls are marked sampled and keep their payload for it, but no
        # on_end ever takes them (as when the processor serves another provider), so the store fills and evicts.
        ContextPrecisionProcessor(SlowJudge(), tracer_provider=tracer_provider, meter_provider=_meters(),
                                  shutdown_timeout_s=1.0)
        with CollectInside(abandoned_generator, files=("_capture/_payloads.py",), limit=1500,
                           every=3) as inside:
            _calls(40)
    assert PAYLOADS.evicted > 0, "nothing was evicted: the scenario did not reach eviction"
    return {"collections": inside.collections, "finalized": inside.finalized, "evicted": PAYLOADS.evicted}


def hold() -> dict[str, Any]:
    """Hold mode: the evaluator thread releases and expires held spans while host spans end in its collector."""
    tracer_provider = TracerProvider()
    downstream = Downstream()
    with CollectInside(abandoned_generator, files=("_processing/_hold.py", "_processing/_processor.py"),
                       limit=3000) as inside:
        made = processor(tracer_provider, export_processor=downstream, hold_timeout_s=0.05, max_held_spans=3)
        tracer_provider.add_span_processor(made)
        _untraced_threads_stop_tracing()
        for i in range(40):
            plain_search(f"query {i}")
            time.sleep(0.01)
        stats = _balanced(made)
    assert stats["scored"] > 0, stats
    assert downstream.ended, "nothing was exported downstream"
    return {"collections": inside.collections, "finalized": inside.finalized, "stats": stats}


def error_boundary() -> dict[str, Any]:
    """The error boundary counts a user error while a finalizer reports another (its counts and the logger)."""
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # so the boundary's first lines really log
    from cp_observe import _internal

    tracer_provider = provider()
    made = processor(tracer_provider, queue_size=4)
    with CollectInside(lambda: abandoned_generator(broken_search), files=("_internal.py", "_log.py"),
                       limit=1500) as inside:
        for i in range(30):
            bad_query_search(f"query {i}")
    stats = _balanced(made)
    counts = _internal.error_counts()
    assert counts.get("user:query") == 30, counts
    assert counts.get("user:context_extractor", 0) >= 1, counts
    return {"collections": inside.collections, "finalized": inside.finalized, "stats": stats, "errors": counts}


def forced_from_finalizer() -> dict[str, Any]:
    """User code in ``__del__`` calls a decorated function in ``force_evaluation`` while we record a forced trace."""
    tracer_provider = provider()
    made = processor(tracer_provider, sample_rate=0.0, queue_size=1000)
    with CollectInside(lambda: CallsInDel(forced=True), files=("_config/_sampling.py",), limit=1500) as inside:
        for i in range(40):
            with cp_observe.force_evaluation():
                plain_search(f"query {i}")
    stats = _balanced(made)
    assert stats["sampled"] >= 40, stats
    return {"collections": inside.collections, "finalized": inside.finalized, "stats": stats}


def _meters() -> MeterProvider:
    """A meter provider that, unlike the default, registers no atexit hook (which would keep the processor alive)."""
    return MeterProvider(shutdown_on_exit=False)


def _dropped_processor() -> list[Any]:
    """A processor, shut down and left in a reference cycle: collecting it runs its ``weakref.finalize``."""
    made = ContextPrecisionProcessor(SlowJudge(), tracer_provider=TracerProvider(), meter_provider=_meters(),
                                     shutdown_timeout_s=1.0)
    made.shutdown()
    cycle: list[Any] = [made]
    cycle.append(cycle)
    return cycle


def register_sampler() -> dict[str, Any]:
    """Processors are created while dropped ones are collected: their finalizers unregister their samplers."""
    pool: deque[object] = deque(_dropped_processor() for _ in range(60))
    with CollectInside(lambda: None, files=("_config/_runtime.py",), pool=pool, limit=3000) as inside:
        kept = [processor(provider()) for _ in range(8)]
    for made in kept:
        made.shutdown()
    collected = 60 - len(pool)
    assert collected >= 8, f"only {collected} dropped processors were collected inside our code"
    return {"collections": inside.collections, "finalized": inside.finalized, "processors collected": collected}


def processors_from_threads() -> dict[str, Any]:
    """Several threads create, shut down and drop processors while dropped ones are collected inside our code."""
    errors: list[BaseException] = []
    pool: deque[object] = deque(_dropped_processor() for _ in range(60))

    def churn() -> None:
        try:
            for _ in range(6):
                cycle = _dropped_processor()
                pool.appendleft(cycle)  # collected later, on some thread's line of ours
                del cycle
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    with CollectInside(lambda: None, files=("_config/_runtime.py",), pool=pool, limit=3000) as inside:
        threads = [threading.Thread(target=churn, name=f"churn-{i}") for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors, errors
    return {"collections": inside.collections, "finalized": inside.finalized, "left": len(pool)}


def after_fork() -> dict[str, Any]:
    """In a forked child, the first span (ending in a finalizer) starts the evaluator thread anew."""
    tracer_provider = provider()
    made = processor(tracer_provider, queue_size=10)
    plain_search("before the fork")
    assert made.force_flush(10_000)
    pid = os.fork()
    if pid == 0:  # the child: one thread, no evaluator thread until the next span
        code = 1
        signal.alarm(int(DEADLOCK_TIMEOUT_S))  # dies by itself (SIGALRM) should the parent be gone
        try:
            with CollectInside(abandoned_generator, files=("_processing/_evaluator.py",), limit=500):
                _calls(10)
            stats = _balanced(made)
            code = 0 if stats["sampled"] >= 10 else 3
        finally:
            os._exit(code)
    # The child cannot arm faulthandler's timer (the parent's timer thread is gone there, and re-arming waits
    # for it): the parent watches, and on a hang sends SIGABRT, which faulthandler (inherited) turns into a dump.
    deadline = time.monotonic() + DEADLOCK_TIMEOUT_S / 2
    while (waited := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGABRT)
            waited = os.waitpid(pid, 0)
            break
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(waited[1]) == 0, f"the forked child failed: {waited[1]}"
    return {"child": "ok", "stats": _balanced(made)}


SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    f.__name__: f
    for f in (on_end_queue_full, evaluator_thread, async_generators, payload_eviction, hold, error_boundary,
              forced_from_finalizer, register_sampler, processors_from_threads, after_fork)
}


def main(argv: Sequence[str]) -> int:
    """Run one scenario; a deadlock dumps every thread's stack and exits 1 (``faulthandler``)."""
    faulthandler.enable()  # SIGABRT dumps every thread's stack (a forked child's hang is reported that way)
    faulthandler.dump_traceback_later(DEADLOCK_TIMEOUT_S, exit=True)
    gc.disable()  # collections happen only where the scenario puts them
    gc.collect()
    gc.freeze()  # what imports made is never looked at again: each collection sees only fresh objects
    result = SCENARIOS[argv[0]]()
    faulthandler.cancel_dump_traceback_later()
    print(json.dumps(result, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
