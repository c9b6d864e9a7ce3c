"""Which asyncio HTTP server for ``serve``'s door: aiohttp's low-level server against uvicorn (h11 or httptools).

Each server runs in its own process with the same trivial application: ``POST`` reads the whole body and
answers 200 with two bytes (what is left is the server's own cost). Measured per server, interleaved:

- memory per idle connection: resident set (``/proc``) before and after opening ``--idle`` connections that
  send nothing, divided by their number;
- requests per second on one kept-alive connection (``http.client``, 1 KiB protobuf-sized bodies, ``--seconds``),
  and on a new connection per request.

uvicorn is not a dependency: install it beside, not into, the project (``--path``):

    .venv/bin/pip install --target /tmp/uvicorn-cmp uvicorn httptools
    .venv/bin/python benchmarks/serve/bench_http_servers.py --path /tmp/uvicorn-cmp
"""

from __future__ import annotations

import argparse
import http.client
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

KINDS = ("aiohttp", "uvicorn-httptools", "uvicorn-h11")
BODY = b"\x0a" * 1024


def serve(kind: str, port: int) -> None:
    """The child: one server of ``kind`` on loopback ``port`` until killed."""
    if kind == "aiohttp":
        import asyncio

        from aiohttp import web

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            await request.read()
            return web.Response(body=b"ok")

        async def main() -> None:
            server = web.Server(handle, access_log=None)
            await asyncio.get_running_loop().create_server(server, "127.0.0.1", port, backlog=4096)
            print("ready", flush=True)
            await asyncio.Event().wait()

        asyncio.run(main())
        return
    import uvicorn

    async def app(scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
        assert scope["type"] == "http"
        more = True
        while more:
            message = await receive()  # type: ignore[operator]
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]

    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=kind.split("-", 1)[1], loop="asyncio",
                            lifespan="off", access_log=False, log_level="error", backlog=4096,
                            timeout_keep_alive=600)
    server = uvicorn.Server(config)
    print("ready", flush=True)
    server.run()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _post(connection: http.client.HTTPConnection) -> None:
    connection.request("POST", "/", body=BODY, headers={"Content-Type": "application/x-protobuf"})
    response = connection.getresponse()
    response.read()
    assert response.status == 200


def measure(kind: str, idle: int, seconds: float, path: str | None) -> dict[str, float]:
    """One server: KiB per idle connection, keep-alive and new-connection requests per second."""
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p))
    child = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port", str(port)], env=env,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for _ in range(200):  # uvicorn prints before it binds: wait for the port (another process)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        warm = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        _post(warm)
        before = _rss_kib(child.pid)
        sockets = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(idle)]
        probe = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        _post(probe)  # accepted in order: the idle ones before it are accepted too
        probe.close()
        per_connection = (_rss_kib(child.pid) - before) / idle
        for held in sockets:
            held.close()
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            _post(warm)
            done += 1
        kept = done / (time.perf_counter() - started)
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            fresh = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            _post(fresh)
            fresh.close()
            done += 1
        new = done / (time.perf_counter() - started)
        warm.close()
        return {"kib": per_connection, "kept": kept, "new": new}
    finally:
        child.kill()
        child.wait(10)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every server ``--rounds`` times, interleaved; print the medians as a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--path", help="where uvicorn (and httptools) are installed")
    parser.add_argument("--quick", action="store_true", help="one round, 500 idle connections, 1 s each")
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port)
        return 0
    if args.quick:
        args.idle, args.seconds, args.rounds = 500, 1.0, 1
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks._common import block_network, machine_line

    blocked = block_network()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    for _ in range(args.rounds):
        for kind in KINDS:
            results[kind].append(measure(kind, args.idle, args.seconds, args.path))
    print(f"\n{machine_line()}; median of {args.rounds} interleaved rounds; {args.idle:,} idle connections; "
          "1 KiB POST bodies\n")
    print("| server | KiB per idle connection | requests/s, kept alive | requests/s, new connection each |")
    print("| --- | --- | --- | --- |")
    for kind, rows in results.items():
        print(f"| {kind} | {statistics.median(r['kib'] for r in rows):.1f} | "
              f"{statistics.median(r['kept'] for r in rows):,.0f} | {statistics.median(r['new'] for r in rows):,.0f} |")
    print(f"\nnon-loopback connections refused: {blocked.total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
