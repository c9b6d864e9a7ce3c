"""The one provider factory: the tracer, meter and logger providers with their exporters, the judges and the processor.

Shared by ``configure()``, ``cp-observe serve`` and ``replay`` (and ``calibrate --push``'s metric exporter), so
the set-ups cannot drift. What only building an exporter needs (the quiet wrappers, urllib, the metric reader)
is imported when one is built, not when ``configure()`` attaches to the application's providers.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

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
    "Providers",
    "build_log_exporter",
    "build_metric_exporter",
    "build_providers",
    "build_span_exporter",
    "exemplar_prometheus_reader",
    "export_choice",
    "judge_call_options",
    "judge_from_settings",
    "processor_from_settings",
    "sinks_from_settings",
    "start_prometheus_endpoint",
]


@dataclass
class Providers:
    """The tracer, meter and logger providers one set-up scores into, and which of them it created.

    Attributes:
        export_processor: the span export pipeline created with the tracer provider (``None``: none created).
        created: the providers created here, in the order they are to be flushed and shut down (traces, logs,
            then metrics: the meter provider's last collection counts everything that happened before it).
        metric_readers: the metric readers exporting over OTLP that were created here.
    """

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    logger_provider: LoggerProvider
    export_processor: Any = None
    created: list[Any] = field(default_factory=list)
    metric_readers: list[MetricReader] = field(default_factory=list)

    def close(self, timeout_s: float) -> None:
        """Flush and shut down the providers created here, within ``timeout_s`` (at least a second each)."""
        deadline = time.monotonic() + timeout_s
        for provider in self.created:
            remaining_ms = max(1_000, int((deadline - time.monotonic()) * 1000))
            try:
                if provider is not self.meter_provider:  # its shutdown collects and exports one last time
                    provider.force_flush(remaining_ms)
            finally:
                provider.shutdown()


def build_providers(
    settings: Settings,
    resource: Resource,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    logger_provider: LoggerProvider | None = None,
    span_exporter: Any = None,
    otlp: bool = True,
    span_processors: Sequence[Any] = (),
    metric_readers: Sequence[MetricReader] = (),
    export_queue_size: int | None = None,
    attach_export: bool = True,
    **tracer_options: Any,
) -> Providers:
    """The providers a set-up scores into: each one given is used as it is, each one missing is created.

    A created tracer provider gets ``span_processors`` first, then a batch export of ``span_exporter`` (``None``:
    no export; ``build_span_exporter`` names the one the settings ask for), attached unless ``attach_export`` is
    False (the hold attaches it through the processor instead). A created logger provider exports over OTLP, and a
    created meter provider reads into OTLP and the ``metrics_port`` endpoint plus ``metric_readers``, when ``otlp``.
    ``tracer_options`` (``sampler``, ``active_span_processor``) go to a created ``TracerProvider``.
    """
    created: list[Any] = []
    export_processor = None
    if tracer_provider is None:
        tracer_provider = TracerProvider(resource=resource, **tracer_options)
        for processor in span_processors:
            tracer_provider.add_span_processor(processor)
        if span_exporter is not None:
            from opentelemetry.sdk.trace.export import BatchSpanProcessor  # only with an exporter (and its cost)

            queue = {"max_queue_size": export_queue_size} if export_queue_size else {}
            export_processor = BatchSpanProcessor(span_exporter, **queue)
            if attach_export:
                tracer_provider.add_span_processor(export_processor)
        created.append(tracer_provider)
    if logger_provider is None:
        logger_provider = LoggerProvider(resource=resource)
        log_exporter = build_log_exporter(settings) if otlp else None
        if log_exporter is not None:
            from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

            logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
        created.append(logger_provider)
    readers: list[MetricReader] = []
    if meter_provider is None:
        exporter = build_metric_exporter(settings) if otlp else None
        if exporter is not None:
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            readers.append(PeriodicExportingMetricReader(exporter))
        if otlp and settings.metrics_port is not None:
            readers.append(start_prometheus_endpoint(settings.metrics_port))
        meter_provider = MeterProvider(resource=resource, metric_readers=[*readers, *metric_readers])
        created.append(meter_provider)
    return Providers(tracer_provider, meter_provider, logger_provider, export_processor, created, readers)


def processor_from_settings(judge: Judge, settings: Settings, **overrides: Any) -> ContextPrecisionProcessor:
    """The processor for ``settings`` (shared by ``configure()`` and ``cp-observe serve``); ``overrides`` win.

    Every processor setting of the field table is passed on as it is, so a new one needs nothing here; only
    what is built from settings (the cheap judge, the sinks) is made here.
    """
    options: dict[str, Any] = settings.processor_options()
    options["cheap_judge"] = judge_from_settings(settings, settings.cheap_judge) if settings.cheap_judge else None
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


def judge_from_settings(settings: Settings, model: str | None = None) -> Judge:
    """The judge ``model`` names (default ``settings.judge``), with the settings' endpoint, key, timeout and transport.

    The one factory of both judges: the cascade's cheap judge (``settings.cheap_judge``) is built here too, so an
    LLM one takes the judge's endpoint, key, retries and ``judge_transport`` alike.
    """
    return resolve_judge(
        model if model is not None else settings.judge,
        api_base=settings.judge_api_base,
        api_key=settings.judge_api_key.get_secret_value() if settings.judge_api_key else None,
        timeout=settings.judge_timeout_s,
        max_retries=settings.judge_max_retries,
        transport=settings.judge_transport,
        **judge_call_options(settings),
    )


_OTLP_VARIABLES = "OTEL_EXPORTER_OTLP_"  # the OTLP exporters' variables: endpoints, protocol, headers, per signal


def export_choice(settings: Settings) -> tuple[Any, ...]:
    """What providers built from ``settings`` now would export to: endpoint, metrics port, the exporter variables."""
    variables = sorted((name, value) for name, value in os.environ.items()
                       if name.startswith(_OTLP_VARIABLES) or name == ENV_OTEL_TRACES_EXPORTER)
    return settings.otlp_endpoint, settings.metrics_port, tuple(variables)


def judge_call_options(settings: Settings) -> dict[str, object]:
    """What an LLM judge's calls ask for: prompt version, reasons, reasoning effort, service tier, flex timeout."""
    return {
        "prompt_version": settings.judge_prompt_version,
        "reasons": settings.judge_reasons,
        "reasoning_effort": settings.judge_reasoning_effort,
        "service_tier": settings.judge_service_tier,
        "flex_timeout": settings.judge_flex_timeout_s,
    }


def _protocol() -> str:
    return os.environ.get(f"{_OTLP_VARIABLES}PROTOCOL", "http/protobuf").strip().lower()


def _wants_otlp(settings: Settings, signal: str) -> bool:
    return bool(
        settings.otlp_endpoint
        or os.environ.get(f"{_OTLP_VARIABLES}ENDPOINT")
        or os.environ.get(f"{_OTLP_VARIABLES}{signal.upper()}_ENDPOINT")
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
        return _otlp_exporter(settings, "traces") if _wants_otlp(settings, "traces") else None
    exporters = []
    for name in dict.fromkeys(part.strip() for part in chosen.split(",") if part.strip()):
        if name == "otlp":
            exporters.append(_otlp_exporter(settings, "traces"))
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


#: The OTLP exporter class of each signal, in its gRPC module and its HTTP one (imported when one is built).
_OTLP_EXPORTERS = {
    "traces": ("grpc.trace_exporter", "http.trace_exporter", "OTLPSpanExporter"),
    "logs": ("grpc._log_exporter", "http._log_exporter", "OTLPLogExporter"),
    "metrics": ("grpc.metric_exporter", "http.metric_exporter", "OTLPMetricExporter"),
}


def _otlp_exporter(settings: Settings, signal: str) -> Any:
    """The OTLP exporter of ``signal`` over the protocol ``OTEL_EXPORTER_OTLP_PROTOCOL`` names (HTTP by default)."""
    grpc, http, name = _OTLP_EXPORTERS[signal]
    module = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{grpc if _protocol() == 'grpc' else http}")
    return getattr(module, name)(**_endpoint(settings, signal))


def build_log_exporter(settings: Settings) -> Any:
    """The OTLP log exporter (quiet on trace-only backends), or None when none is asked for."""
    if not _wants_otlp(settings, "logs"):
        return None
    from cp_observe._emission._quiet_export import QuietLogExporter

    # Trace-only backends (Phoenix) refuse logs: say so once and stop, rather than an error per batch.
    return QuietLogExporter(_otlp_exporter(settings, "logs"))


def build_metric_exporter(settings: Settings) -> Any:
    """The OTLP metric exporter the settings ask for (gRPC or HTTP), or ``None`` when no endpoint is set."""
    if not _wants_otlp(settings, "metrics"):
        return None
    from cp_observe._emission._quiet_export import QuietMetricExporter

    return QuietMetricExporter(_otlp_exporter(settings, "metrics"))  # see the logs


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
