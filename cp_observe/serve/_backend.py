"""What the front doors (gRPC and HTTP) need of the scoring service, as a protocol.

The front doors are handed the service at start; typing them against this protocol instead of
``ScorerService`` keeps the import graph one-way: ``_service`` imports the front doors, never the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from prometheus_client import CollectorRegistry

    from cp_observe.serve._admission import Offer
    from cp_observe.serve._auth import BearerTokens
    from cp_observe.serve._refusals import Refusals
    from cp_observe.serve._settings import ServeSettings
    from cp_observe.serve._tls import ServerTls

__all__ = ["Backend", "Ingested"]


@dataclass(frozen=True, slots=True)
class Ingested:
    """What became of one request: the admission decision, and spans refused as malformed (with why)."""

    offer: Offer
    spans: int
    rejected: int
    error: str


class Backend(Protocol):
    """The service as the front doors see it: its settings and security, counting, and ingestion."""

    @property
    def settings(self) -> ServeSettings:
        """The service's resolved settings."""

    @property
    def tls(self) -> ServerTls | None:
        """The server's TLS material, or None for plain text."""

    @property
    def tokens(self) -> BearerTokens:
        """The accepted bearer tokens."""

    @property
    def refusals(self) -> Refusals:
        """Where refused requests are counted and logged."""

    @property
    def registry(self) -> CollectorRegistry:
        """The Prometheus registry ``/metrics`` serves."""

    def ingest(self, request: ExportTraceServiceRequest, protocol: str) -> Ingested:
        """Admit one OTLP request, or refuse it."""

    def count(self, protocol: str, result: str, spans: int = 0) -> None:
        """Count one request by protocol and result."""

    def ready(self) -> tuple[bool, str]:
        """Whether the service takes work, and why not."""

    def stats(self) -> dict[str, Any]:
        """The ``/stats`` document."""
