"""Scoring throughput through the processor against a loopback judge with injected latency.

For each judge latency L and concurrency limit C, decorated retrievals (every one sampled, each with a
distinct query so no verdict cache helps) are handed to a ``ContextPrecisionProcessor`` whose ``LLMJudge``
calls a ``cp_observe.testing.JudgeServer`` running in a child process with ``latency=L``. The clock runs
from the first call to the end of ``processor.force_flush()``. The bound is C ÷ L evaluations per second;
the target is ≥ 90 % of it. "raw litellm" makes the same judge calls with litellm directly at the same
concurrency (no cp_observe), right after: what the client library alone reaches on this machine, so the
share of the bound lost to cp_observe and the share lost to the client are told apart. "CPU ms / evaluation"
is this process's CPU time (decorated calls, processor, evaluator thread, litellm, emission; the judge server
is in its own process) divided by the evaluations.

    .venv/bin/python benchmarks/bench_throughput.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

import _common as c
from opentelemetry.sdk.trace import TracerProvider

import cp_observe
from cp_observe import ContextPrecisionProcessor, LLMJudge


@dataclass
class Result:
    """One (latency, concurrency) run."""

    latency_s: float
    concurrency: int
    evaluations: int
    seconds: float
    cpu_s: float
    failed: int
    invariant: bool
    raw_rate: float = float("nan")
    raw_cpu_s: float = float("nan")

    @property
    def rate(self) -> float:
        return self.evaluations / self.seconds if self.seconds else 0.0

    @property
    def bound(self) -> float:
        return self.concurrency / self.latency_s


def _processor(url: str, latency_s: float, concurrency: int) -> ContextPrecisionProcessor:
    judge = LLMJudge("openai/judge-test", api_base=url, api_key="sk-test", cache_size=0, max_retries=0,
                     timeout=latency_s + 30)
    tracer, meter, logger = c.cp_providers()
    return ContextPrecisionProcessor(judge, sample_rate=1.0, concurrency=concurrency, queue_size=100_000,
                                     tracer_provider=tracer, meter_provider=meter, logger_provider=logger,
                                     evaluation_timeout_s=latency_s + 60)


def run(url: str, latency_s: float, concurrency: int, waves: int) -> Result:
    """Score ``concurrency * waves`` retrievals; returns what it took."""
    processor = _processor(url, latency_s, concurrency)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    c.use_cp_provider(provider, 1.0)

    @cp_observe.retriever(name="kb")
    def retrieve(query: str) -> list[str]:
        return c.CONTEXTS

    retrieve("warm-up: import litellm, open a connection")
    processor.force_flush(120_000)
    before = processor.stats()
    count = concurrency * waves
    cpu0, start = time.process_time(), time.perf_counter()
    for i in range(count):
        retrieve(f"{c.QUERY} (request {i})")
    processor.force_flush(int((waves * latency_s + 120) * 1000))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    after = processor.stats()
    processor.shutdown()
    provider.shutdown()
    scored = after["scored"] - before["scored"]
    accounted = after["scored"] + after["failed"] + after["dropped"] + after["skipped"]
    return Result(latency_s, concurrency, scored, seconds, cpu, after["failed"] - before["failed"],
                  invariant=after["pending"] == 0 and after["sampled"] == accounted)


def run_raw(url: str, concurrency: int, waves: int) -> tuple[float, float]:
    """The same judge calls made with litellm directly (no cp_observe): evaluations/s and CPU s/evaluation.

    Same prompt (cp_observe's, 5 contexts), same server, ``concurrency`` calls in flight through a semaphore:
    what the client library alone allows on this machine.
    """
    from cp_observe._judging._litellm import load_litellm
    from cp_observe._judging._prompt import build_prompt

    litellm = load_litellm()

    async def drive() -> tuple[float, float]:
        limit = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with limit:
                messages = build_prompt(f"{c.QUERY} (raw {i})", f"{c.QUERY} (raw {i})", c.CONTEXTS).messages
                await litellm.acompletion(model="openai/judge-test", api_base=url, api_key="sk-test",
                                          messages=messages, temperature=0, max_retries=0)

        await one(-1)
        count = concurrency * waves
        cpu0, start = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(count)))
        return count / (time.perf_counter() - start), (time.process_time() - cpu0) / count

    return asyncio.run(drive())


def _waves(latency_s: float, quick: bool) -> int:
    """Enough waves that the ramp-up and the tail are a small share: about 2 s (1 s quick), at least 4 (3)."""
    if quick:
        return max(3, math.ceil(1.0 / latency_s))
    return max(4, math.ceil(2.0 / latency_s))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="latencies 50 and 200 ms, shorter runs")
    parser.add_argument("--latencies-ms", type=float, nargs="*", default=None)
    parser.add_argument("--concurrency", type=int, nargs="*", default=[1, 4, 16])
    args = parser.parse_args(argv)
    latencies = args.latencies_ms or ([50, 200] if args.quick else [50, 200, 1000])
    c.offline_env()
    blocked = c.block_network()
    results: list[Result] = []
    for latency_ms in latencies:
        latency_s = latency_ms / 1000
        with c.judge_server_process(latency_s) as url:
            for concurrency in args.concurrency:
                waves = _waves(latency_s, args.quick)
                results.append(run(url, latency_s, concurrency, waves))
                last = results[-1]
                last.raw_rate, last.raw_cpu_s = run_raw(url, concurrency, waves)
                print(f"  L={latency_ms:g} ms C={concurrency}: {last.rate:.1f}/s of {last.bound:.1f}/s",
                      file=sys.stderr, flush=True)
    print("## Scoring throughput (LLMJudge → loopback JudgeServer in a child process)\n")
    print(f"Machine: {c.machine_line()}\n")
    rows: list[list[Any]] = []
    for r in results:
        cpu_ms = r.cpu_s / r.evaluations * 1000 if r.evaluations else float("nan")
        rows.append([
            f"{r.latency_s * 1000:g}", r.concurrency, r.evaluations, f"{r.seconds:.2f}", f"{r.rate:.1f}",
            f"{r.bound:.1f}", f"{r.rate / r.bound * 100:.0f} %", f"{r.raw_rate:.1f}",
            f"{r.rate / r.raw_rate * 100:.0f} %", f"{cpu_ms:.2f}", f"{r.raw_cpu_s * 1000:.2f}",
            r.failed, "yes" if r.invariant else "NO",
        ])
    print(c.markdown_table(
        ["judge latency ms", "concurrency", "evaluations", "seconds", "evaluations/s", "bound C÷L /s",
         "of bound", "raw litellm /s", "of raw litellm", "CPU ms / evaluation", "raw litellm CPU ms / call",
         "failed", "invariant holds"], rows))
    print("\n### Targets (≥ 90 % of concurrency ÷ latency)\n")
    for r in results:
        share = r.rate / r.bound
        print(f"- {'MET ' if share >= 0.9 else 'MISSED'} L={r.latency_s * 1000:g} ms, C={r.concurrency}: "
              f"{share * 100:.1f} % of the bound; {r.rate / r.raw_rate * 100:.0f} % of raw litellm's rate")
    print(f"\nNon-loopback network attempts refused during the run: {blocked.total} {blocked.attempts or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
