"""Decoding an OTLP/JSON trace request: the generic protobuf JSON parser against the direct builder.

``serve``'s OTLP/HTTP port and every offline input decode OTLP/JSON with one decoder (``_traces/_otlp_json.py``).
This measures the two ways a request can be built from the same JSON body, so the choice is shown, not assumed:

- **json_format** (baseline): hex ids rewritten as base64, then ``google.protobuf.json_format.ParseDict``, the
  path ``serve`` used before;
- **direct**: ``request_from_document``, which fills the protobuf request from the parsed JSON itself.

Both include ``json.loads`` of the body. Bodies hold agent + retrieval turns, five 300-character documents each.

    .venv/bin/python benchmarks/serve/bench_otlp_decode.py            # 10, 100 and 1000 turns per body
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import machine_line, markdown_table
from google.protobuf import json_format  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from cp_observe._traces._otlp_json import request_from_document

_IDS = {"traceId": 32, "spanId": 16, "parentSpanId": 16}


def _body(turns: int) -> bytes:
    """An OTLP/JSON request of ``turns`` agent spans, each with a retrieval child of five documents."""
    spans: list[dict[str, Any]] = []
    for t in range(turns):
        trace = f"{t + 1:032x}"
        agent = {"traceId": trace, "spanId": f"{2 * t + 1:016x}", "name": "agent", "kind": 1,
                 "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
                 "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}},
                                {"key": "output.value", "value": {"stringValue": "an answer " * 20}}],
                 "status": {}}
        documents = [{"key": f"retrieval.documents.{i}.document.content", "value": {"stringValue": "x" * 300}}
                     for i in range(5)]
        retrieval = {"traceId": trace, "spanId": f"{2 * t + 2:016x}", "parentSpanId": agent["spanId"],
                     "name": "retrieve", "kind": 1, "startTimeUnixNano": "1700000000100000000",
                     "endTimeUnixNano": "1700000000200000000",
                     "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "retrieval"}},
                                    {"key": "gen_ai.data_source.id", "value": {"stringValue": "docs"}},
                                    {"key": "retrieval.top_k", "value": {"intValue": "5"}}, *documents],
                     "status": {}}
        spans += [agent, retrieval]
    document = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "bench"}}]},
        "scopeSpans": [{"scope": {"name": "bench"}, "spans": spans}]}]}
    return json.dumps(document).encode()


def _json_format(body: bytes) -> Any:
    document = json.loads(body)
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in _IDS:
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode("ascii")
    return json_format.ParseDict(document, ExportTraceServiceRequest(), ignore_unknown_fields=True)


def _direct(body: bytes) -> Any:
    return request_from_document(json.loads(body))


def _time(decode: Any, body: bytes, repeat: int) -> float:
    """Median seconds per decode over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        decode(body)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    rows = []
    for turns in args.turns:
        body = _body(turns)
        assert _json_format(body) == _direct(body), "the two decoders disagree"
        spans = 2 * turns
        base = _time(_json_format, body, args.repeat)
        fast = _time(_direct, body, args.repeat)
        rows.append([f"{turns} turns ({len(body) // 1024} KiB)", f"{base * 1e6 / spans:.1f}",
                     f"{fast * 1e6 / spans:.1f}", f"{base / fast:.1f}x"])
    print(machine_line())
    print(markdown_table(["body", "json_format µs/span (baseline)", "direct µs/span", "speed-up"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
