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

"What one scored evaluation costs" then puts side by side, against the same server at the same
latency and concurrency: CPU per evaluation end to end through the processor with the lean path and with the
litellm fallback (``transport="litellm"``), CPU per call of ``LLMJudge.judge`` on each path, of raw
``litellm.acompletion``, of the openai SDK and of a bare ``httpx.AsyncClient`` POST with the JSON parsed,
all sending the same request (cp_observe's prompt and ``response_format``). The target: end to end at most
1.5 x bare httpx. Then the RSS and import time a judging process adds over ``capture_only``, each measured
in a fresh interpreter.

    .venv-bench/bin/python benchmarks/judging/bench_throughput.py [--quick] [--cost-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's cp_observe, not an installed one

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _common and _peers
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


MODEL = "openai/gpt-4o-mini"  # priced in litellm's table: both paths compute a cost, as in production


def _processor(url: str, latency_s: float, concurrency: int, transport: str = "auto") -> ContextPrecisionProcessor:
    judge = LLMJudge(MODEL, api_base=url, api_key="sk-test", cache_size=0, max_retries=0,
                     timeout=latency_s + 30, transport=transport)  # type: ignore[arg-type]
    tracer, meter, logger = c.cp_providers()
    return ContextPrecisionProcessor(judge, sample_rate=1.0, concurrency=concurrency, queue_size=100_000,
                                     tracer_provider=tracer, meter_provider=meter, logger_provider=logger,
                                     evaluation_timeout_s=latency_s + 60)


def run(url: str, latency_s: float, concurrency: int, waves: int, transport: str = "auto") -> Result:
    """Score ``concurrency * waves`` retrievals; returns what it took."""
    processor = _processor(url, latency_s, concurrency, transport)
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
                await litellm.acompletion(model=MODEL, api_base=url, api_key="sk-test",
                                          messages=messages, temperature=0, max_retries=0)

        await one(-1)
        count = concurrency * waves
        cpu0, start = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(count)))
        return count / (time.perf_counter() - start), (time.process_time() - cpu0) / count

    return asyncio.run(drive())


def _request(i: int) -> dict[str, Any]:
    """The request LLMJudge sends for one retrieval: cp_observe's prompt and its structured-output format."""
    from cp_observe._judging._prompt import VERDICTS_SCHEMA, build_prompt

    messages = build_prompt(f"{c.QUERY} (client {i})", f"{c.QUERY} (client {i})", c.CONTEXTS).messages
    schema = {"name": "context_precision_verdicts", "schema": VERDICTS_SCHEMA, "strict": True}
    return {"messages": messages, "temperature": 0, "response_format": {"type": "json_schema", "json_schema": schema}}


def _clients(url: str, latency_s: float) -> dict[str, Callable[[], Callable[[int], Awaitable[object]]]]:
    """Each client, as a factory (run inside the event loop) of a one-call coroutine function."""

    def judge(transport: str) -> Callable[[], Callable[[int], Awaitable[object]]]:
        def make() -> Callable[[int], Awaitable[object]]:
            client = LLMJudge(MODEL, api_base=url, api_key="sk-test", cache_size=0, max_retries=0,
                              timeout=latency_s + 30, transport=transport)  # type: ignore[arg-type]
            return lambda i: client.judge(f"{c.QUERY} (client {i})", f"{c.QUERY} (client {i})", c.CONTEXTS)
        return make

    def litellm_raw() -> Callable[[int], Awaitable[object]]:
        from cp_observe._judging._litellm import load_litellm

        litellm = load_litellm()
        return lambda i: litellm.acompletion(model=MODEL, api_base=url, api_key="sk-test", max_retries=0,
                                             timeout=latency_s + 30, **_request(i))

    def openai_sdk() -> Callable[[int], Awaitable[object]]:
        import openai

        client = openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0, timeout=latency_s + 30)
        return lambda i: client.chat.completions.create(model=MODEL.split("/", 1)[1], **_request(i))

    def bare_httpx() -> Callable[[int], Awaitable[object]]:
        import httpx

        client = httpx.AsyncClient(timeout=latency_s + 30, limits=httpx.Limits(max_connections=None))
        headers = {"authorization": "Bearer sk-test"}

        async def one(i: int) -> object:
            response = await client.post(f"{url}/chat/completions", headers=headers,
                                         json={"model": MODEL.split("/", 1)[1], **_request(i)})
            response.raise_for_status()
            return response.json()["choices"][0]["message"]["content"]
        return one

    def bare_aiohttp() -> Callable[[int], Awaitable[object]]:
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        headers = {"authorization": "Bearer sk-test"}

        async def one(i: int) -> object:
            async with session.post(f"{url}/chat/completions", headers=headers,
                                    json={"model": MODEL.split("/", 1)[1], **_request(i)}) as response:
                response.raise_for_status()
                return (await response.json())["choices"][0]["message"]["content"]
        return one

    return {"LLMJudge.judge, lean path": judge("auto"), "LLMJudge.judge, litellm fallback": judge("litellm"),
            "raw litellm.acompletion": litellm_raw, "openai SDK (AsyncOpenAI)": openai_sdk,
            "bare httpx.AsyncClient POST + JSON parse": bare_httpx,
            "bare aiohttp.ClientSession POST + JSON parse (the lean path's client)": bare_aiohttp}


def run_client(make: Callable[[], Callable[[int], Awaitable[object]]], concurrency: int,
               count: int) -> tuple[float, float]:
    """``count`` calls, ``concurrency`` in flight, after one warm-up call: calls/s and CPU s per call."""

    async def drive() -> tuple[float, float]:
        call = make()
        limit = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with limit:
                await call(i)

        await one(-1)
        cpu0, start = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(count)))
        return count / (time.perf_counter() - start), (time.process_time() - cpu0) / count

    return asyncio.run(drive())


_FOOTPRINT_CHILD = r"""
import json, os, resource, sys, time
mode, url = sys.argv[1], sys.argv[2]
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
base = rss()
start = time.perf_counter()
import cp_observe
from opentelemetry.sdk.trace import TracerProvider
if mode == "capture_only":
    cp_observe.configure(capture_only=True, tracer_provider=TracerProvider())
else:
    processor = cp_observe.configure(judge="openai/gpt-4o-mini", judge_api_base=url, judge_api_key="sk-test",
                                     judge_transport=mode, sample_rate=1.0, tracer_provider=TracerProvider())
@cp_observe.retriever(name="kb")
def retrieve(query):
    return ["Refunds take five days.", "Offices close on holidays."]
retrieve("How long do refunds take?")
if mode != "capture_only":
    processor.force_flush(60_000)
    assert processor.stats()["scored"] == 1, processor.stats()
seconds = time.perf_counter() - start
litellm = any(m == "litellm" or m.startswith("litellm.") for m in sys.modules)
print(json.dumps({"seconds": seconds, "rss": rss() - base, "litellm": litellm}))
"""


def footprint(url: str, repeats: int) -> dict[str, tuple[float, float, bool]]:
    """Median wall time (import, configure, first scored retrieval) and RSS added, per mode, fresh processes."""
    out: dict[str, tuple[float, float, bool]] = {}
    for mode in ("capture_only", "auto", "litellm"):
        runs = []
        for _ in range(repeats):
            done = subprocess.run([sys.executable, "-c", _FOOTPRINT_CHILD, mode, url], capture_output=True,
                                  text=True, check=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        out[mode] = (c.median(r["seconds"] for r in runs), c.median(r["rss"] for r in runs), runs[0]["litellm"])
    return out


def cost_section(latency_s: float, concurrency: int, count: int, repeats: int) -> None:
    """Print what one scored evaluation costs, every client side by side, and the footprint of judging."""
    rows: list[list[Any]] = []
    with c.judge_server_process(latency_s) as url:
        waves = max(1, count // concurrency)
        ends = {t: run(url, latency_s, concurrency, waves, transport=t) for t in ("auto", "litellm")}
        calls = {name: run_client(make, concurrency, count) for name, make in _clients(url, latency_s).items()}
        print(f"  cost section: L={latency_s * 1000:g} ms C={concurrency} done", file=sys.stderr, flush=True)
    with c.judge_server_process(0.0) as url:  # no judge latency in the footprint's wall time
        feet = footprint(url, repeats)
    bare = calls["bare httpx.AsyncClient POST + JSON parse"][1]
    for transport, label in (("auto", "lean path"), ("litellm", "litellm fallback")):
        r = ends[transport]
        per = r.cpu_s / r.evaluations if r.evaluations else float("nan")
        rows.append([f"end to end through the processor, {label}", r.evaluations, f"{r.rate:.1f}",
                     f"{per * 1000:.2f}", f"{per / bare:.2f} x"])
    for name, (rate, per) in calls.items():
        rows.append([name, count, f"{rate:.1f}", f"{per * 1000:.2f}", f"{per / bare:.2f} x"])
    print(f"\n## What one scored evaluation costs (judge latency {latency_s * 1000:g} ms, {concurrency} in flight)\n")
    print(c.markdown_table(["client", "calls", "per s", "CPU ms / call", "of bare httpx"], rows))
    lean_ratio = ends["auto"].cpu_s / max(1, ends["auto"].evaluations) / bare
    print(f"\n- {'MET ' if lean_ratio <= 1.5 else 'MISSED'} end to end (lean path) at most 1.5 x bare httpx: "
          f"{lean_ratio:.2f} x")
    base_s, base_rss, _ = feet["capture_only"]
    frows = []
    for mode, label in (("capture_only", "capture_only"), ("auto", "judging in process, lean path"),
                        ("litellm", "judging in process, litellm fallback")):
        seconds, rss, litellm = feet[mode]
        frows.append([label, f"{seconds:.2f}", f"{seconds - base_s:+.2f}", f"{rss:.1f}", f"{rss - base_rss:+.1f}",
                      "yes" if litellm else "no"])
    print(f"\n### Footprint (fresh interpreter, median of {repeats}: import, configure, first scored retrieval)\n")
    print(c.markdown_table(["process", "seconds", "added s", "RSS MiB added by cp_observe", "over capture_only",
                            "litellm imported"], frows))
    lean_s, lean_rss, _ = feet["auto"]
    print(f"\n- {'MET ' if lean_rss - base_rss <= 40 else 'MISSED'} lean judging adds at most 40 MiB RSS: "
          f"{lean_rss - base_rss:+.1f} MiB")
    print(f"- {'MET ' if lean_s - base_s <= 0.5 else 'MISSED'} lean judging adds at most 0.5 s: "
          f"{lean_s - base_s:+.2f} s")


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
    parser.add_argument("--cost-only", action="store_true", help="only the cost section")
    parser.add_argument("--cost-calls", type=int, default=400, help="calls per client in the cost section")
    args = parser.parse_args(argv)
    latencies = args.latencies_ms or ([50, 200] if args.quick else [50, 200, 1000])
    c.offline_env()
    blocked = c.block_network()
    if args.cost_only:
        cost_section(0.05, 16, args.cost_calls // (2 if args.quick else 1), 3 if args.quick else 5)
        print(f"\nNon-loopback network attempts refused during the run: {blocked.total} {blocked.attempts or ''}")
        return 0
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
    cost_section(0.05, 16, args.cost_calls // (2 if args.quick else 1), 3 if args.quick else 5)
    print(f"\nNon-loopback network attempts refused during the run: {blocked.total} {blocked.attempts or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
