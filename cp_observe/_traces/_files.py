"""Trace files: OTLP/JSON lines (the Collector ``file`` exporter) and OTLP protobuf, read as a stream.

Memory stays bounded whatever the file size: one line (JSON) or one record (protobuf) is held at a time,
and neither may exceed ``max_record_bytes``.

Formats, told apart by the first bytes (or forced with ``format=``):

- ``jsonl``: starts with ``{``. One ``ExportTraceServiceRequest`` per line, ids hex (or base64).
- ``proto``: the Collector ``file`` exporter's ``format: proto`` -- records, each a 4-byte big-endian
  length then that many bytes of ``ExportTraceServiceRequest``; the first byte of such a file is ``0x00``
  (a record under 16 MiB). A file holding one bare serialized request (what an OTLP/HTTP body dump is)
  starts with ``0x0a`` (field 1, ``resource_spans``) and is read as one record.
- gzip-compressed files of either format (magic ``1f 8b``) are decompressed on the fly.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from cp_observe._traces._otlp_json import decode_json_line
from cp_observe._traces._source import Batch, ReplayInputError

__all__ = ["FORMATS", "TraceFile"]

FORMATS = ("auto", "jsonl", "proto")
_GZIP_MAGIC = b"\x1f\x8b"
_DEFAULT_MAX_RECORD = 256 << 20


class TraceFile:
    """One trace file, read batch by batch; ``position``/``total`` (bytes of the file on disk) drive progress."""

    unit = "bytes"

    def __init__(self, path: str | Path, *, format: str = "auto", max_record_bytes: int = _DEFAULT_MAX_RECORD) -> None:
        if format not in FORMATS:
            raise ReplayInputError(f"{path}: unknown format {format!r}; use one of {', '.join(FORMATS)}")
        self.path = Path(path)
        self.name = str(path)
        self.format = format
        self.max_record_bytes = max_record_bytes
        try:
            self.total: int | None = os.stat(self.path).st_size
        except OSError as exc:
            raise ReplayInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
        self._raw: IO[bytes] | None = None

    @property
    def position(self) -> int:
        """Bytes of the file consumed so far (compressed bytes for a gzip file)."""
        raw = self._raw
        if raw is None or raw.closed:
            return 0 if raw is None else (self.total or 0)
        try:
            return raw.tell()
        except (OSError, ValueError):
            return 0

    def batches(self) -> Iterator[Batch]:
        """Each request of the file in order; ``ReplayInputError`` names the file and line (or record) at fault."""
        with self.path.open("rb") as raw:
            self._raw = raw
            magic = raw.read(2)
            raw.seek(0)
            stream: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="rb") if magic == _GZIP_MAGIC else raw  # type: ignore[assignment]
            with stream:
                kind = self.format if self.format != "auto" else self._sniff(stream)
                if kind == "jsonl":
                    yield from self._json_lines(stream)
                else:
                    yield from self._proto(stream)

    def _sniff(self, stream: IO[bytes]) -> str:
        try:
            head = stream.peek(64)[:64] if hasattr(stream, "peek") else b""
        except (OSError, EOFError) as exc:
            raise ReplayInputError(f"{self.name}: unreadable: {exc}") from None
        stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
        if not head:
            return "jsonl"  # an empty file: nothing to read either way
        if stripped[:1] == b"{":
            return "jsonl"
        if head[:1] in (b"\x00", b"\x0a"):
            return "proto"
        raise ReplayInputError(
            f"{self.name}: unknown format (starts with {head[:8]!r}); expected OTLP/JSON lines (the Collector "
            "file exporter) or OTLP protobuf; name it with --format"
        )

    def _json_lines(self, stream: IO[bytes]) -> Iterator[Batch]:
        number = 0
        limit = self.max_record_bytes
        while True:
            try:
                line = stream.readline(limit + 1)
            except (OSError, EOFError) as exc:  # a truncated gzip stream
                raise ReplayInputError(f"{self.name}:{number + 1}: unreadable: {exc}") from None
            if not line:
                return
            number += 1
            if len(line) > limit and not line.endswith(b"\n"):
                raise ReplayInputError(f"{self.name}:{number}: line longer than {limit} bytes")
            if not line.strip():
                continue
            try:
                request = decode_json_line(line, limit)
            except ValueError as exc:
                cut = "" if line.endswith(b"\n") else " (the last line has no newline: truncated file?)"
                raise ReplayInputError(f"{self.name}:{number}: {exc}{cut}") from None
            yield Batch(request, f"{self.name}:{number}")

    def _proto(self, stream: IO[bytes]) -> Iterator[Batch]:
        first = stream.peek(1)[:1] if hasattr(stream, "peek") else b""
        if first == b"\x0a":
            body = stream.read(self.max_record_bytes + 1)
            if len(body) > self.max_record_bytes:
                raise ReplayInputError(f"{self.name}: a single protobuf request larger than {self.max_record_bytes} "
                                       "bytes; write length-prefixed records (the Collector file exporter does)")
            yield Batch(self._parse(body, f"{self.name}: record 1"), f"{self.name}: record 1")
            return
        number, offset = 0, 0
        while True:
            header = stream.read(4)
            if not header:
                return
            number += 1
            where = f"{self.name}: record {number} (byte {offset})"
            if len(header) < 4:
                raise ReplayInputError(f"{where}: truncated length prefix")
            size = int.from_bytes(header, "big")
            if size > self.max_record_bytes:
                raise ReplayInputError(f"{where}: record length {size} exceeds {self.max_record_bytes} bytes "
                                       "(not a length-prefixed OTLP file?)")
            body = stream.read(size)
            if len(body) < size:
                raise ReplayInputError(f"{where}: truncated record ({len(body)} of {size} bytes)")
            offset += 4 + size
            yield Batch(self._parse(body, where), where)

    @staticmethod
    def _parse(body: bytes, where: str) -> ExportTraceServiceRequest:
        try:
            return ExportTraceServiceRequest.FromString(body)  # type: ignore[no-any-return]
        except DecodeError as exc:
            raise ReplayInputError(f"{where}: invalid protobuf: {exc}") from None
