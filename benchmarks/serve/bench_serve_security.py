"""What securing ``cp-observe serve`` costs at its front doors: plaintext vs TLS vs TLS + bearer token (+ mTLS).

One in-process ``ScorerService`` per variant (sample rate 0: requests are converted and admitted, nothing is
judged, so the figure is the front door's own cost), loopback only, certificates made with the ``openssl``
CLI. For each variant: p50/p99 latency and requests/s of one-span OTLP requests sent one at a time (the
machine is shared, so the per-request latency is the steadier figure), over a kept-alive connection (HTTP: one
``http.client`` connection; gRPC: one channel) and, for HTTP, with a new connection (and so a new TLS
handshake) per request, the worst case. A chunked-body row compares framing. Every variant runs in each of
``--rounds`` interleaved rounds; the table gives the median round. Baseline in the same run: plaintext.

    .venv/bin/python benchmarks/serve/bench_serve_security.py            # ~40 s
    .venv/bin/python benchmarks/serve/bench_serve_security.py --quick    # ~15 s
"""

from __future__ import annotations

import argparse
import http.client
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402 - after the path set-up

from benchmarks._common import InstantJudge, block_network, machine_line, markdown_table, percentile  # noqa: E402
from cp_observe.serve import ScorerService, ServeSettings  # noqa: E402
from tests.serve_support import retrieval_request  # noqa: E402
from tests.tls_support import Pki, make_pki  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
THREADS = 1


def _service(pki: Pki | None, token: bool, mutual: bool) -> ScorerService:
    explicit: dict[str, Any] = {"grpc_port": 0, "http_port": 0, "admin_port": 0, "sample_rate": 0.0}
    if pki is not None:
        explicit.update(tls_cert_file=str(pki.server_cert), tls_key_file=str(pki.server_key))
        if mutual:
            explicit["tls_client_ca_file"] = str(pki.ca)
    if token:
        explicit["auth_token"] = TOKEN
    return ScorerService(ServeSettings.resolve(explicit, environ={}), judge=InstantJudge()).start()


def _run(call: Callable[[], object], per_thread: int) -> tuple[float, list[float]]:
    """Run ``call`` ``per_thread`` times on each of THREADS threads; (requests/s, latencies in ms)."""
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        mine = []
        try:
            for _ in range(per_thread):
                start = time.perf_counter()
                call()
                mine.append((time.perf_counter() - start) * 1000)
        except BaseException as exc:  # noqa: BLE001 - reported after the run
            errors.append(exc)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return len(latencies) / elapsed, latencies


class _Http:
    """One kept-alive connection per thread, or a new one per request."""

    def __init__(self, port: int, context: ssl.SSLContext | None, token: bool, keep_alive: bool, chunked: bool):
        self.port, self.context, self.keep_alive, self.chunked = port, context, keep_alive, chunked
        self.headers = {"Content-Type": "application/x-protobuf"}
        if token:
            self.headers["Authorization"] = f"Bearer {TOKEN}"
        self.body = retrieval_request(1)
        self.local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        if self.context is not None:
            return http.client.HTTPSConnection("localhost", self.port, context=self.context, timeout=30)
        return http.client.HTTPConnection("localhost", self.port, timeout=30)

    def __call__(self) -> None:
        connection = getattr(self.local, "connection", None) if self.keep_alive else None
        if connection is None:
            connection = self._connection()
            self.local.connection = connection
        body: Any = iter([self.body[: len(self.body) // 2], self.body[len(self.body) // 2:]]) if self.chunked \
            else self.body
        connection.request("POST", "/v1/traces", body=body, headers=self.headers)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
        if not self.keep_alive:
            connection.close()


def _grpc(port: int, pki: Pki | None, token: bool, mutual: bool) -> tuple[Callable[[], object], Any]:
    if pki is None:
        channel = grpc.insecure_channel(f"localhost:{port}")
    else:
        key = pki.read("client_key") if mutual else None
        chain = pki.read("client_cert") if mutual else None
        credentials = grpc.ssl_channel_credentials(pki.read("ca"), private_key=key, certificate_chain=chain)
        channel = grpc.secure_channel(f"localhost:{port}", credentials)
    export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
    metadata = (("authorization", f"Bearer {TOKEN}"),) if token else None
    body = retrieval_request(1)
    return (lambda: export(body, metadata=metadata, timeout=30)), channel


def _variants(pki: Pki) -> Iterator[tuple[str, Pki | None, bool, bool]]:
    yield "plaintext (baseline)", None, False, False
    yield "plaintext + token", None, True, False
    yield "TLS", pki, False, False
    yield "TLS + token", pki, True, False
    yield "mTLS + token", pki, True, True


def _measure(pki: Pki, variant_pki: Pki | None, token: bool, mutual: bool, *, name: str,
             per_thread: int) -> Iterator[tuple[str, float, list[float]]]:
    """(door, requests/s, latencies) for one variant."""
    service = _service(variant_pki, token, mutual)
    context = None
    if variant_pki is not None:
        context = ssl.create_default_context(cafile=str(pki.ca))
        if mutual:
            context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    try:
        cases: list[tuple[str, Callable[[], object]]] = [
            ("HTTP keep-alive", _Http(service.port("http"), context, token, True, False)),
            ("HTTP new connection", _Http(service.port("http"), context, token, False, False)),
        ]
        if name.startswith("plaintext (") or name == "TLS + token":
            cases.append(("HTTP keep-alive, chunked", _Http(service.port("http"), context, token, True, True)))
        call, channel = _grpc(service.port("grpc"), variant_pki, token, mutual)
        cases.append(("gRPC", call))
        for door, case in cases:
            _run(case, 10)  # warm-up: connections, handshakes, code paths
            rate, latencies = _run(case, per_thread // (4 if "new connection" in door else 1))
            yield door, rate, latencies
        channel.close()
    finally:
        service.stop(5.0)


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests per row, one round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is shown")
    args = parser.parse_args(argv)
    per_thread = 200 if args.quick else 600
    rounds = 1 if args.quick else args.rounds
    blocked = block_network()
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory() as directory:
        pki = make_pki(Path(directory))
        for _ in range(rounds):
            for name, variant_pki, token, mutual in _variants(pki):
                measured = _measure(pki, variant_pki, token, mutual, name=name, per_thread=per_thread)
                for door, rate, latencies in measured:
                    results.setdefault((name, door), []).append(
                        (rate, percentile(latencies, 50), percentile(latencies, 99)))
    rows = []
    for (name, door), runs in results.items():
        rate, p50, p99 = sorted(runs)[len(runs) // 2]
        base = sorted(results[("plaintext (baseline)", door)])[len(runs) // 2]
        rows.append((name, door, f"{rate:,.0f}", f"{p50:.2f}", f"{p50 / base[1]:.2f}", f"{p99:.2f}"))
    print(f"cp-observe serve front doors, {THREADS} client thread, one-span OTLP requests, sample rate 0, "
          f"median of {rounds} round(s)")
    print(machine_line())
    print()
    print(markdown_table(["variant", "door", "requests/s", "p50 ms", "p50 vs plaintext", "p99 ms"], rows))
    print(f"\nnon-loopback connections refused: {blocked.total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
