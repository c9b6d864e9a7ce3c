"""Quiet export to trace-only backends: find out once whether an OTLP endpoint takes metrics and logs.

Phoenix (and other trace-only backends) answer ``/v1/metrics`` and ``/v1/logs`` with 405 or 404, and the metrics
and logs services over gRPC with ``UNIMPLEMENTED``. The SDK's exporters would then log ``Failed to export ...
code: 405`` for every batch, which tells the user nothing. So the metric and log exporters ``configure()`` and
``cp-observe serve`` create are wrapped: when the wrapper is built, a background thread sends one empty export (a
valid request with nothing in it) to the endpoint. A refusal is said once, as a warning that names the remedy, and
the signal is not exported to that endpoint again. Any other answer, or none (the backend is down), leaves the
real exporter in charge, errors and all.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

from cp_observe._log import logger

__all__ = ["QuietLogExporter", "QuietMetricExporter", "SignalProbe"]

_REFUSING = frozenset({404, 405})
_PROBE_TIMEOUT_S = 5.0
_REMEDY = {
    "metrics": "point OTEL_EXPORTER_OTLP_METRICS_ENDPOINT at a backend that takes metrics (or an OpenTelemetry "
               "Collector), or serve them to Prometheus with metrics_port / CP_OBSERVE_METRICS_PORT",
    "logs": "point OTEL_EXPORTER_OTLP_LOGS_ENDPOINT at a backend that takes logs (or an OpenTelemetry Collector); "
            "the score is still on the evaluation span",
}


class SignalProbe:
    """Asks an OTLP endpoint once, in the background, whether it takes ``signal`` at all.

    ``check`` sends one empty export and returns how the endpoint refused the signal (``"HTTP 405"``,
    ``"gRPC UNIMPLEMENTED"``), or ``None`` when it took it; it raises when no answer came (undecided).
    """

    def __init__(self, signal: str, endpoint: str | None, check: Callable[[], str | None] | None) -> None:
        self.signal = signal
        self.endpoint = endpoint
        self.refused: str | None = None  # how the endpoint refused the signal, once known
        self._done = threading.Event()
        if check is None:
            self._done.set()
            return
        threading.Thread(target=self._probe, args=(check,), name=f"cp-observe-probe-{signal}", daemon=True).start()

    def _probe(self, check: Callable[[], str | None]) -> None:
        token = otel_context.attach(otel_context.set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            refused = check()
            if refused is not None:
                self.refused = refused
                logger.warning(
                    f"the OTLP endpoint refuses {self.signal} ({refused}): it takes traces only; "
                    f"{self.signal} are not exported there. To keep them, {_REMEDY[self.signal]}",
                    endpoint=self.endpoint,
                )
        except Exception as exc:  # noqa: BLE001 - no answer: undecided, the real exporter reports what happens
            logger.debug("probing an OTLP endpoint failed", signal=self.signal, error_type=type(exc).__name__)
        finally:
            otel_context.detach(token)
            self._done.set()

    def is_refused(self, wait_s: float = _PROBE_TIMEOUT_S + 1.0) -> bool:
        """True when the endpoint refused the signal; waits for the probe's answer at most ``wait_s``."""
        self._done.wait(wait_s)
        return self.refused is not None

    @classmethod
    def for_exporter(cls, signal: str, exporter: Any) -> SignalProbe:
        """The probe for an SDK OTLP exporter: an empty POST for OTLP/HTTP, an empty ``Export`` call for gRPC."""
        client = getattr(exporter, "_client", None)
        endpoint = getattr(exporter, "_endpoint", None) or getattr(client, "_endpoint", None)
        endpoint = endpoint if isinstance(endpoint, str) else None
        if ".grpc." in type(exporter).__module__:
            return cls(signal, endpoint, _grpc_check(signal, exporter) if client is not None else None)
        if not endpoint or not endpoint.startswith(("http://", "https://")):
            return cls(signal, endpoint, None)
        headers = getattr(client, "_headers", None) or getattr(exporter, "_headers", None) or {}
        extra = {str(k): str(v) for k, v in dict(headers).items() if str(k).lower() != "content-type"}
        return cls(signal, endpoint, _http_check(endpoint, {"Content-Type": "application/x-protobuf", **extra}))


def _http_check(endpoint: str, headers: dict[str, str]) -> Callable[[], str | None]:
    def check() -> str | None:
        request = urllib.request.Request(endpoint, data=b"", headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=_PROBE_TIMEOUT_S) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                return f"HTTP {exc.code}" if exc.code in _REFUSING else None
        return None

    return check


def _grpc_check(signal: str, exporter: Any) -> Callable[[], str | None]:
    def check() -> str | None:
        import grpc  # type: ignore[import-untyped]  # grpcio ships no type hints

        if signal == "metrics":
            from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
                ExportMetricsServiceRequest as Request,
            )
        else:
            from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (  # type: ignore[assignment]
                ExportLogsServiceRequest as Request,
            )
        try:
            exporter._client.Export(request=Request(), metadata=getattr(exporter, "_headers", None),
                                    timeout=_PROBE_TIMEOUT_S)
        except grpc.RpcError as exc:
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            if code is grpc.StatusCode.UNIMPLEMENTED:
                return "gRPC UNIMPLEMENTED"
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise  # no answer: undecided
        return None

    return check


class QuietMetricExporter(MetricExporter):
    """An OTLP metric exporter that stops, after one warning, when the endpoint does not take metrics."""

    def __init__(self, inner: Any) -> None:
        super().__init__(
            preferred_temporality=getattr(inner, "_preferred_temporality", None),
            preferred_aggregation=getattr(inner, "_preferred_aggregation", None),
        )
        self.inner = inner
        self.probe = SignalProbe.for_exporter("metrics", inner)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        if self.probe.is_refused():
            return MetricExportResult.SUCCESS  # said once at start; nothing to send to a trace-only backend
        result: MetricExportResult = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis=timeout_millis))

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


class QuietLogExporter(LogRecordExporter):
    """An OTLP log exporter that stops, after one warning, when the endpoint does not take logs."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.probe = SignalProbe.for_exporter("logs", inner)

    def export(self, batch: Any) -> LogRecordExportResult:
        if self.probe.is_refused():
            return LogRecordExportResult.SUCCESS
        result: LogRecordExportResult = self.inner.export(batch)
        return result

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self.inner.shutdown()
