"""Evaluations per second of ``cp-observe serve``, per replica and from one to three replicas.

Each replica is a ``python -m cp_observe.serve`` process judging through the real ``LLMJudge`` (litellm, over
HTTP) against the loopback ``JudgeServer`` of ``cp_observe.testing``, which answers after a fixed latency.
A load generator routes lone retrievals (one trace each) to the replicas by trace id on the loadbalancing
exporter's hash ring (``tests/serve_support.HashRing``), sends them over OTLP/gRPC with the retries the
Collector would make (``RESOURCE_EXHAUSTED`` after its ``RetryInfo``), and times until every replica's
``/stats`` says all of them were judged. With a fixed judge latency L and ``--concurrency`` C, the ceiling is
C / L evaluations per second per replica; what stays below it is the service's own cost (decoding, the
processor, litellm) on this machine's cores.

Each replica count runs once per judge transport (``--transports``, default ``auto,litellm``: the lean path
and the litellm fallback, set through ``CP_OBSERVE_JUDGE_TRANSPORT``). "CPU ms / evaluation" is the
replicas' own CPU time (``/proc/<pid>/stat``) over the measured evaluations; "of bare httpx" divides it by the
CPU per call of a bare ``httpx.AsyncClient`` POST with the JSON parsed, the same request at the same
concurrency, measured in this run on the benchmark's own thread (the in-process judge server's threads
excluded); the target is at most 1.5 x.

    .venv/bin/python benchmarks/serve/bench_serve.py                # 1, 2 and 3 replicas, 100 ms judge latency
    .venv/bin/python benchmarks/serve/bench_serve.py --latency 0.25 --concurrency 16 --retrievals 800
    .venv-bench/bin/python benchmarks/serve/bench_serve.py --replicas 1 --latency 0.05 --concurrency 32  # CPU-bound
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cp_observe import _names as n  # noqa: E402 - after the path set-up
from cp_observe.testing import JudgeServer  # noqa: E402
from tests.serve_support import HashRing, free_port  # noqa: E402

CONTEXTS = [
    "Refunds are issued to the original payment method within five business days.",
    "Our offices are closed on public holidays.",
    "To request a refund, open the order and choose Return items.",
    "Gift cards cannot be exchanged for cash.",
    "Shipping is free for orders above fifty euros.",
]


@dataclass
class Result:
    """One run: how many replicas, how many evaluations, how long, how many refusals."""

    replicas: int
    evaluations: int
    seconds: float
    refused: int
    imbalance: float  # the busiest replica's share over the mean share (1.0: perfectly even)
    transport: str = "auto"
    cpu_s: float = float("nan")  # the replicas' CPU time during the measured part

    @property
    def per_second(self) -> float:
        return self.evaluations / self.seconds


def retrievals(count: int, prefix: str) -> list[ReadableSpan]:
    """Lone retrieval spans, one trace each, made by the real SDK."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    for i in range(count):
        attributes = {n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.GEN_AI_DATA_SOURCE_ID: "help-centre",
                      n.INPUT_VALUE: f"{prefix} how do I get a refund for order {i}?"}
        for rank, text in enumerate(CONTEXTS):
            attributes[n.document_attribute(rank, "content")] = text
        with tracer.start_as_current_span("retrieval help-centre", attributes=attributes):
            pass
    return list(exporter.get_finished_spans())


def routed_requests(spans: Sequence[ReadableSpan], endpoints: Sequence[str], batch: int) -> dict[str, list[bytes]]:
    """Requests of up to ``batch`` spans per replica, each span on the replica its trace id hashes to."""
    ring = HashRing(endpoints)
    by_endpoint: dict[str, list[ReadableSpan]] = {e: [] for e in endpoints}
    for span in spans:
        assert span.context is not None
        by_endpoint[ring.endpoint_for(span.context.trace_id.to_bytes(16, "big"))].append(span)
    return {e: [encode_spans(s[i:i + batch]).SerializeToString() for i in range(0, len(s), batch)]
            for e, s in by_endpoint.items()}


def send(endpoint: str, bodies: list[bytes], refused: list[int]) -> None:
    """Export each request, retrying refusals after the delay the scorer asked for (as the Collector does)."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        for body in bodies:
            request = ExportTraceServiceRequest.FromString(body)
            while True:
                try:
                    stub.Export(request, timeout=30)
                    break
                except grpc.RpcError as error:
                    if error.code() not in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
                        raise
                    refused.append(1)
                    time.sleep(0.05)


def stats(admin_port: int) -> dict[str, int]:
    """A replica's accounting."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/stats", timeout=5) as response:
        return dict(json.loads(response.read()))


def wait_done(admin_ports: Sequence[int], expected: int, timeout: float) -> None:
    """Poll the replicas until ``expected`` evaluations finished in total (scored or failed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = sum(s["scored"] + s["failed"] + s["skipped"] + s["dropped"] for s in map(stats, admin_ports))
        if done >= expected:
            return
        time.sleep(0.02)
    raise TimeoutError(f"not all {expected} evaluations finished in {timeout} s")


Replicas = list[tuple[subprocess.Popen[bytes], int, int]]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bare_httpx_cpu(judge_url: str, concurrency: int, count: int) -> float:
    """CPU seconds per call of a bare httpx POST of the judge's request with the JSON parsed, this process."""
    import httpx

    from cp_observe._judging._prompt import VERDICTS_SCHEMA, build_prompt

    schema = {"name": "context_precision_verdicts", "schema": VERDICTS_SCHEMA, "strict": True}

    async def drive() -> float:
        limit = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=None)) as client:

            async def one(i: int) -> None:
                query = f"how do I get a refund for order {i}?"
                body = {"model": "gpt-4o-mini", "messages": build_prompt(query, query, CONTEXTS).messages,
                        "temperature": 0, "response_format": {"type": "json_schema", "json_schema": schema}}
                async with limit:
                    response = await client.post(f"{judge_url}/chat/completions", json=body,
                                                 headers={"authorization": "Bearer sk-bench"})
                    response.raise_for_status()
                    response.json()["choices"][0]["message"]["content"]

            await one(-1)
            cpu0 = time.thread_time()  # this thread's: the JudgeServer's threads share the process
            await asyncio.gather(*(one(i) for i in range(count)))
            return (time.thread_time() - cpu0) / count

    return asyncio.run(drive())


def start_replicas(count: int, judge_url: str, args: argparse.Namespace, transport: str = "auto") -> Replicas:
    """Start ``count`` scorer processes and wait until each is ready."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_"))}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", CP_OBSERVE_JUDGE_API_KEY="sk-bench", PYTHONPATH=str(ROOT),
               NO_PROXY="*", no_proxy="*", CP_OBSERVE_JUDGE_TRANSPORT=transport)
    replicas = []
    for _ in range(count):
        grpc_port, admin_port = free_port(), free_port()
        command = [sys.executable, "-m", "cp_observe.serve", "--listen-host", "127.0.0.1",
                   "--grpc-port", str(grpc_port), "--http-port", "0", "--admin-port", str(admin_port),
                   "--judge", args.judge if args.judge == "lexical" else "openai/gpt-4o-mini",
                   "--judge-api-base", judge_url, "--concurrency", str(args.concurrency),
                   "--queue-size", str(args.queue_size), "--sample-rate", "1"]
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        replicas.append((process, grpc_port, admin_port))
    for process, _, admin_port in replicas:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError("a replica exited during start-up")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/readyz", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    return replicas


def run(count: int, judge_url: str, args: argparse.Namespace, transport: str = "auto") -> Result:
    """One measurement with ``count`` replicas (after a warm-up that is not timed)."""
    replicas = start_replicas(count, judge_url, args, transport)
    try:
        endpoints = [f"127.0.0.1:{grpc_port}" for _, grpc_port, _ in replicas]
        admin = [admin_port for _, _, admin_port in replicas]
        warmup = retrievals(args.warmup * count, "warm-up")
        for endpoint, bodies in routed_requests(warmup, endpoints, args.batch).items():
            send(endpoint, bodies, [])
        wait_done(admin, len(warmup), 120)
        spans = retrievals(args.retrievals * count, "measured")
        work = routed_requests(spans, endpoints, args.batch)
        refused: list[int] = []
        threads = [threading.Thread(target=send, args=(e, b, refused)) for e, b in work.items()]
        cpu0 = sum(cpu_seconds(process.pid) for process, _, _ in replicas)
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wait_done(admin, len(warmup) + len(spans), 600)
        seconds = time.perf_counter() - start
        cpu = sum(cpu_seconds(process.pid) for process, _, _ in replicas) - cpu0
        failed = sum(stats(port)["failed"] for port in admin)
        if failed:
            print(f"warning: {failed} evaluations failed", file=sys.stderr)
        shares = [sum(len(ExportTraceServiceRequest.FromString(b).resource_spans[0].scope_spans[0].spans)
                      for b in bodies) for bodies in work.values()]
        return Result(count, len(spans), seconds, len(refused), max(shares) * count / len(spans), transport, cpu)
    finally:
        for process, _, _ in replicas:
            process.terminate()
        for process, _, _ in replicas:
            process.wait(60)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", default="1,2,3", help="replica counts to measure (default 1,2,3)")
    parser.add_argument("--latency", type=float, default=0.1, help="the judge's fixed latency in seconds")
    parser.add_argument("--concurrency", type=int, default=8, help="judge calls in flight per replica")
    parser.add_argument("--retrievals", type=int, default=300, help="measured retrievals per replica")
    parser.add_argument("--warmup", type=int, default=20, help="untimed retrievals per replica first")
    parser.add_argument("--batch", type=int, default=50, help="spans per OTLP request")
    parser.add_argument("--queue-size", type=int, default=200, help="each replica's queue_size")
    parser.add_argument("--transports", default="auto,litellm",
                        help="judge transports to measure (CP_OBSERVE_JUDGE_TRANSPORT), default auto,litellm")
    parser.add_argument("--judge", default="llm", choices=("llm", "lexical"),
                        help="llm: LLMJudge via litellm against the loopback server (default); lexical: offline")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.replicas.split(",")]
    transports = args.transports.split(",") if args.judge == "llm" else ["auto"]
    with JudgeServer(latency=args.latency) as server:
        results = [run(count, server.url, args, transport) for transport in transports for count in counts]
        bare = bare_httpx_cpu(server.url, args.concurrency, args.retrievals) if args.judge == "llm" else float("nan")
    if args.judge == "llm":
        print(f"judge: LLMJudge (openai/gpt-4o-mini), loopback latency {args.latency * 1000:.0f} ms, concurrency "
              f"{args.concurrency} per replica (ceiling {args.concurrency / args.latency:.0f} evaluations/s per "
              f"replica), {os.cpu_count()} CPUs")
    else:
        print(f"judge: lexical (offline), concurrency {args.concurrency} per replica, {os.cpu_count()} CPUs")
    print(f"{'transport':>9} {'replicas':>8} {'evaluations':>11} {'seconds':>8} {'evals/s':>8} {'per replica':>11} "
          f"{'scaling':>8} {'busiest':>8} {'refused':>8} {'CPU ms/eval':>11} {'of bare httpx':>13}")
    for r in results:
        first = next(x for x in results if x.transport == r.transport)
        base = first.per_second / first.replicas
        cpu_ms = r.cpu_s / r.evaluations * 1000
        print(f"{r.transport:>9} {r.replicas:>8} {r.evaluations:>11} {r.seconds:>8.2f} {r.per_second:>8.1f} "
              f"{r.per_second / r.replicas:>11.1f} {r.per_second / base / r.replicas:>7.0%} "
              f"{r.imbalance:>7.2f}x {r.refused:>8} {cpu_ms:>11.2f} {cpu_ms / (bare * 1000):>12.2f}x")
    if args.judge == "llm":
        print(f"bare httpx POST + JSON parse, same request, {args.concurrency} in flight: {bare * 1000:.2f} ms CPU "
              "per call (this thread)")
    print("scaling: evaluations/s over (replicas x the one-replica rate); busiest: the most loaded replica's share "
          "of the trace ids over an even share (the hash ring is not perfectly even, and the run lasts as long "
          "as its busiest replica)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
