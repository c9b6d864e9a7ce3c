"""``cp-observe serve``: the scoring service that receives OTLP behind an OpenTelemetry Collector gateway.

Applications run the hook in capture-only mode (``configure(capture_only=True)``): their spans carry the
query, the contexts, the answer and the sampling mark, and go through the Collector. A gateway whose
``loadbalancing`` exporter routes by trace id sends every span of a trace to the same scorer replica,
where the library's own ``ContextPrecisionProcessor`` judges them: one code path, two front doors.
"""

from __future__ import annotations

from cp_observe._traces._convert import spans_from_request
from cp_observe.serve._admission import Decision
from cp_observe.serve._service import ScorerService
from cp_observe.serve._settings import ServeSettings

__all__ = ["Decision", "ScorerService", "ServeSettings", "spans_from_request"]
