"""OTLP wire formats: request bodies in (protobuf or JSON, optionally compressed), responses and refusals out.

OTLP/JSON bodies are decoded by the one OTLP/JSON decoder of the trace inputs (``_traces/_otlp_json.py``: hex
or base64 ids, either key case, unknown fields ignored), which builds the request directly instead of through
``json_format`` (several times faster per span; ``benchmarks/serve/bench_otlp_decode.py``).

Refusals carry a retry delay both ways the ecosystem reads it: the standard ``grpc-status-details-bin``
(a ``google.rpc.Status`` holding a ``google.rpc.RetryInfo``; the Collector's OTLP exporter retries
``RESOURCE_EXHAUSTED`` only when that detail is present) and ``google.rpc.retryinfo-bin`` (read by the
Python SDK's OTLP/gRPC exporter).
"""

from __future__ import annotations

import math
import zlib
from typing import Any

# protobuf and googleapis-common-protos ship no type hints (types-protobuf is not a dependency).
from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.any_pb2 import Any as AnyProto  # type: ignore[import-untyped]
from google.protobuf.duration_pb2 import Duration  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from google.rpc.error_details_pb2 import RetryInfo  # type: ignore[import-untyped]
from google.rpc.status_pb2 import Status as RpcStatus  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from cp_observe._traces._otlp_json import decode_json

__all__ = [
    "JSON",
    "PROTOBUF",
    "BadRequest",
    "decode_body",
    "encode_response",
    "encode_status",
    "http_retry_after",
    "retry_metadata",
]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class BadRequest(ValueError):
    """The body cannot be read: the HTTP front door answers ``status`` (400, 413 or 415), counted as ``reason``."""

    def __init__(self, message: str, status: int = 400, reason: str = "parse") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def decode_body(body: bytes, content_type: str, content_encoding: str, max_bytes: int) -> ExportTraceServiceRequest:
    """Decode an OTLP/HTTP trace request body.

    Raises:
        BadRequest: unknown media type or encoding (415), too large once decompressed (413), unreadable (400).
    """
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in (PROTOBUF, JSON):
        raise BadRequest(f"unsupported content type {media[:40] or '(none)'!r}; use {PROTOBUF} or {JSON}", 415,
                         "media_type")
    body = _decompress(body, content_encoding.strip().lower(), max_bytes)
    if media == PROTOBUF:
        try:
            return ExportTraceServiceRequest.FromString(body)  # type: ignore[no-any-return]
        except DecodeError as exc:
            raise BadRequest(f"invalid protobuf: {exc}") from None
    try:
        return decode_json(body)
    except ValueError as exc:
        raise BadRequest(str(exc)[:200]) from None


def _decompress(body: bytes, encoding: str, max_bytes: int) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise BadRequest(f"unsupported content encoding {encoding[:40]!r}; use gzip or deflate", 415, "encoding")
    # gzip: a gzip header (wbits 16+); deflate: zlib format, or a raw stream from senders that get it wrong.
    for wbits in ((31,) if encoding == "gzip" else (15, -15)):
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(body, max_bytes + 1)
        except zlib.error:
            continue
        if len(out) > max_bytes:
            raise BadRequest(f"request larger than {max_bytes} bytes once decompressed", 413, "too_large")
        return out
    raise BadRequest(f"invalid {encoding} body", 400, "encoding")


def encode_response(media: str, rejected: int = 0, message: str = "") -> bytes:
    """An ``ExportTraceServiceResponse`` in the request's encoding; ``partial_success`` when spans were rejected."""
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if media == JSON:
        return str(json_format.MessageToJson(response, indent=None)).encode("utf-8")
    return bytes(response.SerializeToString())


def encode_status(media: str, grpc_code: int, message: str, retry_after_s: float | None = None) -> bytes:
    """A ``google.rpc.Status`` body for an HTTP refusal, in the request's encoding (OTLP/HTTP failure body)."""
    status = _status(grpc_code, message, retry_after_s)
    if media == JSON:
        return str(json_format.MessageToJson(status, indent=None)).encode("utf-8")
    return bytes(status.SerializeToString())


def http_retry_after(seconds: float) -> str:
    """``Retry-After`` takes whole seconds: round up, never below one."""
    return str(max(1, math.ceil(seconds)))


def retry_metadata(grpc_code: int, message: str, retry_after_s: float) -> tuple[tuple[str, bytes], ...]:
    """Trailing metadata carrying a ``RetryInfo``, for the Collector and for the Python SDK's exporter."""
    return (
        ("grpc-status-details-bin", _status(grpc_code, message, retry_after_s).SerializeToString()),
        ("google.rpc.retryinfo-bin", _retry_info(retry_after_s).SerializeToString()),
    )


def _retry_info(seconds: float) -> Any:
    whole = int(seconds)
    return RetryInfo(retry_delay=Duration(seconds=whole, nanos=round((seconds - whole) * 1e9)))


def _status(grpc_code: int, message: str, retry_after_s: float | None) -> Any:
    status = RpcStatus(code=grpc_code, message=message)
    if retry_after_s is not None:
        detail = AnyProto()
        detail.Pack(_retry_info(retry_after_s))
        status.details.append(detail)
    return status
