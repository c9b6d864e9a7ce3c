"""The one provider factory: exporters, metric readers, the judge and the processor, from settings.

Shared by ``configure()`` and ``cp-observe serve`` (and ``replay``), so the two set-ups cannot drift. What only
building an exporter needs (the quiet wrappers, urllib, the metric reader) is imported when one is built, not
when ``configure()`` attaches to the application's providers.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from cp_observe._config._settings import Settings
from cp_observe._emission._sinks import Sink
from cp_observe._errors import ConfigurationError
from cp_observe._judging._judges import resolve_judge
from cp_observe._judging._params import flex_bounds
from cp_observe._log import logger
from cp_observe._names import ENV_OTEL_TRACES_EXPORTER, ENV_PHOENIX_API_KEY
from cp_observe._processing._processor import ContextPrecisionProcessor
from cp_observe._types import Judge

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader

__all__ = [
    "build_log_exporter",
    "build_metric_exporter",
    "build_metric_readers",
    "build_span_exporter",
    "cheap_judge_from_settings",
    "exemplar_prometheus_reader",
    "judge_call_options",
    "judge_from_settings",
    "processor_from_settings",
    "sinks_from_settings",
    "start_prometheus_endpoint",
]


def processor_from_settings(judge: Judge, settings: Settings, **overrides: Any) -> ContextPrecisionProcessor:
    """The processor for ``settings`` (shared by ``configure()`` and ``cp-observe serve``); ``overrides`` win.

    Every processor setting of the field table is passed on as it is, so a new one needs nothing here; only
    what is built from settings (the cheap judge, the sinks) is made here.
    """
    options: dict[str, Any] = settings.processor_options()
    options["cheap_judge"] = cheap_judge_from_settings(settings)
    if "sinks" not in overrides:  # cp-observe serve: the sinks its settings name
        options["sinks"] = sinks_from_settings(settings)
    options.update(overrides)
    if settings.judge_service_tier == "flex":  # the same evaluations per minute at flex latency (only raised)
        options["concurrency"], options["evaluation_timeout_s"] = flex_bounds(
            options["concurrency"], options["queue_size"], options["evaluation_timeout_s"],
            call_timeout_s=settings.judge_timeout_s, flex_timeout_s=settings.judge_flex_timeout_s,
            max_retries=settings.judge_max_retries)
    return ContextPrecisionProcessor(judge, **options)


def sinks_from_settings(settings: Settings) -> list[Sink]:
    """The evaluation sinks the settings name: Phoenix when ``phoenix_url`` is set."""
    if not settings.phoenix_url:
        return []
    from cp_observe._emission._phoenix import PhoenixSink

    key = settings.phoenix_api_key.get_secret_value() if settings.phoenix_api_key else None
    return [PhoenixSink(settings.phoenix_url, api_key=key or os.environ.get(ENV_PHOENIX_API_KEY) or None,
                        timeout_s=settings.sink_timeout_s)]


def judge_from_settings(settings: Settings) -> Judge:
    """The judge ``settings.judge`` names, with the settings' endpoint, key, timeout and retries for an LLM."""
    return resolve_judge(
        settings.judge,
        api_base=settings.judge_api_base,
        api_key=settings.judge_api_key.get_secret_value() if settings.judge_api_key else None,
        timeout=settings.judge_timeout_s,
        max_retries=settings.judge_max_retries,
        transport=settings.judge_transport,
        **judge_call_options(settings),
    )


def judge_call_options(settings: Settings) -> dict[str, object]:
    """What an LLM judge's calls ask for: prompt version, reasons, reasoning effort, service tier, flex timeout."""
    return {
        "prompt_version": settings.judge_prompt_version,
        "reasons": settings.judge_reasons,
        "reasoning_effort": settings.judge_reasoning_effort,
        "service_tier": settings.judge_service_tier,
        "flex_timeout": settings.judge_flex_timeout_s,
    }


def cheap_judge_from_settings(settings: Settings) -> Judge | None:
    """The cascade's cheap judge ``settings.cheap_judge`` names (an LLM one on the judge's endpoint), or None."""
    if not settings.cheap_judge:
        return None
    return resolve_judge(
        settings.cheap_judge,
        api_base=settings.judge_api_base,
        api_key=settings.judge_api_key.get_secret_value() if settings.judge_api_key else None,
        timeout=settings.judge_timeout_s,
        max_retries=settings.judge_max_retries,
        **judge_call_options(settings),
    )


def _protocol() -> str:
    return os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip().lower()


def _wants_otlp(settings: Settings, signal: str) -> bool:
    return bool(
        settings.otlp_endpoint
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    )


def _endpoint(settings: Settings, signal: str) -> dict[str, Any]:
    """Explicit endpoints need the signal path for HTTP; env endpoints are completed by the exporters."""
    if not settings.otlp_endpoint:
        return {}
    base = settings.otlp_endpoint.rstrip("/")
    if _protocol() == "grpc":
        return {"endpoint": base}
    return {"endpoint": f"{base}/v1/{signal}"}


def build_span_exporter(settings: Settings) -> Any:
    """The span exporter ``OTEL_TRACES_EXPORTER`` and the settings ask for, or None.

    Unset, OTLP when an endpoint is given (``otlp_endpoint`` or ``OTEL_EXPORTER_OTLP_*``), else none. Set, as
    the SDK reads it: comma-separated ``otlp``, ``console`` (every span as JSON on stdout), ``none``.
    """
    chosen = os.environ.get(ENV_OTEL_TRACES_EXPORTER, "").strip().lower()
    if not chosen:
        return _otlp_span_exporter(settings) if _wants_otlp(settings, "traces") else None
    exporters = []
    for name in dict.fromkeys(part.strip() for part in chosen.split(",") if part.strip()):
        if name == "otlp":
            exporters.append(_otlp_span_exporter(settings))
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name != "none":
            logger.warning("ignoring an unknown span exporter", variable=ENV_OTEL_TRACES_EXPORTER, value=name[:40])
    if len(exporters) > 1:
        return _FanOut(exporters)
    return exporters[0] if exporters else None


class _FanOut:
    """Several span exporters behind one (``OTEL_TRACES_EXPORTER=console,otlp``): each gets every batch."""

    def __init__(self, exporters: list[Any]) -> None:
        self.exporters = exporters

    def export(self, spans: Any) -> Any:
        """Export to each; success only when every one succeeded."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        results = [exporter.export(spans) for exporter in self.exporters]
        ok = all(result == SpanExportResult.SUCCESS for result in results)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Flush each."""
        return all([exporter.force_flush(timeout_millis) for exporter in self.exporters])

    def shutdown(self) -> None:
        """Shut each down."""
        for exporter in self.exporters:
            exporter.shutdown()


def _otlp_span_exporter(settings: Settings) -> Any:
    if _protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        return GrpcSpanExporter(**_endpoint(settings, "traces"))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(**_endpoint(settings, "traces"))


def build_log_exporter(settings: Settings) -> Any:
    """The OTLP log exporter (quiet on trace-only backends), or None when none is asked for."""
    if not _wants_otlp(settings, "logs"):
        return None
    from cp_observe._emission._quiet_export import QuietLogExporter

    if _protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter

        return QuietLogExporter(GrpcLogExporter(**_endpoint(settings, "logs")))
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    # Trace-only backends (Phoenix) refuse logs: say so once and stop, rather than an error per batch.
    return QuietLogExporter(OTLPLogExporter(**_endpoint(settings, "logs")))


def build_metric_exporter(settings: Settings) -> Any:
    """The OTLP metric exporter the settings ask for (gRPC or HTTP), or ``None`` when no endpoint is set."""
    if not _wants_otlp(settings, "metrics"):
        return None
    from cp_observe._emission._quiet_export import QuietMetricExporter

    if _protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter

        return QuietMetricExporter(GrpcExporter(**_endpoint(settings, "metrics")))  # see the logs
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return QuietMetricExporter(OTLPMetricExporter(**_endpoint(settings, "metrics")))  # see the logs


def build_metric_readers(settings: Settings) -> list[MetricReader]:
    """The OTLP metric reader and the Prometheus endpoint the settings ask for."""
    readers: list[MetricReader] = []
    exporter = build_metric_exporter(settings)
    if exporter is not None:
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        readers.append(PeriodicExportingMetricReader(exporter))
    if settings.metrics_port is not None:
        readers.append(start_prometheus_endpoint(settings.metrics_port))
    return readers


def exemplar_prometheus_reader(registry: Any) -> MetricReader:
    """A Prometheus reader into ``registry`` whose histogram buckets keep trace exemplars (``serve``'s /metrics)."""
    from cp_observe._emission._exemplars import ExemplarPrometheusReader

    return ExemplarPrometheusReader(registry=registry)


def start_prometheus_endpoint(port: int, addr: str = "0.0.0.0") -> MetricReader:
    """Serve the metrics on ``port``: Prometheus text, or OpenMetrics with trace exemplars when the scraper asks."""
    try:
        from prometheus_client import start_http_server

        from cp_observe._emission._exemplars import ExemplarPrometheusReader
    except ImportError as exc:
        raise ConfigurationError("metrics_port needs opentelemetry-exporter-prometheus installed") from exc
    start_http_server(port, addr=addr)
    return ExemplarPrometheusReader()
