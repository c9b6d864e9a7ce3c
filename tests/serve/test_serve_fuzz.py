"""Hostile input against both front doors: every request gets a defined status, is counted, crashes nothing.

A seeded generator mutates real OTLP requests (the SDK's encoder, protobuf and JSON) with byte flips,
truncation, random bytes, deep nesting, huge attributes, decompression bombs and wrong encodings, and sends
them to a running ``ScorerService`` over real sockets. Checked for every request: an answer with a status
from the defined set (never a dropped connection, never a 5xx or an ``INTERNAL``), and the service's counts
add up to the requests sent. Checked after the run: the service still serves, nothing reached stderr as a
traceback, and the process's peak memory grew by far less than one decompression bomb would take.
"""

from __future__ import annotations

import gzip
import http.client
import json
import random
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from cp_observe.testing import FakeJudge
from tests.serve_support import OtlpSink, get, retrieval_request, start_service, to_otlp_json

LIMIT = 1 << 20  # max_request_bytes of the service under test
BOMB = 256 << 20  # what a decompression bomb inflates to: 256 times the limit
SEED = 1616
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
HTTP_STATUSES = {200, 400, 411, 413, 415}
GRPC_CODES = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}


#: Each test restores the process-wide runtime a service installs (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("serve_state_restored")


def _peak_rss() -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


# --- hostile bodies ------------------------------------------------------------------------------------------------
def _bomb(encoding: str) -> bytes:
    """``BOMB`` zero bytes compressed (about 256 KiB on the wire), built without holding them."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    block = b"\0" * (1 << 20)
    return b"".join(compressor.compress(block) for _ in range(BOMB >> 20)) + compressor.flush()


def _deep_json(depth: int) -> bytes:
    return b'{"resourceSpans":' + b"[" * depth + b"]" * depth + b"}"


def _deep_attribute_json(base: dict[str, Any], depth: int) -> bytes:
    """A span attribute whose value is ``depth`` kvlists deep (written as text: json.dumps would recurse)."""
    value = '{"kvlistValue":{"values":[{"key":"k","value":' * depth + '{"stringValue":"leaf"}' + "}]}}" * depth
    document = json.loads(json.dumps(base))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"].append({"key": "deep", "value": "@"})
    return json.dumps(document).replace('"@"', value).encode()


def _deep_protobuf(depth: int) -> bytes:
    """An AnyValue nested ``depth`` kvlists deep inside a span attribute, written field by field."""
    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2]) + _varint(len(payload)) + payload

    value = field(1, b"leaf")  # AnyValue.string_value
    for _ in range(depth):
        key_value = field(1, b"k") + field(2, value)  # KeyValue{key, value}
        value = field(6, field(1, key_value))  # AnyValue.kvlist_value{values}
    span = field(1, bytes(16)) + field(2, bytes(8)) + field(5, b"deep") + field(9, field(1, b"deep") + field(2, value))
    return field(1, field(2, field(2, span)))  # request.resource_spans.scope_spans.spans


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)


def _huge_attribute(protobuf: bytes, size: int) -> bytes:
    request = ExportTraceServiceRequest.FromString(protobuf)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.add(key="input.value").value.string_value = "x" * size
    for i in range(2000):
        span.attributes.add(key=f"many.{i}").value.int_value = i
    return bytes(request.SerializeToString())


def _flip(rng: random.Random, body: bytes) -> bytes:
    data = bytearray(body)
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


def _http_cases(rng: random.Random) -> Iterator[tuple[str, bytes, dict[str, str]]]:
    """(kind, body, headers) for the HTTP front door."""
    protobuf = retrieval_request(4)
    document = to_otlp_json(ExportTraceServiceRequest.FromString(protobuf))
    as_json = json.dumps(document).encode()
    pb, js = {"Content-Type": "application/x-protobuf"}, {"Content-Type": "application/json"}
    for _ in range(120):
        yield "flip", _flip(rng, protobuf), pb
        yield "flip", _flip(rng, as_json), js
        yield "truncate", protobuf[:rng.randrange(len(protobuf))], pb
        yield "truncate", as_json[:rng.randrange(len(as_json))], js
        yield "random", rng.randbytes(rng.randrange(4096)), rng.choice([pb, js])
    for depth in (100, 1_000, 50_000, 200_000):
        yield "deep", _deep_json(depth), js
    for depth in (50, 200, 2_000):
        yield "deep", _deep_attribute_json(document, depth), js
        yield "deep", _deep_protobuf(depth), pb
    yield "huge", _huge_attribute(protobuf, LIMIT - (64 << 10)), pb
    yield "huge", _huge_attribute(protobuf, LIMIT), pb
    for encoding in ("gzip", "deflate"):
        yield "bomb", _bomb(encoding), {**pb, "Content-Encoding": encoding}
        yield "bomb", _bomb(encoding), {**js, "Content-Encoding": encoding}
    yield "encoding", protobuf, {**pb, "Content-Encoding": "gzip"}
    yield "encoding", gzip.compress(protobuf), {**pb, "Content-Encoding": "deflate"}
    yield "encoding", gzip.compress(protobuf), {**pb, "Content-Encoding": "br"}
    yield "encoding", protobuf, js
    yield "encoding", as_json, pb
    yield "encoding", json.dumps(document).encode("utf-16"), js
    yield "encoding", as_json, {"Content-Type": "application/json; charset=latin-1"}
    yield "encoding", as_json, {"Content-Type": "text/plain"}
    yield "encoding", b"\xff\xfe" + as_json, js


def _grpc_cases(rng: random.Random) -> Iterator[tuple[str, bytes, grpc.Compression | None]]:
    protobuf = retrieval_request(4)
    as_json = json.dumps(to_otlp_json(ExportTraceServiceRequest.FromString(protobuf))).encode()
    for _ in range(100):
        yield "flip", _flip(rng, protobuf), None
        yield "truncate", protobuf[:rng.randrange(len(protobuf))], None
        yield "random", rng.randbytes(rng.randrange(4096)), None
    for depth in (10, 30, 50, 200, 2_000):  # protobuf refuses nesting beyond 100 messages (3 per level)
        yield "deep", _deep_protobuf(depth), None
    yield "huge", _huge_attribute(protobuf, LIMIT - (64 << 10)), None
    yield "huge", _huge_attribute(protobuf, LIMIT), None
    yield "bomb", b"\0" * (8 * LIMIT), grpc.Compression.Gzip
    yield "encoding", as_json, None
    yield "encoding", gzip.compress(protobuf), None


# --- the runs ------------------------------------------------------------------------------------------------------
def _post(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/v1/traces", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_http_front_door_survives_hostile_input(
    sink: OtlpSink, cp_observe_judge: FakeJudge, capfd: pytest.CaptureFixture[str]
) -> None:
    """Every hostile HTTP request gets 200/400/411/413/415 and is counted; no traceback, bounded memory."""
    rng = random.Random(SEED)
    statuses: Counter[tuple[str, int]] = Counter()
    sent = 0
    with start_service(sink, cp_observe_judge, max_request_bytes=LIMIT, sample_rate=0.0) as service:
        port = service.port("http")
        peak = _peak_rss()
        for kind, body, headers in _http_cases(rng):
            status, answer = _post(port, body, headers)  # a dropped connection raises here and fails the test
            assert status in HTTP_STATUSES, (kind, status, answer[:200])
            statuses[(kind, status)] += 1
            sent += 1
        grown = _peak_rss() - peak
        assert get(f"http://127.0.0.1:{service.port('admin')}/healthz")[0] == 200
        stats = service.stats()
    assert sum(stats["requests"].values()) == sent
    refused = sum(count for (_, status), count in statuses.items() if status != 200)
    assert sum(stats["refusals"].values()) == refused
    assert statuses[("deep", 400)] >= 5 and not statuses[("bomb", 200)]
    assert statuses[("bomb", 413)] == 4 and stats["refusals"]["http:too_large"] >= 4
    assert grown < BOMB // 2, f"peak memory grew by {grown >> 20} MiB"
    assert "Traceback" not in capfd.readouterr().err


def test_deep_json_gets_400_within_the_size_limit(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """JSON nested 50,000 levels (100 KB, well under the limit) is answered 400 and counted as parse."""
    with start_service(sink, cp_observe_judge, max_request_bytes=LIMIT) as service:
        status, answer = _post(service.port("http"), _deep_json(50_000), {"Content-Type": "application/json"})
        stats = service.stats()
    assert status == 400 and "nested too deeply" in json.loads(answer)["message"]
    assert stats["refusals"] == {"http:parse": 1} and stats["requests"] == {"http:invalid": 1}


def test_grpc_front_door_survives_hostile_input(
    sink: OtlpSink, cp_observe_judge: FakeJudge, capfd: pytest.CaptureFixture[str]
) -> None:
    """Every hostile gRPC call gets OK or INVALID_ARGUMENT (RESOURCE_EXHAUSTED over the size limit), counted."""
    rng = random.Random(SEED)
    codes: Counter[tuple[str, grpc.StatusCode]] = Counter()
    with start_service(sink, cp_observe_judge, max_request_bytes=LIMIT, sample_rate=0.0) as service:
        peak = _peak_rss()
        with grpc.insecure_channel(f"127.0.0.1:{service.port('grpc')}",
                                   options=[("grpc.max_send_message_length", -1)]) as channel:
            export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
            for kind, body, compression in _grpc_cases(rng):
                try:
                    export(body, timeout=30, compression=compression)
                    code = grpc.StatusCode.OK
                except grpc.RpcError as error:
                    code = error.code()
                allowed = GRPC_CODES | ({grpc.StatusCode.RESOURCE_EXHAUSTED} if kind in ("huge", "bomb") else set())
                assert code in allowed, (kind, code)
                codes[(kind, code)] += 1
        grown = _peak_rss() - peak
        # Over the limit, grpcio refuses before the message reaches us; the handler still sees the call end, and
        # counts it, on its own thread, possibly just after the client already has its status: wait for the count.
        deadline = time.monotonic() + 10
        stats = service.stats()
        while sum(stats["requests"].values()) < sum(codes.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
            stats = service.stats()
    transport_refused = sum(count for (_, code), count in codes.items() if code is grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert transport_refused >= 1
    assert sum(stats["requests"].values()) == sum(codes.values())
    # grpcio usually ends an over-limit call with an error on the request stream (receive_failed), but under load
    # it can end the stream as if it were empty, which the handler cannot tell from a client's empty stream
    # (parse). Every such call is still counted exactly once, under one of the two.
    failed = stats["requests"].get("grpc:receive_failed", 0)
    assert 1 <= failed <= transport_refused and stats["refusals"].get("grpc:receive_failed", 0) == failed
    invalid = sum(count for (_, code), count in codes.items() if code is grpc.StatusCode.INVALID_ARGUMENT)
    assert stats["refusals"].get("grpc:parse", 0) == invalid + transport_refused - failed
    assert "grpc:internal" not in stats["refusals"]
    assert codes[("bomb", grpc.StatusCode.RESOURCE_EXHAUSTED)] == 1 and codes[("deep", grpc.StatusCode.OK)] >= 1
    assert grown < 4 * LIMIT * 8, f"peak memory grew by {grown >> 20} MiB"
    assert "Traceback" not in capfd.readouterr().err


def test_grpc_counts_what_grpcio_refuses_and_streams_of_other_than_one_message(
    sink: OtlpSink, cp_observe_judge: FakeJudge
) -> None:
    """A message over the limit is refused by grpcio and counted receive_failed; zero or two messages are refused."""
    with start_service(sink, cp_observe_judge, max_request_bytes=LIMIT, sample_rate=0.0) as service:
        with grpc.insecure_channel(f"127.0.0.1:{service.port('grpc')}",
                                   options=[("grpc.max_send_message_length", -1)]) as channel:
            unary = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
            with pytest.raises(grpc.RpcError) as huge:
                unary(b"\x0a" * (LIMIT + 1), timeout=30)
            assert huge.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            streaming = channel.stream_unary(EXPORT, request_serializer=None, response_deserializer=None)
            valid = retrieval_request(1)
            for messages in ([], [valid, valid]):
                with pytest.raises(grpc.RpcError) as refused:
                    streaming(iter(messages), timeout=30)
                assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert unary(valid, timeout=30) == b""  # one message is a request like any other
        stats = service.stats()
    # The over-limit message is receive_failed, or (grpcio ending its stream as if empty, under load) parse.
    assert stats["refusals"] in ({"grpc:receive_failed": 1, "grpc:parse": 2}, {"grpc:parse": 3}), stats["refusals"]
    requests = stats["requests"]
    assert requests.get("grpc:receive_failed", 0) + requests["grpc:invalid"] == 3
