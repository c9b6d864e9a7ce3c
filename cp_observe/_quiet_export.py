"""Quiet export to trace-only backends: find out once whether an OTLP/HTTP endpoint takes metrics and logs.

Phoenix (and other trace-only backends) answer ``/v1/metrics`` and ``/v1/logs`` with 405 or 404. The SDK's
exporters would then log ``Failed to export ... code: 405`` for every batch, which tells the user nothing. So the
metric and log exporters ``configure()`` and ``cp-observe serve`` create are wrapped: when the wrapper is built, a
background thread posts one empty OTLP request (valid protobuf: an export with nothing in it) to the endpoint. A
404 or 405 is said once, as a warning that names the remedy, and the signal is not exported to that endpoint
again. Any other answer, or none (the backend is down), leaves the real exporter in charge, errors and all.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
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
    """Asks an OTLP/HTTP endpoint once, in the background, whether it takes ``signal`` at all."""

    def __init__(self, signal: str, endpoint: str | None, headers: dict[str, str] | None = None) -> None:
        self.signal = signal
        self.endpoint = endpoint
        self.refused: int | None = None  # the refusing status, once known
        self._done = threading.Event()
        if not endpoint or not endpoint.startswith(("http://", "https://")):
            self._done.set()
            return
        self._headers = {"Content-Type": "application/x-protobuf", **(headers or {})}
        threading.Thread(target=self._probe, name=f"cp-observe-probe-{signal}", daemon=True).start()

    def _probe(self) -> None:
        token = otel_context.attach(otel_context.set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            assert self.endpoint is not None
            request = urllib.request.Request(self.endpoint, data=b"", headers=self._headers, method="POST")
            with urllib.request.urlopen(request, timeout=_PROBE_TIMEOUT_S) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                if exc.code in _REFUSING:
                    self.refused = exc.code
                    logger.warning(
                        f"the OTLP endpoint refuses {self.signal} (HTTP {exc.code}): it takes traces only; "
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


def _endpoint_and_headers(exporter: Any) -> tuple[str | None, dict[str, str]]:
    """The HTTP exporter's endpoint and headers (``OTEL_EXPORTER_OTLP_HEADERS`` included), where it keeps them."""
    client = getattr(exporter, "_client", None)
    endpoint = getattr(exporter, "_endpoint", None) or getattr(client, "_endpoint", None)
    headers = getattr(client, "_headers", None) or getattr(exporter, "_headers", None) or {}
    extra = {str(k): str(v) for k, v in dict(headers).items() if str(k).lower() != "content-type"}
    return (endpoint if isinstance(endpoint, str) else None), extra


class QuietMetricExporter(MetricExporter):
    """An OTLP/HTTP metric exporter that stops, after one warning, when the endpoint does not take metrics."""

    def __init__(self, inner: Any) -> None:
        super().__init__(
            preferred_temporality=getattr(inner, "_preferred_temporality", None),
            preferred_aggregation=getattr(inner, "_preferred_aggregation", None),
        )
        self.inner = inner
        self.probe = SignalProbe("metrics", *_endpoint_and_headers(inner))

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
    """An OTLP/HTTP log exporter that stops, after one warning, when the endpoint does not take logs."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.probe = SignalProbe("logs", *_endpoint_and_headers(inner))

    def export(self, batch: Any) -> LogRecordExportResult:
        if self.probe.is_refused():
            return LogRecordExportResult.SUCCESS
        result: LogRecordExportResult = self.inner.export(batch)
        return result

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self.inner.shutdown()
