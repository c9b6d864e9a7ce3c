"""What every replay input yields: OTLP trace requests, each with where it came from."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

__all__ = ["Batch", "ReplayInputError", "Source"]


class ReplayInputError(Exception):
    """An input cannot be read further; the message names the file and line (or the URL) at fault."""


@dataclass(frozen=True, slots=True)
class Batch:
    """One OTLP trace request read from an input, and where (``file:line``, ``file: record n``, a URL)."""

    request: ExportTraceServiceRequest
    where: str


class Source(Protocol):
    """An input of the replay: a file or a trace-query API."""

    name: str
    unit: str  # what position and total count: "bytes" or "traces"

    @property
    def position(self) -> int:
        """How far the reading has got, in ``unit``."""
        ...

    total: int | None

    def batches(self) -> Iterator[Batch]:
        """The requests, in order; raises ``ReplayInputError`` when the input cannot be read further."""
        ...
