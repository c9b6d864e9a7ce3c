"""Sustained load: decorated agent+retriever turns at ~1,000/s for a minute, 10 % sampled, with a judge slower
than the arrival rate. Shows that memory, queue depth and drops stay bounded and that everything is counted.

Several threads run paced turns (an ``@agent`` calling an ``@retriever`` that returns five 500-character
contexts). The processor's ``LLMJudge`` calls a loopback ``JudgeServer`` in a child process whose latency,
with the processor's concurrency limit, allows far fewer evaluations per second than are sampled, so the
bounded queue fills and drops (counted). A monitor thread records RSS, queue depth and the counters every
second. The same loop runs first without cp_observe (plain functions, same pacing) for the added-latency
baseline. After the loaded phase, ``force_flush`` drains the queue and the accounting invariant
``sampled == scored + failed + dropped + skipped`` is checked.

    .venv/bin/python benchmarks/request_path/bench_sustained_load.py [--quick]

Soak: ``--seconds 900 --cache-size 2000`` runs 15 minutes and reports the RSS slope (least squares)
over the last five minutes; a smaller verdict cache makes its bound reachable within the run, so that every
bounded structure is full before the slope is measured. ``--serve`` runs the same turns through a
``python -m cp_observe.serve`` process instead (spans sent over OTLP/gRPC; RSS is the service's).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _common and _peers
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


_RESERVOIR = 25_000  # latencies kept per driver thread: a uniform sample, so the harness's memory is bounded


def _driver(turn: Callable[[str], str], interval: float, stop_at: float, out: list[float], index: int,  # noqa: PLR0917
            counts: list[int]) -> None:
    """Call ``turn`` every ``interval`` seconds until ``stop_at``; keeps a uniform sample of latencies in µs.

    A list of every latency grew by ~32 bytes a turn (0.03 MiB/s at 1,000 turns/s): tracemalloc showed it as
    the only thing still growing in a soak once cp_observe's bounds were full. A reservoir (algorithm R) of
    ``_RESERVOIR`` keeps percentiles honest with constant memory.
    """
    perf = time.perf_counter
    rng = random.Random(index)
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
        latency = (perf() - start) * 1e6
        if i < _RESERVOIR:
            out.append(latency)
        else:
            slot = rng.randrange(i + 1)
            if slot < _RESERVOIR:
                out[slot] = latency
        i += 1
        counts[index] = i
        next_at += interval


def run_phase(turn: Callable[[str], str], seconds: float, rate: float, threads: int,
              monitor: Callable[[float], dict[str, Any]] | None) -> Phase:
    """Drive ``turn`` from ``threads`` threads at ``rate`` turns/s in total for ``seconds``."""
    phase = Phase()
    per_thread: list[list[float]] = [[] for _ in range(threads)]
    counts = [0] * threads
    start = time.perf_counter()
    stop_at = start + seconds
    workers = [
        threading.Thread(target=_driver, args=(turn, threads / rate, stop_at, per_thread[i], i, counts), daemon=True)
        for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    while any(worker.is_alive() for worker in workers):
        time.sleep(1.0)
        if monitor is not None:
            sample = monitor(time.perf_counter() - start)
            sample["turns"] = sum(counts)
            phase.samples.append(sample)
    for worker in workers:
        worker.join()
    phase.seconds = time.perf_counter() - start
    phase.latencies_us = [x for xs in per_thread for x in xs]
    phase.turns = sum(counts)
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
    parser.add_argument("--cache-size", type=int, default=10_000, help="the LLMJudge verdict cache bound")
    parser.add_argument("--slope-window", type=float, default=300.0, help="seconds at the end for the RSS slope")
    parser.add_argument("--serve", action="store_true", help="soak a cp-observe serve process instead")
    args = parser.parse_args(argv)
    if args.serve:
        return serve_soak(args, args.seconds or (10.0 if args.quick else 60.0))
    seconds = args.seconds or (10.0 if args.quick else 60.0)
    baseline_seconds = min(seconds, 5.0 if args.quick else 20.0)
    c.offline_env()
    blocked = c.block_network()

    print(f"baseline: {baseline_seconds:g} s without cp_observe", file=sys.stderr, flush=True)
    baseline = run_phase(plain_turn(), baseline_seconds, args.rate, args.threads, None)

    latency_s = args.judge_latency_ms / 1000
    with c.judge_server_process(latency_s) as url:
        judge = LLMJudge("openai/judge-test", api_base=url, api_key="sk-test", max_retries=0, timeout=latency_s + 30,
                         cache_size=args.cache_size)
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
        bounds = _bounds(judge, processor, args)
        processor.shutdown()

    _report(args, seconds=seconds, baseline=baseline, loaded=loaded, final=final, rss_start=rss_start,
            rss_end=rss_end_of_load, flushed=flushed, flush_seconds=flush_seconds, spans=sink.ended)
    _report_soak(loaded.samples, args.slope_window, bounds)
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


def _bounds(judge: LLMJudge, processor: ContextPrecisionProcessor, args: argparse.Namespace) -> list[list[Any]]:
    """Each bounded structure's fill at the end of the load, next to its bound."""
    from cp_observe._capture import _extract
    from cp_observe._capture import _payloads
    from cp_observe._config._sampling import FORCED

    cache = judge.cache
    evaluator = processor._evaluator
    return [
        ["verdict cache (LRU)", f"{len(cache)} / {args.cache_size}", f"evictions {cache.evictions}"],
        ["payload store", f"{len(_payloads.PAYLOADS)} / 10000", f"evicted {_payloads.PAYLOADS.evicted}"],
        ["evaluator queue + load", f"{evaluator.depth()} / {args.queue_size}", "refusals counted dropped"],
        ["assembler traces", f"{evaluator.assembler.pending} pending", "max_pending_traces 1000"],
        ["extraction plans", f"{len(_extract._PLANS)} / {_extract._PLAN_CACHE_MAX}", ""],
        ["forced trace ids", f"{len(FORCED._ids)}", "bounded set"],
    ]


def rss_slope(samples: list[dict[str, Any]], window: float) -> tuple[float, float, int]:
    """Least-squares slope of RSS (MiB/s) over the samples of the last ``window`` seconds: (slope, span, n)."""
    if not samples:
        return 0.0, 0.0, 0
    end = samples[-1]["t"]
    tail = [s for s in samples if s["t"] >= end - window]
    if len(tail) < 2:
        return 0.0, 0.0, len(tail)
    ts = [s["t"] for s in tail]
    rs = [s["rss"] for s in tail]
    mt, mr = sum(ts) / len(ts), sum(rs) / len(rs)
    var = sum((t - mt) ** 2 for t in ts)
    slope = sum((t - mt) * (r - mr) for t, r in zip(ts, rs, strict=True)) / var if var else 0.0
    return slope, ts[-1] - ts[0], len(tail)


def _report_soak(samples: list[dict[str, Any]], window: float, bounds: list[list[Any]]) -> None:
    slope, span, count = rss_slope(samples, window)
    print("\n### Soak: RSS slope and bounds\n")
    if samples:
        print(c.markdown_table(["t (s)", "RSS MiB"], [[f"{s['t']:.0f}", f"{s['rss']:.1f}"] for s in samples
                                                       if int(s["t"]) % 60 == 0 or s is samples[-1]]))
    print(f"\n- RSS slope over the last {span:.0f} s ({count} samples, least squares): {slope:+.5f} MiB/s "
          f"({'MET ' if slope < 0.001 else 'MISSED'} < 0.001 MiB/s; {slope * 86400:+.0f} MiB/day)")
    if bounds:
        print()
        print(c.markdown_table(["bounded structure", "fill / bound", "note"], bounds))


# --- the same soak through `cp-observe serve` -------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _proc_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


def _turn_spans(tracer: Any, index: int) -> None:
    """One agent span with a retrieval inside, as an instrumented application would export them."""
    from cp_observe import _names as n

    query = f"{c.QUERY} (serve turn {index})"
    with tracer.start_as_current_span("invoke_agent assistant", attributes={
        n.OPENINFERENCE_SPAN_KIND: n.KIND_AGENT, n.GEN_AI_AGENT_NAME: "assistant", n.INPUT_VALUE: query,
        n.OUTPUT_VALUE: _ANSWER,
    }):
        attributes: dict[str, Any] = {n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.GEN_AI_DATA_SOURCE_ID: "kb",
                                      n.INPUT_VALUE: query}
        for rank, text in enumerate(c.CONTEXTS):
            attributes[n.document_attribute(rank, "content")] = text
        with tracer.start_as_current_span("retrieval kb", attributes=attributes):
            pass


def serve_soak(args: argparse.Namespace, seconds: float) -> int:  # noqa: PLR0915 - one linear script
    """Drive a ``cp-observe serve`` process with turns over OTLP/gRPC for ``seconds``; sample its RSS each second."""
    import grpc
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    root = Path(__file__).resolve().parents[2]
    c.offline_env()
    with c.judge_server_process(args.judge_latency_ms / 1000) as url:
        grpc_port, admin_port = _free_port(), _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_"))}
        env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", CP_OBSERVE_JUDGE_API_KEY="sk-bench", PYTHONPATH=str(root),
                   NO_PROXY="*", no_proxy="*")
        command = [sys.executable, "-m", "cp_observe.serve", "--listen-host", "127.0.0.1", "--grpc-port",
                   str(grpc_port), "--http-port", "0", "--admin-port", str(admin_port), "--judge", "openai/judge-test",
                   "--judge-api-base", url, "--judge-max-retries", "0", "--concurrency", str(args.concurrency),
                   "--queue-size", str(args.queue_size), "--sample-rate", str(args.sample_rate)]
        process = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/readyz", timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline or process.poll() is not None:
                        raise RuntimeError("the serve process did not become ready") from None
                    time.sleep(0.2)
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            tracer = provider.get_tracer("soak")
            refused = sent = 0
            samples: list[dict[str, Any]] = []
            start = time.perf_counter()
            next_sample = 1.0
            turn = 0
            tick = 0.1
            with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                stub = trace_service_pb2_grpc.TraceServiceStub(channel)
                while (elapsed := time.perf_counter() - start) < seconds:
                    due = int(elapsed * args.rate) - turn
                    for _ in range(max(0, min(due, int(args.rate)))):
                        _turn_spans(tracer, turn)
                        turn += 1
                    spans = exporter.get_finished_spans()
                    exporter.clear()
                    if spans:
                        try:
                            stub.Export(encode_spans(spans), timeout=10)
                            sent += len(spans)
                        except grpc.RpcError:
                            refused += len(spans)
                    if elapsed >= next_sample:
                        stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/stats",
                                                                  timeout=5).read())
                        samples.append({"t": elapsed, "rss": _proc_rss_mib(process.pid), "turns": turn, **{
                            k: stats.get(k) for k in ("sampled", "scored", "dropped", "skipped", "failed")}})
                        next_sample += 1.0
                    time.sleep(max(0.0, tick - (time.perf_counter() - start - elapsed)))
            final = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/stats", timeout=5).read())
        finally:
            process.terminate()
            process.wait(60)
    print(f"## Soak through cp-observe serve: target {args.rate:g} turns/s (2 spans each) for {seconds:g} s, "
          f"{args.sample_rate:.0%} sampled, judge {args.judge_latency_ms:g} ms x concurrency {args.concurrency}, "
          f"queue {args.queue_size}\n")
    print(f"Machine: {c.machine_line()}\n")
    achieved = samples[-1]["turns"] / samples[-1]["t"] if samples else 0.0
    print(f"turns/s achieved {achieved:.0f}; spans sent {sent}, refused (not retried) {refused}; final stats "
          f"{ {k: final.get(k) for k in ('sampled', 'scored', 'failed', 'dropped', 'skipped')} }")
    print("\n(The service's verdict cache keeps its default bound of 10,000; each evaluation adds 5 verdicts, so "
          "it is full after 2,000 evaluations.)")
    _report_soak(samples, args.slope_window, [])
    return 0


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
