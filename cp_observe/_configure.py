"""``configure()``: one call that wires the hook into the application's OpenTelemetry set-up.

If the application already has SDK providers (global or passed in), the processor joins them. If not,
providers are created with OTLP exporters configured from the standard ``OTEL_*`` variables (or
``otlp_endpoint``), and optionally a Prometheus endpoint on ``metrics_port``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import _logs, metrics, trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from cp_observe import _runtime
from cp_observe._errors import ConfigurationError
from cp_observe._log import logger
from cp_observe._names import ENV_PHOENIX_API_KEY
from cp_observe._processor import ContextPrecisionProcessor
from cp_observe._quiet_export import QuietLogExporter, QuietMetricExporter
from cp_observe._sampling import TraceIdRatio
from cp_observe._settings import Settings
from cp_observe._sinks import Sink
from cp_observe._types import Judge

__all__ = ["configure", "processor_from_settings", "sinks_from_settings"]

_CURRENT: list[ContextPrecisionProcessor | None] = [None]


def configure(
    judge: Judge | str | None = None,
    *,
    redact: Callable[[str], str] | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    logger_provider: LoggerProvider | None = None,
    sinks: Sequence[Sink] | None = None,
    data_source: Callable[[Mapping[str, Any]], Any] | Sequence[str] | str | None = None,
    **settings: Any,
) -> ContextPrecisionProcessor | None:
    """Set up context-precision scoring for this process; returns the processor (``None`` in capture-only mode).

    Args:
        judge: a ``Judge``, a litellm model string, or ``"lexical"``; default ``CP_OBSERVE_JUDGE`` or
            ``"lexical"``.
        redact: ``(text) -> text`` applied to every query, context and answer before it is recorded or
            sent to the judge.
        tracer_provider: the provider to attach to (default: the global SDK provider, else a new one).
        meter_provider: where metrics go (default: the global SDK provider, else a new one).
        logger_provider: where evaluation events go (default: the global SDK provider, else a new one).
        sinks: more evaluation sinks, beside the one ``phoenix_url`` sets up (each scored evaluation is also
            sent to them, asynchronously; see ``Sink``).
        data_source: names each retrieval's data source ahead of the conventions: a callable of the span's
            attributes returning a name (``None`` keeps the conventional name), or attribute names tried in
            order (a list, or a comma-separated string; default ``CP_OBSERVE_DATA_SOURCE``).
        **settings: any field of ``Settings`` (``sample_rate``, ``capture_content``, ``threshold``,
            ``otlp_endpoint``, ``metrics_port``, ...); each falls back to ``CP_OBSERVE_<NAME>``, then the default.

    Raises:
        ConfigurationError: an argument is invalid.
    """
    if redact is not None and not callable(redact):
        raise ConfigurationError("redact must be a callable (text) -> text")
    if isinstance(judge, str):
        settings["judge"] = judge
    data_source_callable = _data_source_setting(data_source, settings)
    resolved = Settings.resolve(settings)
    resource = Resource.create({"service.name": resolved.service_name} if resolved.service_name else {})
    tracer_provider = tracer_provider or _global_sdk(trace.get_tracer_provider(), TracerProvider)
    export_processor: BatchSpanProcessor | None = None
    if tracer_provider is None:
        tracer_provider = TracerProvider(resource=resource)
        exporter = _span_exporter(resolved)
        if exporter is not None:
            export_processor = BatchSpanProcessor(exporter)
            if not (resolved.hold_spans and not resolved.capture_only):
                tracer_provider.add_span_processor(export_processor)
        trace.set_tracer_provider(tracer_provider)
    if resolved.hold_spans and export_processor is None:
        logger.warning("hold_spans needs cp-observe to create the exporting pipeline; ignored")
    meter_provider = meter_provider or _global_sdk(metrics.get_meter_provider(), MeterProvider)
    if meter_provider is None:
        meter_provider = MeterProvider(resource=resource, metric_readers=_metric_readers(resolved))
        metrics.set_meter_provider(meter_provider)
    elif resolved.metrics_port is not None:
        logger.warning("metrics_port ignored: the application already has a meter provider")
    logger_provider = logger_provider or _global_sdk(_logs.get_logger_provider(), LoggerProvider)
    if logger_provider is None:
        logger_provider = LoggerProvider(resource=resource)
        log_exporter = _log_exporter(resolved)
        if log_exporter is not None:
            logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
        _logs.set_logger_provider(logger_provider)

    sampler = TraceIdRatio(resolved.sample_rate)
    _runtime.install(
        capture_content=resolved.capture_content,
        redact=redact,
        max_value_length=resolved.max_value_length,
        max_contexts=resolved.max_contexts,
        max_judged_contexts=resolved.max_judged_contexts,
        sampler=sampler,
        tracer_provider=tracer_provider,
        configured=True,
        keep_payloads=not resolved.capture_only,
    )
    previous = _CURRENT[0]
    if previous is not None:
        previous.shutdown()
        _CURRENT[0] = None
    if resolved.capture_only:
        if resolved.phoenix_url or sinks:
            logger.warning("evaluation sinks ignored in capture-only mode: nothing is scored here; give "
                           "cp-observe serve the sinks (--phoenix-url)")
        logger.info("cp-observe configured in capture-only mode", sample_rate=resolved.sample_rate)
        return None
    processor = processor_from_settings(
        judge if judge is not None and not isinstance(judge, str) else _judge_from(resolved),
        resolved,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        logger_provider=logger_provider,
        export_processor=export_processor if resolved.hold_spans else None,
        sinks=[*sinks_from_settings(resolved), *(sinks or ())],
        **({"data_source": data_source_callable} if data_source_callable is not None else {}),
    )
    tracer_provider.add_span_processor(processor)
    _CURRENT[0] = processor
    logger.info("cp-observe configured", judge=processor.judge.model, sample_rate=resolved.sample_rate,
                capture_content=resolved.capture_content)
    return processor


def _data_source_setting(data_source: Any, settings: dict[str, Any]) -> Callable[[Mapping[str, Any]], Any] | None:
    """A callable ``data_source`` is returned; attribute names go into ``settings`` (as the variable would)."""
    if callable(data_source):
        return data_source  # type: ignore[no-any-return]
    if isinstance(data_source, str):
        settings["data_source"] = data_source
    elif data_source is not None:
        if isinstance(data_source, Mapping) or not all(isinstance(key, str) for key in data_source):
            raise ConfigurationError("data_source must be a callable (attributes) -> name or attribute names")
        settings["data_source"] = ",".join(data_source)
    return None


def processor_from_settings(judge: Judge, settings: Settings, **overrides: Any) -> ContextPrecisionProcessor:
    """The processor for ``settings`` (shared by ``configure()`` and ``cp-observe serve``); ``overrides`` win."""
    options: dict[str, Any] = {
        "sample_rate": settings.sample_rate,
        "max_evaluations_per_minute": settings.max_evaluations_per_minute,
        "daily_budget_usd": settings.daily_budget_usd,
        "threshold": settings.threshold,
        "capture_content": settings.capture_content,
        "queue_size": settings.queue_size,
        "concurrency": settings.concurrency,
        "turn_timeout_s": settings.turn_timeout_s,
        "max_pending_traces": settings.max_pending_traces,
        "max_judged_contexts": settings.max_judged_contexts,
        "circuit_failures": settings.circuit_failures,
        "circuit_cooldown_s": settings.circuit_cooldown_s,
        "hold_timeout_s": settings.hold_timeout_s,
        "max_held_spans": settings.max_held_spans,
        "sink_queue_size": settings.sink_queue_size,
        "sink_batch_size": settings.sink_batch_size,
        "sink_max_retries": settings.sink_max_retries,
        "data_source": settings.data_source_attributes(),
    }
    if "sinks" not in overrides:  # cp-observe serve: the sinks its settings name
        options["sinks"] = sinks_from_settings(settings)
    options.update(overrides)
    return ContextPrecisionProcessor(judge, **options)


def sinks_from_settings(settings: Settings) -> list[Sink]:
    """The evaluation sinks the settings name: Phoenix when ``phoenix_url`` is set."""
    if not settings.phoenix_url:
        return []
    from cp_observe._phoenix import PhoenixSink

    key = settings.phoenix_api_key.get_secret_value() if settings.phoenix_api_key else None
    return [PhoenixSink(settings.phoenix_url, api_key=key or os.environ.get(ENV_PHOENIX_API_KEY) or None,
                        timeout_s=settings.sink_timeout_s)]


def _judge_from(settings: Settings) -> Judge:
    if settings.judge.strip().lower() == "lexical":
        from cp_observe._lexical import LexicalJudge

        return LexicalJudge()
    from cp_observe._llm_judge import LLMJudge

    return LLMJudge(
        settings.judge,
        api_base=settings.judge_api_base,
        api_key=settings.judge_api_key.get_secret_value() if settings.judge_api_key else None,
        timeout=settings.judge_timeout_s,
        max_retries=settings.judge_max_retries,
    )


def _global_sdk(provider: Any, sdk_type: type[Any]) -> Any:
    return provider if isinstance(provider, sdk_type) else None


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


def _span_exporter(settings: Settings) -> Any:
    if not _wants_otlp(settings, "traces"):
        return None
    if _protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        return GrpcSpanExporter(**_endpoint(settings, "traces"))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(**_endpoint(settings, "traces"))


def _log_exporter(settings: Settings) -> Any:
    if not _wants_otlp(settings, "logs"):
        return None
    if _protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter

        return QuietLogExporter(GrpcLogExporter(**_endpoint(settings, "logs")))
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    # Trace-only backends (Phoenix) refuse logs: say so once and stop, rather than an error per batch.
    return QuietLogExporter(OTLPLogExporter(**_endpoint(settings, "logs")))


def _metric_readers(settings: Settings) -> list[MetricReader]:
    readers: list[MetricReader] = []
    if _wants_otlp(settings, "metrics"):
        if _protocol() == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter

            grpc_exporter = QuietMetricExporter(GrpcExporter(**_endpoint(settings, "metrics")))  # see the logs
            readers.append(PeriodicExportingMetricReader(grpc_exporter))
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            exporter = QuietMetricExporter(OTLPMetricExporter(**_endpoint(settings, "metrics")))  # see the logs
            readers.append(PeriodicExportingMetricReader(exporter))
    if settings.metrics_port is not None:
        readers.append(start_prometheus_endpoint(settings.metrics_port))
    return readers


def start_prometheus_endpoint(port: int, addr: str = "0.0.0.0") -> MetricReader:
    """Serve the metrics on ``port``: Prometheus text, or OpenMetrics with trace exemplars when the scraper asks."""
    try:
        from prometheus_client import start_http_server

        from cp_observe._exemplars import ExemplarPrometheusReader
    except ImportError as exc:
        raise ConfigurationError("metrics_port needs opentelemetry-exporter-prometheus installed") from exc
    start_http_server(port, addr=addr)
    return ExemplarPrometheusReader()
