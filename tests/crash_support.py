"""Crash runs of ``cp-observe serve``: real processes, real OTLP exporters, SIGKILL at random moments, restarts.

``crash_run`` starts ``python -m cp_observe.serve`` (an ``LLMJudge`` through litellm against the loopback
``JudgeServer``, evaluations exported over OTLP/HTTP to a loopback ``OtlpReceiver``), sends turns with the
SDK's ``OTLPSpanExporter.export`` (so it knows exactly which spans got a 200), SIGKILLs the service at random
moments and restarts it on the same data directory and ports, then stops it with SIGTERM (a drain) and reads
what reached the receiver. Shared by ``tests/serve/test_serve_durable.py`` and
``benchmarks/serve/bench_serve_crash.py``.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from cp_observe import _names as n
from tests.otlp_receiver import OtlpReceiver
from tests.serve_support import DOCS, ROOT, free_port, subprocess_env

Key = tuple[str, str]  # (trace id, span id) in hex


def turns(first: int, count: int) -> tuple[list[ReadableSpan], list[Key]]:
    """``count`` turns made by the real SDK: every third an agent with its retrieval, the rest lone retrievals."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("crash")
    retrieval = {n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL,
                 n.GEN_AI_DATA_SOURCE_ID: "kb", n.document_attribute(0, "content"): DOCS[0],
                 n.document_attribute(1, "content"): DOCS[1]}
    for i in range(first, first + count):
        query = {n.INPUT_VALUE: f"capital of France {i}"}
        if i % 3 == 0:
            with tracer.start_as_current_span("invoke_agent helper", attributes={
                    n.OPENINFERENCE_SPAN_KIND: n.KIND_AGENT, n.GEN_AI_AGENT_NAME: "helper", **query,
                    n.OUTPUT_VALUE: "Paris is the capital of France."}), \
                    tracer.start_as_current_span("retrieval kb", attributes={**retrieval, **query}):
                pass
        else:
            with tracer.start_as_current_span("retrieval kb", attributes={**retrieval, **query}):
                pass
    spans = list(exporter.get_finished_spans())
    targets = [(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in spans
               if s.context is not None and s.name.startswith("retrieval")]
    return spans, targets


@dataclass
class Serve:
    """One ``cp-observe serve`` process after another, on the same ports and data directory."""

    data_dir: Path
    judge_url: str
    receiver_url: str
    durable: bool = True
    http_port: int = field(default_factory=free_port)
    admin_port: int = field(default_factory=free_port)
    process: subprocess.Popen[str] | None = None
    starts: int = 0

    def start(self) -> None:
        """Start a process; returns once ``/readyz`` answers (recovery is done before the doors open)."""
        command = [sys.executable, "-m", "cp_observe.serve", "--judge", "openai/judge-test", "--judge-api-base",
                   self.judge_url, "--otlp-endpoint", self.receiver_url, "--grpc-port", "0", "--http-port",
                   str(self.http_port), "--admin-port", str(self.admin_port), "--queue-size", "200",
                   "--concurrency", "8", "--turn-timeout-s", "5", "--log-level", "warning",
                   "--data-dir", str(self.data_dir), "--durable" if self.durable else "--no-durable"]
        env = subprocess_env(CP_OBSERVE_JUDGE_API_KEY="sk-test", OTEL_BSP_SCHEDULE_DELAY="50",
                             OTEL_METRIC_EXPORT_INTERVAL="600000")
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)
        self.starts += 1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # another program: there is no event to await, only its port
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited: {self.process.stderr.read() if self.process.stderr else ''}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/readyz", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError("serve did not become ready")

    def stats(self) -> dict[str, Any]:
        """``/stats`` of the running process."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/stats", timeout=5) as reply:
            return dict(json.loads(reply.read()))

    def kill(self) -> None:
        """SIGKILL, and wait for the exit."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        """SIGTERM (drain), and wait for the exit."""
        assert self.process is not None
        self.process.terminate()
        self.process.wait(120)


@dataclass
class Report:
    """What a crash run saw."""

    accepted: set[Key]
    refused: set[Key]
    evaluations: dict[Key, set[str]]  # target -> distinct evaluation span ids
    deliveries: dict[Key, int]  # target -> evaluation spans received (a redelivery repeats the same id)
    failed: set[Key]
    stats: list[dict[str, Any]]  # /stats of each process just before it was killed or stopped
    left_in_store: int
    seconds: float
    kills: int
    send_seconds: float = 0.0  # until the last export was answered (the rest is the judge catching up)

    @property
    def scored_once(self) -> int:
        """Accepted targets with exactly one evaluation."""
        return sum(1 for key in self.accepted if len(self.evaluations.get(key, ())) == 1)

    @property
    def missing(self) -> set[Key]:
        """Accepted targets without an evaluation."""
        return {key for key in self.accepted if not self.evaluations.get(key)}

    @property
    def twice(self) -> set[Key]:
        """Targets judged more than once (distinct evaluation span ids)."""
        return {key for key, ids in self.evaluations.items() if len(ids) > 1}

    def total(self, name: str) -> int:
        """A counter of ``/stats`` summed over the processes (each counts from zero)."""
        return sum(int(s.get(name) or 0) for s in self.stats)


#: When to kill, in seconds after the process became ready: late ones land while judgements run (litellm's
#: import alone takes 3-5 s on the first judge call), early ones during recovery and the import.
LATE, EARLY = (4.5, 7.0), (0.2, 1.0)


def crash_run(workdir: Path, *, turns_total: int, batch: int, kills: Sequence[tuple[float, float]],
              durable: bool = True, seed: int = 1, senders: int = 2, pace_s: float = 0.0) -> Report:
    """Send ``turns_total`` turns in batches, killing serve once per window of ``kills``; see the module docstring."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from cp_observe.testing import JudgeServer

    rng = random.Random(seed)
    accepted: set[Key] = set()
    refused: set[Key] = set()
    lock = threading.Lock()  # guards accepted and refused
    batches: list[tuple[list[ReadableSpan], list[Key]]] = [
        turns(i, min(batch, turns_total - i)) for i in range(0, turns_total, batch)]
    work = iter(batches)
    work_lock = threading.Lock()  # guards work
    # A judge that takes its time (200 ms a call, 8 in flight): every kill then lands while judgements run, so a
    # restart has work to resume. With an instant judge the lean transport drains the queue between batches.
    with JudgeServer(latency=0.2) as judge, OtlpReceiver() as receiver:
        serve = Serve(workdir / "data", judge.url, receiver.endpoint, durable=durable)
        serve.start()
        endpoint = f"http://127.0.0.1:{serve.http_port}/v1/traces"
        stats: list[dict[str, Any]] = []

        def send() -> None:
            exporter = OTLPSpanExporter(endpoint=endpoint, timeout=60)
            while True:
                with work_lock:
                    item = next(work, None)
                if item is None:
                    return
                spans, keys = item
                ok = exporter.export(spans).name == "SUCCESS"
                with lock:
                    (accepted if ok else refused).update(keys)
                if pace_s:
                    time.sleep(pace_s)  # simulated traffic, not a wait for anything

        started = time.monotonic()
        threads = [threading.Thread(target=send, name=f"sender-{i}") for i in range(senders)]
        for thread in threads:
            thread.start()
        done = threading.Event()
        for window in kills:
            if done.wait(rng.uniform(*window)):  # a random moment under load
                break
            with contextlib.suppress(OSError):
                stats.append(serve.stats())
            serve.kill()
            serve.start()
        for thread in threads:
            thread.join(600)
        send_seconds = time.monotonic() - started
        deadline = time.monotonic() + 120
        final = serve.stats()
        while final["pending"] and time.monotonic() < deadline:  # another process: read its /stats again
            time.sleep(0.1)
            final = serve.stats()
        stats.append(final)
        serve.stop()
        seconds = time.monotonic() - started
        evaluations, deliveries, failed = _evaluations(receiver)
    left = _left_in_store(workdir / "data" / "intake.sqlite3") if durable else 0
    return Report(accepted, refused, evaluations, deliveries, failed, stats, left, seconds,
                  serve.starts - 1, send_seconds)


def _evaluations(receiver: OtlpReceiver) -> tuple[dict[Key, set[str]], dict[Key, int], set[Key]]:
    """Per scored span: the distinct evaluation span ids, the evaluation spans received, and the failed ones."""
    evaluations: dict[Key, set[str]] = defaultdict(set)
    deliveries: dict[Key, int] = defaultdict(int)
    failed: set[Key] = set()
    for span in receiver.spans():
        if span.name != n.EVALUATION_SPAN_NAME:
            continue
        key = (span.trace_id.hex(), span.parent_span_id.hex())
        evaluations[key].add(span.span_id.hex())
        deliveries[key] += 1
        if span.status.code == 2:  # STATUS_CODE_ERROR: a failed judgement
            failed.add(key)
    return dict(evaluations), dict(deliveries), failed


def _left_in_store(store: Path) -> int:
    """Targets still in the store after the final drain."""
    if not store.exists():
        return 0
    with sqlite3.connect(store) as conn:
        return int(conn.execute("SELECT count(*) FROM spans WHERE target = 1").fetchone()[0])
