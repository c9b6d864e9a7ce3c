"""Nothing the garbage collector can run waits on a lock of ours.

Each scenario of ``tests/processing/gc_reentrancy_support.py`` runs in its own interpreter, with a collection forced
on every line cp-observe executes (in the host's threads and the evaluator's) and garbage whose finalizer reaches our
code:
a deadlock there dumps every thread's stack and fails the test, and cannot poison this session's locks. Before
those paths stopped taking locks, every scenario deadlocked; ARCHITECTURE.md lists the paths and the rule.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

import cp_observe
from cp_observe import ContextPrecisionProcessor
from cp_observe import _names as n
from cp_observe._tally import Tally
from tests.conftest import Otel
from tests.processing.gc_reentrancy_support import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
SCENARIO_TIMEOUT_S = 30


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_collection_inside_our_code_never_deadlocks(scenario: str) -> None:
    """Collections forced on every line of ours, with finalizers that reach us: no deadlock, accounting balanced."""
    env = {**os.environ, "CP_OBSERVE_GC_SCENARIO_TIMEOUT_S": str(SCENARIO_TIMEOUT_S)}
    try:
        run = subprocess.run(
            [sys.executable, "-m", "tests.processing.gc_reentrancy_support", scenario],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S + 30, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{scenario} hung past faulthandler's dump:\n{exc.stderr}")
    assert run.returncode == 0, f"{scenario} failed (a deadlock shows every thread's stack):\n{run.stderr[-12_000:]}"
    result = json.loads(run.stdout.strip().splitlines()[-1])
    if "collections" in result:
        # The scenario really collected inside our code (and so could have deadlocked there).
        assert result["collections"] > 0 and result["finalized"] > 0, result


def _in_thread(action: object, timeout_s: float = 10.0) -> None:
    """Run ``action`` in a daemon thread; fail if it does not return (it waited on a lock)."""
    done = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            action()  # type: ignore[operator]
        except BaseException as exc:  # noqa: BLE001 - reported below
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(timeout_s), "the call waited on a lock"
    assert not failure, failure


def test_tally_add_never_waits_and_loses_nothing() -> None:
    """While the fold lock is held (by another thread, or by this thread re-entered), add returns at once."""
    tally: Tally[str] = Tally()
    tally._lock.acquire()  # stands for a fold interrupted by a collection on this very thread
    try:
        _in_thread(lambda: [tally.add("refused") for _ in range(100)])
        assert bool(tally)
    finally:
        tally._lock.release()
    assert tally.counts() == {"refused": 100}
    assert tally.drain() == {"refused": 100}
    assert tally.counts() == {}


def test_tally_counts_exactly_from_many_threads() -> None:
    """Concurrent adds from several threads are all counted, each once."""
    tally: Tally[int] = Tally()

    def add() -> None:
        for i in range(20_000):
            tally.add(i % 3)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tally.counts() == {0: 26_668, 1: 26_668, 2: 26_664}
    assert tally.total() == 80_000


def test_tally_add_from_a_finalizer_inside_the_fold() -> None:
    """A finalizer that adds, run by a collection inside a fold of the same tally, is counted and never waits."""
    tally: Tally[object] = Tally()

    class AddsWhenCollected:
        def __init__(self) -> None:
            self.cycle = self

        def __del__(self) -> None:
            tally.add("from a finalizer")

    class CollectsWhenCounted:
        """A key whose first hash runs a collection: the fold then holds the lock while the finalizer adds."""

        hashed = 0

        def __hash__(self) -> int:
            self.hashed += 1
            if self.hashed == 1:
                AddsWhenCollected()
                gc.collect()
            return 1

        def __eq__(self, other: object) -> bool:
            return other is self

    key = CollectsWhenCounted()
    _in_thread(lambda: tally.add(key))
    assert key.hashed >= 1
    assert tally.counts() == {key: 1, "from a finalizer": 1}


def test_a_dropped_processor_is_collected() -> None:
    """The meter's queue-depth callback holds the processor weakly: dropped after shutdown, it is collected."""
    processor = ContextPrecisionProcessor(
        "lexical", tracer_provider=TracerProvider(), meter_provider=MeterProvider(shutdown_on_exit=True)
    )
    processor.shutdown()
    ref = weakref.ref(processor)
    del processor
    gc.collect()
    assert ref() is None, "something still holds the dropped processor"


def _ours(frame: Any) -> bool:
    """Whether the caller of ``opentelemetry.context.attach``/``detach`` is cp-observe (not the SDK's exporter)."""
    return frame.f_code.co_filename.startswith(str(ROOT / "cp_observe"))


class _RecordingContext:
    """The OpenTelemetry runtime context, recording each attach and detach of ours made while a collection runs."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.collecting = False
        self.inside: list[str] = []

    def track(self, phase: str, info: dict[str, Any]) -> None:
        self.collecting = phase == "start"

    def attach(self, context: Any) -> object:
        if self.collecting and _ours(sys._getframe(2)):
            self.inside.append("attach")
        return self.real.attach(context)

    def detach(self, token: Any) -> None:
        if self.collecting and _ours(sys._getframe(2)):
            self.inside.append("detach")
        self.real.detach(token)

    def get_current(self) -> Any:
        return self.real.get_current()


@cp_observe.retriever(name="collected")
def _streaming(query: str) -> Iterator[str]:
    yield from (f"{query} {i}" for i in range(4))


@cp_observe.retriever(name="acollected")
async def _astreaming(query: str) -> AsyncIterator[str]:
    for i in range(4):
        yield f"{query} {i}"


@cp_observe.retriever(name="waiting")
async def _waiting(query: str) -> list[str]:
    await _Pending()  # never resumed
    return [query]


class _Pending:
    """An awaitable that suspends once and is never resumed (the coroutine is collected while suspended)."""

    def __await__(self) -> Iterator[None]:
        yield None


def test_spans_ended_by_the_collector_set_no_context_variable(otel: Otel, monkeypatch: pytest.MonkeyPatch) -> None:
    """Generators and async generators collected mid-way end their spans without touching the context.

    CPython frees a context's variables under an interrupted ``ContextVar.set`` when a finalizer sets one of the
    same context (gh-148891): a crash later, anywhere. A call made from a finalizer runs untraced for that reason.
    """
    recording = _RecordingContext(otel_context._RUNTIME_CONTEXT)
    monkeypatch.setattr(otel_context, "_RUNTIME_CONTEXT", recording)
    gc.callbacks.append(recording.track)
    try:
        generator = _streaming("sync")
        next(generator)
        agen = _astreaming("async")
        with contextlib.suppress(StopIteration):
            agen.asend(None).send(None)  # stepped by hand: no loop, so only the collector closes it

        class CallsFromFinalizer:
            def __del__(self) -> None:
                for _ in _streaming("from a finalizer"):
                    pass

        cycle: list[Any] = [generator, agen, CallsFromFinalizer()]
        cycle.append(cycle)
        del generator, agen, cycle
        assert gc.collect() > 0
    finally:
        gc.callbacks.remove(recording.track)
    assert recording.inside == []
    ended = {span.attributes[n.GEN_AI_DATA_SOURCE_ID]: span for span in otel.by_name("retrieval ")}
    assert sorted(ended) == ["acollected", "collected"]  # the finalizer's own call: untraced
    assert ended["collected"].attributes[n.CP_PARTIAL] is True
    assert ended["acollected"].attributes[n.CP_PARTIAL] is True


def test_a_collected_coroutine_leaves_no_span_current(otel: Otel) -> None:
    """A decorated coroutine driven by hand and collected while suspended restores this thread's context."""
    before = trace.get_current_span()
    coroutine = _waiting("coroutine")
    coroutine.send(None)  # suspended in _Pending with its span current in this thread's context
    assert trace.get_current_span() is not before
    cycle: list[Any] = [coroutine]
    cycle.append(cycle)
    del coroutine, cycle
    assert gc.collect() > 0
    assert trace.get_current_span() is before
    [span] = otel.by_name("retrieval waiting")
    assert span.attributes[n.ERROR_TYPE] == "GeneratorExit"
