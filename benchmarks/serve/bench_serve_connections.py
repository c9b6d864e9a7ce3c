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
``git archive`` of that commit under /tmp (``--old``), same flood and sender.

    .venv/bin/python benchmarks/serve/bench_serve_connections.py          # 10,000 connections, new and old door
    .venv/bin/python benchmarks/serve/bench_serve_connections.py --quick    # 1,000 connections, new door only (~30 s)
"""

from __future__ import annotations

import argparse
import asyncio
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


def start_serve(source: Path, extra: Sequence[str]) -> tuple[subprocess.Popen[bytes], int, int]:
    """``python -m cp_observe.serve`` from ``source`` on free loopback ports; returns once /readyz answers."""
    http_port, admin_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_"))}
    env.update(PYTHONPATH=str(source), NO_PROXY="*", no_proxy="*", LITELLM_LOCAL_MODEL_COST_MAP="True")
    command = [sys.executable, "-m", "cp_observe.serve", "--judge", "lexical", "--sample-rate", "0",
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
             extra: Sequence[str], settle_s: float = 0.0) -> dict[str, Any]:
    """One flood against one serve process; the row of the table."""
    process, http_port, admin_port = start_serve(source, extra)
    try:
        real = Sender(http_port, args.sender_timeout)
        assert real.warm(), "the sender's first export failed"
        threads_before, rss_before = proc_status(process.pid)
        flood = flooder.open(http_port, args.connections, mode=mode, parallel=args.parallel,
                             timeout=args.connect_timeout, drip=args.drip)
        threads, rss = proc_status(process.pid)
        held = max(1, flood.connected - flood.closed_by_server)  # what serve holds as memory is sampled
        try:
            sender = real.timed(args.requests)
        finally:
            real.close()
        threads_after, rss_after = proc_status(process.pid)
        deadline = time.monotonic() + settle_s
        while settle_s and flood.closed_by_server < flood.connected and time.monotonic() < deadline:
            time.sleep(0.1)  # serve's timeout closes them: another process, nothing to await but their EOFs
        seen = refusals(admin_port)
        flooder.close(flood)
    finally:
        process.kill()
        process.wait(30)
    return {"door": door, "mode": mode, "settings": " ".join(extra) or "defaults", "connected": flood.connected,
            "failed": flood.failed, "closed_by_server": flood.closed_by_server, "open_seconds": flood.seconds,
            "threads_before": threads_before, "threads": max(threads, threads_after),
            "rss_mib": max(rss, rss_after) / 1024, "kib_per_connection": (max(rss, rss_after) - rss_before) / held,
            "refusals": seen, **sender}


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
          "| refusals counted |")
    print("|" + " --- |" * 12)
    for r in rows:
        counted = ", ".join(f"{k.split(':', 1)[1]} {v:,}" for k, v in sorted(r["refusals"].items())) or "none"
        print(f"| {r['door']} | {r['mode']} | {r['settings']} | {r['connected']:,} | {r['failed']:,} | "
              f"{r['closed_by_server']:,} | {r['threads_before']} → {r['threads']} | {r['rss_mib']:.0f} | "
              f"{r['kib_per_connection']:.1f} | {r['exporter_ok']}/{r['requests']}, {r['exporter_p50']:.1f} / "
              f"{r['exporter_max']:.1f} | {r['fresh_ok']}/{r['requests']}, {r['fresh_p50']:.1f} / "
              f"{r['fresh_max']:.1f} | {counted} |")


def main(argv: Sequence[str] | None = None) -> int:
    """Run every scenario and print the table (and, with --json, the rows)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--parallel", type=int, default=500, help="connects in flight at once")
    parser.add_argument("--connect-timeout", type=float, default=3.0)
    parser.add_argument("--drip", type=float, default=5.0, help="seconds between a slow client's header lines")
    parser.add_argument("--requests", type=int, default=20, help="timed requests of each sender kind")
    parser.add_argument("--sender-timeout", type=float, default=10.0)
    parser.add_argument("--old", action=argparse.BooleanOptionalAction, default=True,
                        help=f"also measure the old http.server door (commit {OLD_COMMIT})")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    parser.add_argument("--quick", action="store_true", help="1,000 connections, 5 requests, new door only")
    args = parser.parse_args(argv)
    if args.quick:
        args.connections, args.requests, args.drip, args.old = 1000, 5, 1.0, False
    blocked = block_network()
    raise_nofile()
    need = args.connections + 1000
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < need:
        print(f"RLIMIT_NOFILE hard limit below {need}: lower --connections", file=sys.stderr)
        return 2
    room = str(args.connections + 2000)
    small = str(4096 if args.connections >= 8192 else max(16, args.connections // 3))  # 4096: the default
    plan = [("new", "idle", ["--max-connections", room]), ("new", "slow", ["--max-connections", room]),
            ("new", "idle", ["--max-connections", small]),
            ("new", "slow", ["--max-connections", room, "--http-read-timeout-s", str(max(1.0, args.drip / 2))])]
    if args.old:
        plan += [("old", "idle", []), ("old", "slow", [])]
    rows = []
    flooder = Flooder()
    with tempfile.TemporaryDirectory(prefix="cp-door-old-") as workdir:
        sources = {"new": ROOT, "old": old_source(Path(workdir)) if args.old else ROOT}
        try:
            for door, mode, extra in plan:
                timeout = extra[extra.index("--http-read-timeout-s") + 1] if "--http-read-timeout-s" in extra else 0
                row = scenario(flooder, door, sources[door], mode=mode, args=args, extra=extra,
                               settle_s=float(timeout) * 2 + 5 if timeout else 0.0)
                row["requests"] = args.requests
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            flooder.stop()
    print(f"\n{machine_line()}")
    print_table(rows, args.connections)
    print(f"\nnon-loopback connections refused: {blocked.total}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
