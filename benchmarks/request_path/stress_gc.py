"""GC stress: decorated generators abandoned in reference cycles, ended by the garbage collector.

Host threads call decorated sync and async generator retrievers, consume each halfway and drop it in a
reference cycle, so that only the cyclic collector finalizes it: its span then ends inside whatever the
collecting thread was doing, possibly inside one of cp_observe's own locked blocks. Every call is sampled,
the processor's queue is tiny and its judge slow, so the queue is full and most ``on_end`` calls refuse
(and count) the target. Plain decorated functions, coroutines, ``@agent`` turns around retrievers, and
processors created, shut down and dropped in cycles (their finalizer runs in the collector) are mixed in.
GC thresholds are lowered so that collections land everywhere. The async generators are driven both inside
an event loop the thread owns (asyncio's asyncgen hooks close them on the loop) and by hand without a loop
(``agen.asend(None).send(None)``), so that nothing but the collector closes them.

A watchdog thread reports a freeze: if a host thread makes no progress for ``--stall-seconds``, it prints
every thread's stack (``faulthandler``) and exits 2. Otherwise, after ``--seconds``, the remaining garbage is
collected, the processor is flushed and shut down, and a table gives the calls per kind, the collections per
generation, the spans ended (and how many ended inside a collection), ``stats()`` and whether
``sampled == scored + failed + dropped + skipped`` holds with nothing pending: exit 0 if it does, 1 if not.

Only the public API: the decorators record to the global SDK tracer provider, whose span processors are the
``ContextPrecisionProcessor`` and a lock-free span counter (the SDK's own export processors take a
non-reentrant lock in ``on_end``, which the same collections would deadlock: not cp_observe's code).
Evaluation spans go to a provider with nothing attached, metrics to an ``InMemoryMetricReader``. No network.

    .venv/bin/python benchmarks/request_path/stress_gc.py [--quick] [--seconds 180] [--threads 3]
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import gc
import itertools
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _common and _peers
import _common as c
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

import cp_observe
from cp_observe import ContextPrecisionProcessor, Judgement, Verdict

# The kinds of call each host thread makes, in table order.
SYNC_GEN = "sync generator, half consumed, dropped in a cycle"
ASYNC_GEN_LOOP = "async generator in the thread's event loop, half consumed, dropped in a cycle"
ASYNC_GEN_HAND = "async generator driven by hand (no loop), half consumed, dropped in a cycle"
SYNC_FUNC = "sync function"
ASYNC_FUNC = "async function (in the loop)"
AGENT_TURN = "@agent turn: a retriever and an abandoned generator inside"
PROCESSOR = "ContextPrecisionProcessor created, shut down, dropped in a cycle"
KINDS: tuple[str, ...] = (SYNC_GEN, ASYNC_GEN_LOOP, ASYNC_GEN_HAND, SYNC_FUNC, ASYNC_FUNC, AGENT_TURN, PROCESSOR)
#: Spans each call of a kind ends (a dropped processor ends none).
SPANS_PER_CALL = {SYNC_GEN: 1, ASYNC_GEN_LOOP: 1, ASYNC_GEN_HAND: 1, SYNC_FUNC: 1, ASYNC_FUNC: 1, AGENT_TURN: 3,
                  PROCESSOR: 0}

HALF = len(c.CONTEXTS) // 2  # items taken from each generator before it is abandoned
EVALUATIONS_METRIC = "context_precision.evaluations"

# --- what the collector does ------------------------------------------------------------------------------------------

#: Collections by generation, written only by the gc callback (collections never overlap: no lock needed).
COLLECTIONS = [0, 0, 0]
#: The thread ident running a collection now, 0 outside one.
COLLECTOR = [0]


def _on_gc(phase: str, info: dict[str, int]) -> None:
    """``gc.callbacks`` entry: counts collections and marks the thread that runs one."""
    if phase == "start":
        COLLECTOR[0] = threading.get_ident()
    else:
        COLLECTOR[0] = 0
        COLLECTIONS[info["generation"]] += 1


class CountingProcessor(SpanProcessor):
    """Counts ended spans, and those ended inside a collection on the collecting thread, without a lock.

    ``itertools.count`` advances atomically under the GIL and never waits, so it is safe where the collector
    may run this (a lock here would deadlock exactly as the bug under test does).
    """

    def __init__(self) -> None:
        self._ended = itertools.count()
        self._in_gc = itertools.count()

    def on_end(self, span: ReadableSpan) -> None:
        """Count the span."""
        next(self._ended)
        if COLLECTOR[0] == threading.get_ident():
            next(self._in_gc)

    def counts(self) -> tuple[int, int]:
        """(spans ended, of which inside a collection); read once, at the end."""
        return next(self._ended), next(self._in_gc)


class SlowJudge:
    """An async judge that sleeps ``latency_s`` per call, so the tiny queue stays full; alternate verdicts."""

    model = "slow-judge"

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Judgement:
        """One verdict per context, after the delay."""
        await asyncio.sleep(self.latency_s)
        return Judgement(verdicts=tuple(Verdict(i, i % 2 == 0, "stress") for i in range(len(contexts))),
                         model=self.model)


# --- the decorated host code ------------------------------------------------------------------------------------------


@cp_observe.retriever(name="kb-stream")
def stream(query: str) -> Iterator[str]:
    """Yields the contexts one by one."""
    yield from c.CONTEXTS


@cp_observe.retriever(name="kb-astream")
async def astream(query: str) -> Any:
    """Yields the contexts one by one, awaiting nothing (so it can be driven without a loop)."""
    for text in c.CONTEXTS:
        yield text


@cp_observe.retriever(name="kb")
def retrieve(query: str) -> list[str]:
    """Returns the contexts."""
    return c.CONTEXTS


@cp_observe.retriever(name="kb-async")
async def aretrieve(query: str) -> list[str]:
    """Returns the contexts."""
    return c.CONTEXTS


def abandon(obj: object) -> None:
    """Put ``obj`` in a reference cycle, so that once the caller drops it only the cyclic collector frees it."""
    holder: list[Any] = [obj]
    holder.append(holder)


@cp_observe.agent(name="assistant")
def answer(query: str) -> str:
    """An agent calling a retriever and abandoning a half-consumed stream."""
    retrieve(query)
    gen = stream(query)
    next(gen)
    abandon(gen)
    del gen
    return c.ANSWER


def drive_by_hand(agen: Any, items: int) -> None:
    """Take ``items`` from an async generator without an event loop: each ``asend`` completes at once."""
    for _ in range(items):
        try:
            agen.asend(None).send(None)
        except StopIteration:
            continue
        raise RuntimeError("the async generator awaited something; it cannot be driven by hand")


# --- host threads and the watchdog ------------------------------------------------------------------------------------


class Host:
    """One host thread's loop; its counters are written by that thread only and read at the end."""

    def __init__(self, index: int, stop_at: float, processor_every: int, make_processor: Callable[[], Any]) -> None:
        self.index = index
        self.name = f"host-{index}"
        self.stop_at = stop_at
        self.processor_every = processor_every
        self.make_processor = make_processor
        self.calls = dict.fromkeys(KINDS, 0)
        self.progress = time.monotonic()
        self.step = "starting"
        self.done = False
        self.error: str | None = None
        self.thread = threading.Thread(target=self.run, name=self.name, daemon=True)

    def mark(self, step: str) -> None:
        """Record progress: the watchdog reads ``progress`` and ``step``."""
        self.progress = time.monotonic()
        self.step = step

    def run(self) -> None:
        """Loop until ``stop_at``; any exception is recorded (and fails the run), never a silent stop."""
        loop = asyncio.new_event_loop()
        try:
            self._loop(loop)
            self.mark("closing its event loop")
            loop.run_until_complete(loop.shutdown_asyncgens())  # closes the loop-driven generators still alive
        except BaseException:  # noqa: BLE001 - reported in the table and by the exit code
            self.error = traceback.format_exc()
        finally:
            loop.close()
            self.done = True

    def _loop(self, loop: asyncio.AbstractEventLoop) -> None:
        calls = self.calls
        for i in itertools.count():
            if time.monotonic() >= self.stop_at:
                return
            query = f"{c.QUERY} ({self.name}, call {i})"
            self.mark(SYNC_GEN)
            gen = stream(query)
            for _ in range(HALF):
                next(gen)
            abandon(gen)
            del gen
            calls[SYNC_GEN] += 1

            self.mark(ASYNC_GEN_HAND)
            agen = astream(query)
            drive_by_hand(agen, HALF)
            abandon(agen)
            del agen
            calls[ASYNC_GEN_HAND] += 1

            self.mark(SYNC_FUNC)
            retrieve(query)
            calls[SYNC_FUNC] += 1

            self.mark(AGENT_TURN)
            answer(query)
            calls[AGENT_TURN] += 1

            self.mark(ASYNC_GEN_LOOP)
            loop.run_until_complete(self._in_loop(query))
            calls[ASYNC_GEN_LOOP] += 1
            calls[ASYNC_FUNC] += 1

            if self.processor_every and i % self.processor_every == 0:
                self.mark(PROCESSOR)
                dropped = self.make_processor()
                dropped.shutdown()
                abandon(dropped)
                del dropped
                calls[PROCESSOR] += 1

    async def _in_loop(self, query: str) -> None:
        await aretrieve(query)
        agen = astream(query)
        for _ in range(HALF):
            await agen.__anext__()
        abandon(agen)
        del agen


class Watchdog:
    """Reports a freeze: a host thread with no progress for ``stall_s``, or a finish that overruns its deadline.

    A thread blocked on a lock releases the GIL, so this thread keeps running when the hosts are frozen.
    """

    def __init__(self, hosts: list[Host], stall_s: float, started: float) -> None:
        self.hosts = hosts
        self.stall_s = stall_s
        self.started = started
        self.longest_gap = 0.0
        self.finish_by: float | None = None  # set by the main thread before it flushes and shuts down
        self.finish_step = ""
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="watchdog", daemon=True)

    def run(self) -> None:
        """Check every quarter second."""
        while not self._stop.wait(0.25):
            now = time.monotonic()
            for host in self.hosts:
                if host.done:
                    continue
                gap = now - host.progress
                self.longest_gap = max(self.longest_gap, gap)
                if gap > self.stall_s:
                    self.freeze(f"{host.name} made no progress for {gap:.1f} s (at: {host.step})")
            if self.finish_by is not None and now > self.finish_by:
                self.freeze(f"the main thread overran its deadline at: {self.finish_step}")

    def freeze(self, why: str) -> None:
        """Print what froze, every thread's stack, and exit 2 at once (the frozen threads never return)."""
        elapsed = time.monotonic() - self.started
        calls = sum(sum(host.calls.values()) for host in self.hosts)
        print(f"\n## GC stress: FROZE after {elapsed:.1f} s\n", flush=True)
        print(f"- {why}", flush=True)
        for host in self.hosts:
            print(f"- {host.name}: last progress {time.monotonic() - host.progress:.1f} s ago, at: {host.step}",
                  flush=True)
        print(f"- calls so far: {calls}; gc collections by generation: {COLLECTIONS}", flush=True)
        print("- every thread's stack follows on stderr (faulthandler)", flush=True)
        sys.stderr.write(f"\nstress_gc: FROZE: {why}\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(2)

    def stop(self) -> None:
        """Stop checking."""
        self._stop.set()


# --- the run ----------------------------------------------------------------------------------------------------------


def _evaluations_by_outcome(reader: InMemoryMetricReader) -> dict[str, int]:
    """The ``context_precision.evaluations`` counter summed by outcome."""
    totals: dict[str, int] = {}
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data is not None else ():
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                if metric.name != EVALUATIONS_METRIC:
                    continue
                for point in metric.data.data_points:
                    if not isinstance(point, NumberDataPoint):
                        continue
                    outcome = str(point.attributes.get("outcome", "?")) if point.attributes else "?"
                    totals[outcome] = totals.get(outcome, 0) + int(point.value)
    return totals


def _thresholds(text: str) -> tuple[int, int, int] | None:
    if text == "default":
        return None
    parts = tuple(int(p) for p in text.split(","))
    if len(parts) != 3 or parts[0] < 1:
        raise argparse.ArgumentTypeError("--gc-threshold takes three integers a,b,c (a >= 1), or 'default'")
    return parts[0], parts[1], parts[2]


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 - one linear script
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="25 s instead of 180 s")
    parser.add_argument("--seconds", type=float, default=None, help="how long the host threads run (default 180)")
    parser.add_argument("--threads", type=int, default=3, help="host threads")
    parser.add_argument("--stall-seconds", type=float, default=20.0,
                        help="a host thread without progress this long is a freeze: stacks dumped, exit 2")
    parser.add_argument("--queue-size", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--judge-latency-ms", type=float, default=50.0)
    parser.add_argument("--gc-threshold", type=_thresholds, default=(10, 2, 2),
                        help="gc.set_threshold(a, b, c) during the run, as a,b,c; 'default' leaves them (10,2,2)")
    parser.add_argument("--processor-every", type=int, default=10,
                        help="each host thread creates, shuts down and drops a processor every N rounds (0: never)")
    parser.add_argument("--flush-timeout", type=float, default=60.0, help="seconds for the final force_flush")
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (25.0 if args.quick else 180.0)
    c.offline_env()
    blocked = c.block_network()
    faulthandler.enable()  # a crash, too, prints every thread's stack

    judge = SlowJudge(args.judge_latency_ms / 1000)
    evaluation_provider = TracerProvider()  # evaluation spans: emitted on the evaluator thread, kept nowhere
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    logger_provider = LoggerProvider()
    provider = TracerProvider()
    counter = CountingProcessor()
    provider.add_span_processor(counter)
    trace.set_tracer_provider(provider)  # the decorators record to the global provider
    processor = ContextPrecisionProcessor(
        judge, sample_rate=1.0, queue_size=args.queue_size, concurrency=args.concurrency,
        tracer_provider=evaluation_provider, meter_provider=meter_provider, logger_provider=logger_provider,
    )
    provider.add_span_processor(processor)

    def make_processor() -> ContextPrecisionProcessor:
        return ContextPrecisionProcessor(judge, sample_rate=1.0, queue_size=1, concurrency=1,
                                         tracer_provider=evaluation_provider, shutdown_timeout_s=5.0)

    # Everything set up so far is long-lived: frozen out of the collector's way, so each (frequent) collection
    # looks at the run's own objects only.
    gc.collect()
    gc.freeze()
    gc.callbacks.append(_on_gc)
    old_thresholds = gc.get_threshold()
    if args.gc_threshold is not None:
        gc.set_threshold(*args.gc_threshold)

    print(f"stress: {args.threads} host threads for {seconds:g} s", file=sys.stderr, flush=True)
    started = time.monotonic()
    hosts = [Host(i, started + seconds, args.processor_every, make_processor) for i in range(args.threads)]
    watchdog = Watchdog(hosts, args.stall_seconds, started)
    watchdog.thread.start()
    for host in hosts:
        host.thread.start()
    for host in hosts:
        while host.thread.is_alive():
            host.thread.join(1.0)
    duration = time.monotonic() - started

    # The garbage left when the hosts stopped ends its spans now, before the flush; then drain and stop.
    watchdog.finish_by = time.monotonic() + args.stall_seconds + args.flush_timeout + processor.shutdown_timeout_s
    watchdog.finish_step = "gc.collect() of the remaining garbage"
    gc.collect()
    watchdog.finish_step = "force_flush"
    flush_start = time.monotonic()
    flushed = processor.force_flush(int(args.flush_timeout * 1000))
    watchdog.finish_step = "shutdown"
    processor.shutdown()
    finish_seconds = time.monotonic() - flush_start
    gc.collect()
    watchdog.stop()
    gc.callbacks.remove(_on_gc)
    gc.set_threshold(*old_thresholds)
    final = processor.stats()
    spans, spans_in_gc = counter.counts()
    metric = _evaluations_by_outcome(reader)

    calls = {kind: sum(host.calls[kind] for host in hosts) for kind in KINDS}
    total_calls = sum(v for k, v in calls.items() if k != PROCESSOR)
    expected_spans = sum(calls[k] * SPANS_PER_CALL[k] for k in KINDS)
    accounted = final["scored"] + final["failed"] + final["dropped"] + final["skipped"]
    holds = final["sampled"] == accounted and final["pending"] == 0
    errors = [host for host in hosts if host.error is not None]
    thresholds = ",".join(map(str, args.gc_threshold)) if args.gc_threshold is not None else "default"

    print(f"## GC stress: {args.threads} host threads for {seconds:g} s, every call sampled, queue "
          f"{args.queue_size}, judge {args.judge_latency_ms:g} ms x concurrency {args.concurrency}, "
          f"gc thresholds {thresholds}\n")
    print(f"Machine: {c.machine_line()}\n")
    print(c.markdown_table(["calls", "count", "per s"],
                           [[kind, calls[kind], f"{calls[kind] / duration:.0f}"] for kind in KINDS]))
    top = sorted(final["reasons"].items(), key=lambda kv: -kv[1])[:6]
    summary: list[list[Any]] = [
        ["duration (s)", f"{duration:.1f}"],
        ["host threads", args.threads],
        ["calls, all kinds (decorated)", total_calls],
        ["calls/s", f"{total_calls / duration:.0f}"],
        ["gc collections (gen 0 / 1 / 2)", f"{sum(COLLECTIONS)} ({' / '.join(map(str, COLLECTIONS))})"],
        ["gc collections/s", f"{sum(COLLECTIONS) / duration:.0f}"],
        ["spans ended (expected)", f"{spans} ({expected_spans})"],
        ["spans ended inside a collection, on the collecting thread", spans_in_gc],
        ["longest a host thread went without progress (s)", f"{watchdog.longest_gap:.2f}"],
        ["sampled", final["sampled"]],
        ["scored", final["scored"]],
        ["failed", final["failed"]],
        ["dropped", final["dropped"]],
        ["skipped", final["skipped"]],
        ["pending after flush and shutdown", final["pending"]],
        ["top reasons", ", ".join(f"{k} {v}" for k, v in top) or "-"],
        [f"metric {EVALUATIONS_METRIC} by outcome", ", ".join(f"{k} {v}" for k, v in sorted(metric.items())) or "-"],
        ["flush + shutdown (s)", f"{finish_seconds:.1f} ({'drained' if flushed else 'flush timed out'})"],
        ["host thread errors", len(errors)],
        ["sampled == scored + failed + dropped + skipped",
         f"{'yes' if holds else 'NO'} ({final['sampled']} == {accounted}, pending {final['pending']})"],
    ]
    print("\n### Totals\n")
    print(c.markdown_table(["what", "value"], summary))
    print(f"\nNon-loopback network attempts refused during the run: {blocked.total} {blocked.attempts or ''}")
    for host in errors:
        print(f"\n{host.name} stopped on an error:\n{host.error}", file=sys.stderr)
    return 0 if holds and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
