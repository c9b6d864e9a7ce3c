"""Sustained load: decorated agent+retriever turns at ~1,000/s for a minute, 10 % sampled, with a judge slower
than the arrival rate. Shows that memory, queue depth and drops stay bounded and that everything is counted.

Several threads run paced turns (an ``@agent`` calling an ``@retriever`` that returns five 500-character
contexts). The processor's ``LLMJudge`` calls a loopback ``JudgeServer`` in a child process whose latency,
with the processor's concurrency limit, allows far fewer evaluations per second than are sampled, so the
bounded queue fills and drops (counted). A monitor thread records RSS, queue depth and the counters every
second. The same loop runs first without cp_observe (plain functions, same pacing) for the added-latency
baseline. After the loaded phase, ``force_flush`` drains the queue and the accounting invariant
``sampled == scored + failed + dropped + skipped`` is checked.

    .venv/bin/python benchmarks/bench_sustained_load.py [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import _common as c
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

import cp_observe
from cp_observe import ContextPrecisionProcessor, LLMJudge

_ANSWER = "Backups are kept for thirty days after an account is deleted; support can restore them in that window."


class CountingSink(SpanProcessor):
    """Counts ended spans and keeps none, so the exporter side holds no memory of its own."""

    def __init__(self) -> None:
        self.ended = 0

    def on_end(self, span: ReadableSpan) -> None:
        """Count the span."""
        self.ended += 1


def plain_turn() -> Callable[[str], str]:
    """The undecorated turn: the baseline."""

    def retrieve(query: str) -> list[str]:
        return c.CONTEXTS

    def answer(query: str) -> str:
        retrieve(query)
        return _ANSWER

    return answer


def decorated_turn() -> Callable[[str], str]:
    """The same turn with ``@agent`` around a call to an ``@retriever``."""

    @cp_observe.retriever(name="kb")
    def retrieve(query: str) -> list[str]:
        return c.CONTEXTS

    @cp_observe.agent(name="assistant")
    def answer(query: str) -> str:
        retrieve(query)
        return _ANSWER

    return answer


@dataclass
class Phase:
    """What one run of the paced loop measured."""

    turns: int = 0
    seconds: float = 0.0
    latencies_us: list[float] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)


def _driver(turn: Callable[[str], str], interval: float, stop_at: float, out: list[float], index: int) -> None:
    """Call ``turn`` every ``interval`` seconds until ``stop_at``; keeps each call's latency in µs."""
    perf = time.perf_counter
    next_at = perf()
    i = 0
    while True:
        now = perf()
        if now >= stop_at:
            return
        if next_at > now:
            time.sleep(next_at - now)
        elif now - next_at > 1.0:
            next_at = now  # more than a second behind: do not burst to catch up
        start = perf()
        turn(f"{c.QUERY} (thread {index}, turn {i})")
        out.append((perf() - start) * 1e6)
        i += 1
        next_at += interval


def run_phase(turn: Callable[[str], str], seconds: float, rate: float, threads: int,
              monitor: Callable[[float], dict[str, Any]] | None) -> Phase:
    """Drive ``turn`` from ``threads`` threads at ``rate`` turns/s in total for ``seconds``."""
    phase = Phase()
    per_thread: list[list[float]] = [[] for _ in range(threads)]
    start = time.perf_counter()
    stop_at = start + seconds
    workers = [
        threading.Thread(target=_driver, args=(turn, threads / rate, stop_at, per_thread[i], i), daemon=True)
        for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    while any(worker.is_alive() for worker in workers):
        time.sleep(1.0)
        if monitor is not None:
            sample = monitor(time.perf_counter() - start)
            sample["turns"] = sum(len(x) for x in per_thread)
            phase.samples.append(sample)
    for worker in workers:
        worker.join()
    phase.seconds = time.perf_counter() - start
    phase.latencies_us = [x for xs in per_thread for x in xs]
    phase.turns = len(phase.latencies_us)
    return phase


def _monitor(processor: ContextPrecisionProcessor) -> Callable[[float], dict[str, Any]]:
    def sample(elapsed: float) -> dict[str, Any]:
        stats = processor.stats()
        return {"t": elapsed, "rss": c.rss_mib(), "depth": stats["pending"], "sampled": stats["sampled"],
                "scored": stats["scored"], "dropped": stats["dropped"], "failed": stats["failed"],
                "skipped": stats["skipped"]}

    return sample


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 s loaded phase instead of 60 s")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--rate", type=float, default=1000.0, help="turns per second, all threads together")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--sample-rate", type=float, default=0.1)
    parser.add_argument("--judge-latency-ms", type=float, default=200.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--queue-size", type=int, default=200)
    args = parser.parse_args(argv)
    seconds = args.seconds or (10.0 if args.quick else 60.0)
    baseline_seconds = min(seconds, 5.0 if args.quick else 20.0)
    c.offline_env()
    blocked = c.block_network()

    print(f"baseline: {baseline_seconds:g} s without cp_observe", file=sys.stderr, flush=True)
    baseline = run_phase(plain_turn(), baseline_seconds, args.rate, args.threads, None)

    latency_s = args.judge_latency_ms / 1000
    with c.judge_server_process(latency_s) as url:
        judge = LLMJudge("openai/judge-test", api_base=url, api_key="sk-test", max_retries=0, timeout=latency_s + 30)
        tracer, meter, logger = c.cp_providers()
        processor = ContextPrecisionProcessor(judge, sample_rate=args.sample_rate, concurrency=args.concurrency,
                                              queue_size=args.queue_size, tracer_provider=tracer,
                                              meter_provider=meter, logger_provider=logger)
        provider, sink = TracerProvider(), CountingSink()
        provider.add_span_processor(sink)
        provider.add_span_processor(processor)
        c.use_cp_provider(provider, args.sample_rate)
        turn = decorated_turn()
        for i in range(200):  # warm-up: litellm import on the first sampled turn, first connection
            turn(f"warm-up {i}")
        processor.force_flush(60_000)
        rss_start = c.rss_mib()
        print(f"loaded: {seconds:g} s with cp_observe", file=sys.stderr, flush=True)
        loaded = run_phase(turn, seconds, args.rate, args.threads, _monitor(processor))
        rss_end_of_load = c.rss_mib()
        flush_start = time.perf_counter()
        flushed = processor.force_flush(120_000)
        flush_seconds = time.perf_counter() - flush_start
        final = processor.stats()
        processor.shutdown()

    _report(args, seconds=seconds, baseline=baseline, loaded=loaded, final=final, rss_start=rss_start,
            rss_end=rss_end_of_load, flushed=flushed, flush_seconds=flush_seconds, spans=sink.ended)
    print(f"\nNon-loopback network attempts refused during the run: {blocked.total} {blocked.attempts or ''}")
    return 0


def _report(args: argparse.Namespace, *, seconds: float, baseline: Phase, loaded: Phase, final: dict[str, Any],
            rss_start: float, rss_end: float, flushed: bool, flush_seconds: float, spans: int) -> None:
    capacity = args.concurrency / (args.judge_latency_ms / 1000)
    print(f"## Sustained load: {args.threads} threads, target {args.rate:g} turns/s for {seconds:g} s, "
          f"{args.sample_rate:.0%} sampled, judge {args.judge_latency_ms:g} ms x concurrency {args.concurrency} "
          f"(at most {capacity:.0f} evaluations/s), queue {args.queue_size}\n")
    print(f"Machine: {c.machine_line()}\n")
    pct = c.percentile
    b, lo = baseline.latencies_us, loaded.latencies_us
    rows = [
        ["turns/s achieved", f"{baseline.turns / baseline.seconds:.0f}", f"{loaded.turns / loaded.seconds:.0f}", ""],
        *[[f"turn latency p{q:g} (µs)", f"{pct(b, q):.1f}", f"{pct(lo, q):.1f}", f"{pct(lo, q) - pct(b, q):+.1f}"]
          for q in (50, 99, 99.9)],
        ["turn latency max (µs)", f"{max(b):.0f}", f"{max(lo):.0f}", ""],
    ]
    print(c.markdown_table(["request path", "without cp_observe", "with cp_observe", "added"], rows))

    print("\n### Over time (every 5 s)\n")
    series = [s for i, s in enumerate(loaded.samples) if (i + 1) % 5 == 0 or i == len(loaded.samples) - 1]
    print(c.markdown_table(
        ["t (s)", "turns", "RSS MiB", "queue depth", "sampled", "scored", "dropped"],
        [[f"{s['t']:.0f}", s["turns"], f"{s['rss']:.1f}", s["depth"], s["sampled"], s["scored"], s["dropped"]]
         for s in series]))

    rss_values = [s["rss"] for s in loaded.samples] or [rss_end]
    depth_max = max((s["depth"] for s in loaded.samples), default=0)
    accounted = final["scored"] + final["failed"] + final["dropped"] + final["skipped"]
    half = len(rss_values) // 2
    second_half_growth = rss_values[-1] - rss_values[half] if half else 0.0
    summary = [
        ["turns run (loaded phase)", loaded.turns],
        ["spans ended (incl. warm-up)", spans],
        ["RSS at start of load (MiB)", f"{rss_start:.1f}"],
        ["RSS max during load (MiB)", f"{max(rss_values):.1f}"],
        ["RSS growth over the load (MiB)", f"{rss_end - rss_start:+.1f}"],
        ["RSS growth over the second half (MiB)", f"{second_half_growth:+.1f}"],
        ["queue depth max (bound)", f"{depth_max} ({args.queue_size})"],
        ["longest stretch with no evaluation finished (s)", f"{_longest_stall(loaded.samples):.0f}"],
        ["sampled", final["sampled"]],
        ["scored", final["scored"]],
        ["failed", final["failed"]],
        ["dropped", final["dropped"]],
        ["skipped", final["skipped"]],
        ["pending after flush", final["pending"]],
        ["reasons", ", ".join(f"{k} {v}" for k, v in final["reasons"].items())],
        ["flush drained in (s)", f"{flush_seconds:.1f} ({'done' if flushed else 'timed out'})"],
        ["sampled == scored + failed + dropped + skipped",
         f"{'yes' if final['sampled'] == accounted and final['pending'] == 0 else 'NO'} "
         f"({final['sampled']} == {accounted})"],
    ]
    print("\n### Totals\n")
    print(c.markdown_table(["what", "value"], summary))
    added_p99 = pct(lo, 99) - pct(b, 99)
    stall = _longest_stall(loaded.samples)
    print("\n### Checks\n")
    print(f"- {'MET ' if depth_max <= args.queue_size else 'MISSED'} queue depth bounded: max {depth_max} "
          f"≤ {args.queue_size}")
    print(f"- {'MET ' if final['sampled'] == accounted and final['pending'] == 0 else 'MISSED'} accounting "
          "invariant after flush")
    print(f"- {'MET ' if final['dropped'] > 0 else 'NOTE'} drops counted when the judge is slower than arrivals: "
          f"{final['dropped']}")
    print(f"- RSS growth over the second half of the load: {second_half_growth:+.1f} MiB "
          f"({'flat' if abs(second_half_growth) < 5 else 'growing'})")
    print(f"- p99 added latency on the request path: {added_p99:+.1f} µs")
    print(f"- {'MET ' if stall <= 5 else 'MISSED'} the judge kept working under overload: longest stretch with "
          f"no evaluation finished while the queue was full: {stall:.0f} s (a stall means queued targets "
          "wait for something that was dropped)")


def _longest_stall(samples: list[dict[str, Any]]) -> float:
    """Seconds of the longest run of monitor samples in which ``scored`` did not move."""
    longest = current = 0.0
    for before, after in itertools.pairwise(samples):
        if after["scored"] == before["scored"]:
            current += after["t"] - before["t"]
            longest = max(longest, current)
        else:
            current = 0.0
    return longest


if __name__ == "__main__":
    sys.exit(main())
