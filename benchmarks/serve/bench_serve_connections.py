"""Many idle or slow connections against ``cp-observe serve``'s OTLP/HTTP door: is a real sender still answered?

``serve`` runs as a ``python -m cp_observe.serve`` subprocess (it inherits this process's soft ``RLIMIT_NOFILE``,
raised to the hard limit), sample rate 0 so a request is decoded, converted and admitted but nothing judged:
the door's own cost. A flood of loopback connections (an asyncio client in this process, its own limit
raised too) is opened, ``--parallel`` connects in flight, each bounded by ``--connect-timeout``:

- ``idle``: connect and send nothing (what keep-alive exporters between batches, or a port scanner, look like);
- ``slow``: slowloris: a request line and one header, then one more header line every ``--drip`` seconds,
  never the end of the headers.

With the flood held, a real sender is timed: the OTLP/HTTP exporter of ``opentelemetry-exporter-otlp-proto-http``
(one ``requests`` session: keep-alive), ``--requests`` exports of one span; and as many one-span protobuf POSTs on
a new connection each (``http.client``). Then ``serve``'s threads and resident memory (``/proc``), and what the
flood saw: connected, connects that failed or timed out, connections the server closed; and ``serve``'s own
``/stats`` refusals. The old door (``http.server``, commit ``9e3f1ef``) runs in the same invocation from a
``git archive`` of that commit under /tmp (``--old``), same flood and sender. These rows set
``--http-first-request-timeout-s 600``: they measure connections held, which the default deadline would close.

The second table (``--flood``) is ``serve`` at its defaults with a bearer token set: a flood process (its own GIL
and collector, so neither stalls the sender) keeps ``--connections`` idle or slowloris connections open for
``--flood-seconds``, opening a new one the moment ``serve`` closes one, as fast as it can; the sender, with the
token, sends one export (kept alive) and one new-connection POST every ``--flood-interval`` seconds throughout.
Baseline in the same run: the door before eviction (commit ``358e255``, which closed every newcomer at the bound).
Every collection of 5 ms or more in ``serve`` is logged (a ``gc`` callback in a ``-c`` bootstrap) and each
request over 100 ms is checked against them; ``serve``'s CPU over the window says whether it had the core.

    .venv/bin/python benchmarks/serve/bench_serve_connections.py                     # 10,000 connections, new and old door
    .venv/bin/python benchmarks/serve/bench_serve_connections.py --quick    # 1,000 connections, new door only (~30 s)
    .venv/bin/python benchmarks/serve/bench_serve_connections.py --no-held   # the flood at the defaults only (~2 min)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks._common import block_network, machine_line  # noqa: E402 - after the path set-up
from tests.serve_support import free_port, retrieval_request, retrieval_spans  # noqa: E402

OLD_COMMIT = "9e3f1ef"
BASE_COMMIT = "358e255"  # the door before eviction: at the bound it closed every newcomer at accept
FLOOD_TOKEN = "bench-fl00d-token-7c1d"
GC_MIN_MS = 5.0  # collections at least this long are logged (serve's and this process's)
# Runs serve with a gc callback that writes every collection of GC_MIN_MS or more (wall time, generation, ms) to
# $BENCH_GC_LOG: what the slow requests are compared with.
_GC_BOOT = """
import gc, os, runpy, sys, time
log = open(os.environ["BENCH_GC_LOG"], "a", buffering=1)
started = [0.0]
def timed(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
        return
    ms = (time.perf_counter() - started[0]) * 1000
    if ms >= float(os.environ["BENCH_GC_MIN_MS"]):
        log.write(f"{time.time():.4f} {info['generation']} {ms:.1f}\\n")
gc.callbacks.append(timed)
sys.argv[0] = "cp_observe.serve"
runpy.run_module("cp_observe.serve", run_name="__main__", alter_sys=True)
"""


class GcPauses:
    """Collections of GC_MIN_MS or more in this process (the sender's and, in-process, the flooder's)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, int, float]] = []  # (wall time, generation, ms)
        self._started = 0.0
        gc.callbacks.append(self._timed)

    def _timed(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        ms = (time.perf_counter() - self._started) * 1000
        if ms >= GC_MIN_MS:
            self.pauses.append((time.time(), int(info["generation"]), ms))

    def between(self, start: float, end: float) -> list[tuple[float, int, float]]:
        """The pauses logged between two wall times."""
        return [p for p in self.pauses if start <= p[0] <= end]


def serve_pauses(path: Path, start: float, end: float) -> list[tuple[float, int, float]]:
    """The collections serve logged between two wall times."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        wall, generation, ms = line.split()
        if start <= float(wall) <= end:
            out.append((float(wall), int(generation), float(ms)))
    return out


def pause_text(pauses: list[tuple[float, int, float]]) -> str:
    """Per generation, ``gN count × max ms`` of the logged collections, or ``none``."""
    if not pauses:
        return "none"
    parts = []
    for generation in sorted({p[1] for p in pauses}):
        times = [p[2] for p in pauses if p[1] == generation]
        parts.append(f"gen{generation} {len(times)} × ≤{max(times):.0f}")
    return ", ".join(parts)


def raise_nofile() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit, for this process and the serve processes it starts."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@dataclass
class Flood:
    """What the flooding client saw."""

    connected: int = 0
    failed: int = 0  # refused, reset or timed out while connecting
    closed_by_server: int = 0
    seconds: float = 0.0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)


class Flooder:
    """An asyncio loop in a thread holding the flood's connections."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._tasks: list[asyncio.Task[None]] = []

    def open(self, port: int, count: int, *, mode: str, parallel: int, timeout: float, drip: float) -> Flood:
        """Open ``count`` connections (``parallel`` at a time); returns once each connected or failed."""
        opening = self._open(port, count, mode=mode, parallel=parallel, timeout=timeout, drip=drip)
        return asyncio.run_coroutine_threadsafe(opening, self.loop).result()

    async def _open(self, port: int, count: int, *, mode: str, parallel: int, timeout: float, drip: float) -> Flood:
        flood = Flood()
        gate = asyncio.Semaphore(parallel)
        settled = asyncio.Event()  # every connection connected or failed
        started = time.perf_counter()

        def settle() -> None:
            if flood.connected + flood.failed == count:
                settled.set()

        async def one() -> None:
            async with gate:
                try:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
                except (OSError, asyncio.TimeoutError):
                    flood.failed += 1
                    settle()
                    return
                flood.connected += 1
                flood.writers.append(writer)
                settle()
            await self._hold(reader, writer, flood, mode, drip)

        self._tasks = [self.loop.create_task(one()) for _ in range(count)]
        await settled.wait()
        flood.seconds = time.perf_counter() - started
        return flood

    @staticmethod
    async def _hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flood: Flood, mode: str,
                    drip: float) -> None:
        try:
            if mode == "slow":
                writer.write(b"POST /v1/traces HTTP/1.1\r\nHost: bench\r\n")
                i = 0
                while not reader.at_eof():
                    try:
                        if await asyncio.wait_for(reader.read(1), drip) == b"":
                            break
                    except asyncio.TimeoutError:
                        writer.write(f"X-Drip-{i}: a\r\n".encode())  # one more header line, never the blank one
                        i += 1
            elif await reader.read(1) != b"":
                return
            flood.closed_by_server += 1
        except OSError:
            flood.closed_by_server += 1

    def close(self, flood: Flood) -> None:
        """Close every connection of the flood."""
        def close_all() -> None:
            for writer in flood.writers:
                writer.transport.abort()
            for task in self._tasks:
                task.cancel()

        self.loop.call_soon_threadsafe(close_all)

    def stop(self) -> None:
        """Stop the loop thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def proc_status(pid: int) -> tuple[int, int]:
    """(threads, resident KiB) of a process, from /proc."""
    threads = rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            threads = int(line.split()[1])
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return threads, rss


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_serve(source: Path, extra: Sequence[str], *, gc_log: Path, token: str | None = None,
                ) -> tuple[subprocess.Popen[bytes], int, int]:
    """``cp_observe.serve`` from ``source`` on free loopback ports, its long collections logged to ``gc_log``.

    Returns once /readyz answers. With ``token``, senders must present it (``CP_OBSERVE_AUTH_TOKEN``).
    """
    http_port, admin_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_"))}
    env.update(PYTHONPATH=str(source), NO_PROXY="*", no_proxy="*", LITELLM_LOCAL_MODEL_COST_MAP="True",
               BENCH_GC_LOG=str(gc_log), BENCH_GC_MIN_MS=str(GC_MIN_MS))
    if token is not None:
        env.update(CP_OBSERVE_AUTH_TOKEN=token, CP_OBSERVE_ADMIN_AUTH="false")
    command = [sys.executable, "-c", _GC_BOOT, "--judge", "lexical", "--sample-rate", "0",
               "--grpc-port", "0", "--http-port", str(http_port), "--admin-port", str(admin_port),
               "--log-level", "error", *extra]
    # The raised RLIMIT_NOFILE of this process is inherited (a preexec_fn would do the same, but is unsafe with the
    # flooder's thread running); the new door raises its own soft limit towards max_connections anyway.
    process = subprocess.Popen(command, cwd=source, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/readyz", timeout=1) as response:
                if response.status == 200:
                    return process, http_port, admin_port
        except OSError:
            time.sleep(0.05)  # another process: there is nothing to await but its port
    process.kill()
    raise RuntimeError("serve did not start")


def refusals(admin_port: int) -> dict[str, int]:
    """``/stats`` refusals of a running serve (empty if it does not answer in time)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/stats", timeout=10) as response:
            return dict(json.loads(response.read())["refusals"])
    except OSError:
        return {}


class Sender:
    """A real sender: the OTLP/HTTP exporter (one ``requests`` session, kept alive) and new-connection POSTs."""

    def __init__(self, http_port: int, timeout: float) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self._port = http_port
        self._timeout = timeout
        self._exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{http_port}/v1/traces", timeout=timeout)
        self._spans = retrieval_spans(1)
        self._body = retrieval_request(1)

    def warm(self) -> bool:
        """One export before the flood: the exporter holds its connection, as a running app's does."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        return self._exporter.export(self._spans) is SpanExportResult.SUCCESS

    def timed(self, requests: int) -> dict[str, Any]:
        """Latency (ms) of ``requests`` exports and of as many one-span POSTs on a new connection each."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        exported, fresh = [], []
        ok_export = ok_fresh = 0
        for _ in range(requests):
            started = time.perf_counter()
            ok_export += self._exporter.export(self._spans) is SpanExportResult.SUCCESS
            exported.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            connection = http.client.HTTPConnection("127.0.0.1", self._port, timeout=self._timeout)
            try:
                connection.request("POST", "/v1/traces", body=self._body,
                                   headers={"Content-Type": "application/x-protobuf"})
                response = connection.getresponse()
                response.read()
                ok_fresh += response.status == 200
            except OSError:
                pass
            finally:
                connection.close()
            fresh.append((time.perf_counter() - started) * 1000)
        return {"exporter_ok": ok_export, "exporter_p50": statistics.median(exported),
                "exporter_max": max(exported), "fresh_ok": ok_fresh, "fresh_p50": statistics.median(fresh),
                "fresh_max": max(fresh)}

    def close(self) -> None:
        """Shut the exporter down."""
        self._exporter.shutdown()


def scenario(flooder: Flooder, door: str, source: Path, *, mode: str, args: argparse.Namespace,
             extra: Sequence[str], pauses: GcPauses, settle_s: float = 0.0) -> dict[str, Any]:
    """One flood against one serve process; the row of the table."""
    with tempfile.TemporaryDirectory(prefix="cp-door-gc-") as scratch:
        gc_log = Path(scratch) / "gc.log"
        process, http_port, admin_port = start_serve(source, extra, gc_log=gc_log)
        try:
            real = Sender(http_port, args.sender_timeout)
            assert real.warm(), "the sender's first export failed"
            threads_before, rss_before = proc_status(process.pid)
            flood = flooder.open(http_port, args.connections, mode=mode, parallel=args.parallel,
                                 timeout=args.connect_timeout, drip=args.drip)
            threads, rss = proc_status(process.pid)
            held = max(1, flood.connected - flood.closed_by_server)  # what serve holds as memory is sampled
            window = time.time()
            try:
                sender = real.timed(args.requests)
            finally:
                real.close()
            window = (window, time.time())
            threads_after, rss_after = proc_status(process.pid)
            deadline = time.monotonic() + settle_s
            while settle_s and flood.closed_by_server < flood.connected and time.monotonic() < deadline:
                time.sleep(0.1)  # serve's timeout closes them: another process, nothing to await but their EOFs
            seen = refusals(admin_port)
            flooder.close(flood)
        finally:
            process.kill()
            process.wait(30)
        serve_gc = serve_pauses(gc_log, *window)
    return {"door": door, "mode": mode, "settings": " ".join(extra) or "defaults", "connected": flood.connected,
            "failed": flood.failed, "closed_by_server": flood.closed_by_server, "open_seconds": flood.seconds,
            "threads_before": threads_before, "threads": max(threads, threads_after),
            "rss_mib": max(rss, rss_after) / 1024, "kib_per_connection": (max(rss, rss_after) - rss_before) / held,
            "refusals": seen, "serve_gc": pause_text(serve_gc), "client_gc": pause_text(pauses.between(*window)),
            **sender}


# --- the flood at the defaults: a client reopening its connections as fast as it can, a token-holding sender ------
async def _hold_until_closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, mode: str,
                             drip: float) -> None:
    """Hold one flood connection (idle, or slowloris headers dripped every ``drip`` s) until serve closes it."""
    if mode == "slow":
        writer.write(b"POST /v1/traces HTTP/1.1\r\nHost: bench\r\n")
    i = 0
    while True:
        try:
            if await asyncio.wait_for(reader.read(1), drip) == b"":
                return
        except asyncio.TimeoutError:
            if mode == "slow":
                writer.write(f"X-Drip-{i}: a\r\n".encode())
                i += 1


def flood_worker(args: argparse.Namespace) -> int:
    """In its own process (so its GIL and collections are not the sender's): keep ``--connections`` connections
    open against ``--port`` for ``--seconds``, opening a new one the moment serve closes one; print the counts."""
    raise_nofile()
    counts = {"opened": 0, "failed": 0, "closed_by_server": 0, "held_max": 0}
    held = 0

    async def run() -> None:
        nonlocal held
        loop = asyncio.get_running_loop()
        stop_at = loop.time() + args.seconds
        gate = asyncio.Semaphore(args.parallel)

        async def one() -> None:
            nonlocal held
            while loop.time() < stop_at:
                async with gate:
                    try:
                        reader, writer = await asyncio.wait_for(
                            asyncio.open_connection("127.0.0.1", args.port), args.connect_timeout)
                    except (OSError, asyncio.TimeoutError):
                        counts["failed"] += 1
                        continue
                counts["opened"] += 1
                held += 1
                counts["held_max"] = max(counts["held_max"], held)
                try:
                    await asyncio.wait_for(_hold_until_closed(reader, writer, args.mode, args.drip),
                                           max(0.0, stop_at - loop.time()))
                    counts["closed_by_server"] += 1
                except (asyncio.TimeoutError, OSError):
                    pass
                finally:
                    held -= 1
                    writer.transport.abort()

        await asyncio.gather(*(one() for _ in range(args.connections)))

    asyncio.run(run())
    print(json.dumps(counts), flush=True)
    return 0


class TokenSender:
    """The real sender during a flood: the OTLP/HTTP exporter (kept alive) and new-connection POSTs, with a token."""

    def __init__(self, http_port: int, timeout: float) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self._port = http_port
        self._timeout = timeout
        self._headers = {"Authorization": f"Bearer {FLOOD_TOKEN}"}
        self._exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{http_port}/v1/traces", timeout=timeout,
                                          headers=self._headers)
        self._spans = retrieval_spans(1)
        self._body = retrieval_request(1)

    def export(self) -> bool:
        """One export through the exporter's kept-alive session."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        return self._exporter.export(self._spans) is SpanExportResult.SUCCESS

    def fresh(self) -> bool:
        """One POST on a new connection."""
        connection = http.client.HTTPConnection("127.0.0.1", self._port, timeout=self._timeout)
        try:
            connection.request("POST", "/v1/traces", body=self._body,
                               headers={"Content-Type": "application/x-protobuf", **self._headers})
            response = connection.getresponse()
            response.read()
            return response.status == 200
        except OSError:
            return False
        finally:
            connection.close()

    def close(self) -> None:
        """Shut the exporter down."""
        self._exporter.shutdown()


def flood_scenario(door: str, source: Path, *, mode: str, args: argparse.Namespace,
                   pauses: GcPauses) -> dict[str, Any]:
    """serve at its defaults (a token set), a flood process reopening ``--connections`` connections for
    ``--flood-seconds``, and the sender timed throughout: one export and one new-connection POST every
    ``--flood-interval`` seconds."""
    with tempfile.TemporaryDirectory(prefix="cp-door-flood-") as scratch:
        gc_log = Path(scratch) / "gc.log"
        process, http_port, admin_port = start_serve(source, [], gc_log=gc_log, token=FLOOD_TOKEN)
        try:
            sender = TokenSender(http_port, args.sender_timeout)
            assert sender.export(), "the sender's first export failed"
            threads_before, rss_before = proc_status(process.pid)
            worker = subprocess.Popen(
                ["nice", "-n", str(args.flood_nice), sys.executable, __file__, "--flood-worker", "--port", str(http_port), "--mode", mode,
                 "--connections", str(args.connections), "--parallel", str(args.parallel), "--seconds",
                 str(args.flood_seconds), "--connect-timeout", str(args.connect_timeout), "--drip", str(args.drip)],
                stdout=subprocess.PIPE, text=True)
            started = time.time()
            cpu_before = proc_cpu_s(process.pid)
            timed: list[tuple[float, float]] = []  # (wall time at the end, ms) of each request
            failed = {"exporter": 0, "fresh": 0}
            threads, rss = threads_before, rss_before
            try:
                while time.time() - started < args.flood_seconds:
                    for kind, call in (("exporter", sender.export), ("fresh", sender.fresh)):
                        begun = time.perf_counter()
                        ok = call()
                        timed.append((time.time(), (time.perf_counter() - begun) * 1000))
                        failed[kind] += not ok
                    sampled = proc_status(process.pid)
                    threads, rss = max(threads, sampled[0]), max(rss, sampled[1])
                    time.sleep(args.flood_interval)  # a steady sender: one pair of requests per interval
            finally:
                sender.close()
            window = (started, time.time())
            cpu = proc_cpu_s(process.pid) - cpu_before
            out, _ = worker.communicate(timeout=args.flood_seconds + 60)
            flood = json.loads(out.strip().splitlines()[-1])
            seen = refusals(admin_port)
        finally:
            process.kill()
            process.wait(30)
        serve_gc = serve_pauses(gc_log, *window)
    ordered = sorted(ms for _, ms in timed)
    slow = [(end, ms) for end, ms in timed if ms > 100]
    in_gc = sum(any(wall - pause / 1000 < end and wall > end - ms / 1000 for wall, _, pause in serve_gc)
                for end, ms in slow)
    return {"door": door, "mode": mode, "flood_nice": args.flood_nice, **flood, "requests": len(timed), "exporter_failed": failed["exporter"],
            "fresh_failed": failed["fresh"], "p50": statistics.median(ordered),
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], "max": ordered[-1],
            "over_100ms": len(slow), "over_100ms_in_serve_gc": in_gc,
            "serve_cpu_share": cpu / (window[1] - window[0]), "threads_before": threads_before, "threads": threads,
            "rss_before_mib": rss_before / 1024, "rss_mib": rss / 1024, "refusals": seen,
            "serve_gc": pause_text(serve_gc), "client_gc": pause_text(pauses.between(*window))}


def print_flood_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The Markdown table of the flood rows."""
    print(f"\nserve at its defaults (token set); a flood process keeps {args.connections:,} connections open for "
          f"{args.flood_seconds:.0f} s, reopening each one serve closes; the sender: one export (kept alive) and one "
          f"new-connection POST every {args.flood_interval * 1000:.0f} ms, both with the token\n")
    print("| door | flood | flood process nice | flood connections opened | connect failed | closed by serve | held at most | "
          "sender requests | sender failed (export / new conn) | sender p50 / p99 / max ms | over 100 ms (of them "
          "during a serve GC pause) | serve CPU (cores) | serve threads | serve RSS MiB | refusals counted | "
          "serve GC pauses ≥ 5 ms: count × max ms |")
    print("|" + " --- |" * 16)
    for r in rows:
        counted = ", ".join(f"{k.split(':', 1)[1]} {v:,}" for k, v in sorted(r["refusals"].items())) or "none"
        print(f"| {r['door']} | {r['mode']} | {r['flood_nice']} | {r['opened']:,} | {r['failed']:,} | {r['closed_by_server']:,} | "
              f"{r['held_max']:,} | {r['requests']} | {r['exporter_failed']} / {r['fresh_failed']} | "
              f"{r['p50']:.1f} / {r['p99']:.1f} / {r['max']:.1f} | {r['over_100ms']} ({r['over_100ms_in_serve_gc']}) | "
              f"{r['serve_cpu_share']:.2f} | "
              f"{r['threads_before']} → {r['threads']} | {r['rss_before_mib']:.0f} → {r['rss_mib']:.0f} | "
              f"{counted} | {r['serve_gc']} |")


def base_source(workdir: Path) -> Path:
    """The door before eviction: ``git archive`` of ``BASE_COMMIT``."""
    archive = subprocess.run(["git", "archive", BASE_COMMIT, "cp_observe"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(workdir)], input=archive.stdout, check=True)
    return workdir


def old_source(workdir: Path) -> Path:
    """The old door's tree: ``git archive`` of ``OLD_COMMIT`` (no worktree, nothing left in the repository)."""
    archive = subprocess.run(["git", "archive", OLD_COMMIT, "cp_observe"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(workdir)], input=archive.stdout, check=True)
    return workdir


def print_table(rows: list[dict[str, Any]], connections: int) -> None:
    """The Markdown table of every row."""
    print(f"\n{connections:,} connections per flood; sender latency in ms (p50 / max)\n")
    print("| door | flood | serve settings | connected | connect failed | closed by serve | serve threads | "
          "serve RSS MiB | KiB / held conn | exporter (keep-alive) ok, p50 / max | new connection ok, p50 / max "
          "| refusals counted | serve GC pauses ≥ 5 ms: count, max ms | bench process GC pauses ≥ 5 ms |")
    print("|" + " --- |" * 14)
    for r in rows:
        counted = ", ".join(f"{k.split(':', 1)[1]} {v:,}" for k, v in sorted(r["refusals"].items())) or "none"
        print(f"| {r['door']} | {r['mode']} | {r['settings']} | {r['connected']:,} | {r['failed']:,} | "
              f"{r['closed_by_server']:,} | {r['threads_before']} → {r['threads']} | {r['rss_mib']:.0f} | "
              f"{r['kib_per_connection']:.1f} | {r['exporter_ok']}/{r['requests']}, {r['exporter_p50']:.1f} / "
              f"{r['exporter_max']:.1f} | {r['fresh_ok']}/{r['requests']}, {r['fresh_p50']:.1f} / "
              f"{r['fresh_max']:.1f} | {counted} | {r['serve_gc']} | {r['client_gc']} |")


def main(argv: Sequence[str] | None = None) -> int:
    """Run every scenario and print the tables (and, with --json, the rows)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--parallel", type=int, default=500, help="connects in flight at once")
    parser.add_argument("--connect-timeout", type=float, default=3.0)
    parser.add_argument("--drip", type=float, default=5.0, help="seconds between a slow client's header lines")
    parser.add_argument("--requests", type=int, default=20, help="timed requests of each sender kind")
    parser.add_argument("--sender-timeout", type=float, default=10.0)
    parser.add_argument("--old", action=argparse.BooleanOptionalAction, default=True,
                        help=f"also measure the old http.server door (commit {OLD_COMMIT})")
    parser.add_argument("--held", action=argparse.BooleanOptionalAction, default=True,
                        help="the held-connection floods (first table)")
    parser.add_argument("--flood", action=argparse.BooleanOptionalAction, default=True,
                        help=f"the reopening floods at the defaults, this door and the one before (commit {BASE_COMMIT})")
    parser.add_argument("--flood-seconds", type=float, default=20.0)
    parser.add_argument("--flood-interval", type=float, default=0.05, help="seconds between the sender's pairs")
    parser.add_argument("--flood-nice", type=int, default=0,
                        help="niceness of the flood process (on a shared box its CPU is otherwise serve's; an "
                             "attacker runs elsewhere)")
    parser.add_argument("--flood-rows", default="this:idle,this:slow,before:idle,before:slow",
                        help="which flood rows to run (door:flood, comma-separated)")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    parser.add_argument("--quick", action="store_true", help="1,000 connections, 5 requests, new door only")
    parser.add_argument("--flood-worker", action="store_true", help=argparse.SUPPRESS)  # the flood's own process
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.flood_worker:
        return flood_worker(args)
    if args.quick:
        args.connections, args.requests, args.drip, args.old, args.flood_seconds = 1000, 5, 1.0, False, 5.0
    blocked = block_network()
    raise_nofile()
    need = args.connections + 1000
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < need:
        print(f"RLIMIT_NOFILE hard limit below {need}: lower --connections", file=sys.stderr)
        return 2
    room = str(args.connections + 2000)
    small = str(4096 if args.connections >= 8192 else max(16, args.connections // 3))  # 4096: the default
    held = ["--http-first-request-timeout-s", "600"]  # these rows measure connections held: no first-request deadline
    plan = [("new", "idle", ["--max-connections", room, *held]), ("new", "slow", ["--max-connections", room, *held]),
            ("new", "idle", ["--max-connections", small, *held]),
            ("new", "slow", ["--max-connections", room, "--http-read-timeout-s", str(max(1.0, args.drip / 2)), *held])]
    if args.old:
        plan += [("old", "idle", []), ("old", "slow", [])]
    rows: list[dict[str, Any]] = []
    floods: list[dict[str, Any]] = []
    pauses = GcPauses()
    with tempfile.TemporaryDirectory(prefix="cp-door-old-") as old_dir, \
            tempfile.TemporaryDirectory(prefix="cp-door-base-") as base_dir:
        if args.held:
            flooder = Flooder()
            sources = {"new": ROOT, "old": old_source(Path(old_dir)) if args.old else ROOT}
            try:
                for door, mode, extra in plan:
                    timeout = extra[extra.index("--http-read-timeout-s") + 1] if "--http-read-timeout-s" in extra else 0
                    row = scenario(flooder, door, sources[door], mode=mode, args=args, extra=extra, pauses=pauses,
                                   settle_s=float(timeout) * 2 + 5 if timeout else 0.0)
                    row["requests"] = args.requests
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
            finally:
                flooder.stop()
        if args.flood:
            before = base_source(Path(base_dir))
            sources = {"this": ROOT, "before": before}
            for door, mode in (row.split(":") for row in args.flood_rows.split(",")):
                row = flood_scenario(door, sources[door], mode=mode, args=args, pauses=pauses)
                floods.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"\n{machine_line()}")
    if rows:
        print_table(rows, args.connections)
    if floods:
        print_flood_table(floods, args)
    print(f"\nnon-loopback connections refused: {blocked.total}")
    if args.json is not None:
        args.json.write_text(json.dumps({"held": rows, "flood": floods}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
