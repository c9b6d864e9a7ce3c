"""Helpers for the replay tests: the demo's traces exported by the real OTLP exporter, written as files the way
the Collector's ``file`` exporter writes them, and the evaluations read back from a file.

The Collector writes here through ``collector_json_line``, an encoding written for the tests from the OTLP
specification's JSON rules (not the replay's own writer), so the replay is checked against the documented
shape rather than against itself; ``check_collector_shape`` checks a line against those rules.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from cp_observe import _names as n
from cp_observe.replay import TraceFile
from cp_observe.serve import spans_from_request
from tests.otlp_receiver import OtlpReceiver

DATA = Path(__file__).parent / "data" / "replay"
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_DIGITS = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class Exported:
    """One demo run's traces, as the Collector would have written them, and its live evaluations."""

    jsonl: Path
    proto: Path
    live: dict[int, tuple[int, float, tuple[bool, ...]]]  # scored span id -> (trace id, AP, verdicts)
    trace_ids: set[int]


def collector_json_line(request: ExportTraceServiceRequest) -> str:
    """The request as the ``file`` exporter writes it: OTLP/JSON, hex ids, integer enums, one line."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document, separators=(",", ":"))


def check_collector_shape(line: str) -> None:
    """Assert one line has the documented OTLP/JSON shape of the Collector's ``file`` exporter."""
    assert line.endswith("\n") or "\n" not in line
    document = json.loads(line)
    assert isinstance(document, dict) and list(document) == ["resourceSpans"], list(document)
    for resource in document["resourceSpans"]:
        assert set(resource) <= {"resource", "scopeSpans", "schemaUrl"}, set(resource)
        for attribute in resource.get("resource", {}).get("attributes", []):
            _check_key_value(attribute)
        for scope in resource["scopeSpans"]:
            assert set(scope) <= {"scope", "spans", "schemaUrl"}, set(scope)
            for span in scope["spans"]:
                assert _HEX32.match(span["traceId"]), span["traceId"]
                assert _HEX16.match(span["spanId"]), span["spanId"]
                if "parentSpanId" in span:
                    assert _HEX16.match(span["parentSpanId"]), span["parentSpanId"]
                assert isinstance(span.get("kind", 0), int)  # enums are integers
                assert _DIGITS.match(span["startTimeUnixNano"]) and _DIGITS.match(span["endTimeUnixNano"])
                assert isinstance(span.get("status", {}).get("code", 0), int)
                for key in span:
                    assert "_" not in key, f"keys are lowerCamelCase: {key}"
                for attribute in span.get("attributes", []):
                    _check_key_value(attribute)


def _check_key_value(pair: dict[str, Any]) -> None:
    assert set(pair) == {"key", "value"}, pair
    value = pair["value"]
    assert len(value) == 1, value
    kind, inner = next(iter(value.items()))
    assert kind in {"stringValue", "boolValue", "intValue", "doubleValue", "arrayValue", "kvlistValue", "bytesValue"}
    if kind == "intValue":
        assert isinstance(inner, str) and re.match(r"^-?[0-9]+$", inner), inner  # 64-bit integers as strings


def export_demo(directory: Path, rate: float, turns: int | None = None, extra: tuple[str, ...] = ()) -> Exported:
    """Run ``cp-observe demo`` exporting over OTLP/HTTP to a loopback receiver; write what arrived as files."""
    directory.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "cp_observe.cli", "demo", "--sample-rate", str(rate), "--quiet"]
    if turns is not None:
        args += ["--turns", str(turns)]
    args += list(extra)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_"))}
    env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
    with OtlpReceiver() as receiver:
        out = subprocess.run([*args, "--otlp", receiver.endpoint], capture_output=True, text=True, timeout=180,
                             check=False, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        requests = receiver.messages("traces")
    assert requests, "the demo exported no traces"
    jsonl, proto = directory / f"demo-{rate}.jsonl", directory / f"demo-{rate}.pb"
    with jsonl.open("w", encoding="utf-8") as lines, proto.open("wb") as records:
        for request in requests:
            lines.write(collector_json_line(request) + "\n")
            body = request.SerializeToString()
            records.write(len(body).to_bytes(4, "big") + body)
    trace_ids = {s.context.trace_id for r in requests for s in spans_from_request(r).spans}
    return Exported(jsonl, proto, evaluations(jsonl), trace_ids)


def evaluations(path: Path) -> dict[int, tuple[int, float, tuple[bool, ...]]]:
    """Scored span id -> (trace id, average precision, verdicts) of every evaluation span in a trace file."""
    out: dict[int, tuple[int, float, tuple[bool, ...]]] = {}
    for batch in TraceFile(path).batches():
        for span in spans_from_request(batch.request).spans:
            if span.name == n.EVALUATION_SPAN_NAME and span.parent is not None and span.attributes:
                out[span.parent.span_id] = (
                    span.context.trace_id,
                    float(span.attributes[n.CP_AVERAGE_PRECISION]),  # type: ignore[arg-type]
                    tuple(bool(v) for v in span.attributes[n.CP_VERDICTS]),  # type: ignore[union-attr]
                )
    return out
