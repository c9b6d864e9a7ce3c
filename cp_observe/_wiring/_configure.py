"""``configure()``: one call that wires the hook into the application's OpenTelemetry set-up.

If the application already has SDK providers (global or passed in), the processor joins them. If not,
providers are created with OTLP exporters configured from the standard ``OTEL_*`` variables (or
``otlp_endpoint``), and optionally a Prometheus endpoint on ``metrics_port``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import _logs, metrics, trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SynchronousMultiSpanProcessor, TracerProvider

from cp_observe._config import _runtime
from cp_observe._config._sampling import TraceIdRatio
from cp_observe._config._settings import Settings
from cp_observe._emission._sinks import Sink
from cp_observe._errors import ConfigurationError
from cp_observe._log import logger
from cp_observe._processing._processor import ContextPrecisionProcessor
from cp_observe._types import Judge

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
from cp_observe._wiring._providers import (
    build_log_exporter,
    build_metric_readers,
    build_span_exporter,
    judge_from_settings,
    processor_from_settings,
    sinks_from_settings,
)

__all__ = ["configure", "current_processor", "replace_current_processor"]

_CURRENT: list[ContextPrecisionProcessor | None] = [None]  # the processor the last configure() installed


def current_processor() -> ContextPrecisionProcessor | None:
    """The processor the last ``configure()`` installed (``None``: none, or capture-only).

    The next ``configure()`` shuts it down before it installs its own. The test kit's ``IsolatedRuntime`` reads it
    when it opens, to put it back when it closes.
    """
    return _CURRENT[0]


def replace_current_processor(processor: ContextPrecisionProcessor | None) -> ContextPrecisionProcessor | None:
    """Make ``processor`` the one the next ``configure()`` shuts down, without shutting down the one it replaces.

    For the test kit's ``IsolatedRuntime``, which shuts down what ``configure()`` installed while it was open and
    then puts back the processor that was current before. Returns the processor it replaced.
    """
    previous, _CURRENT[0] = _CURRENT[0], processor
    return previous


def configure(
    judge: Judge | str | None = None,
    *,
    redact: Callable[[str], str] | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    logger_provider: LoggerProvider | None = None,
    sinks: Sequence[Sink] | None = None,
    data_source: Callable[[Mapping[str, Any]], Any] | Sequence[str] | str | None = None,
    document_resolver: Callable[[str, str], Any] | str | None = None,
    **settings: Any,
) -> ContextPrecisionProcessor | None:
    """Set up context-precision scoring for this process; returns the processor (``None`` in capture-only mode).

    Every other keyword argument is a setting of the field table (``sample_rate``, ``queue_size``,
    ``judge_api_base``, ...), documented once in the settings reference that the documentation site generates
    from ``Settings`` (which holds their types and bounds); ``inspect.signature(configure)`` lists them all. Each
    one left ``None`` falls back to ``CP_OBSERVE_<NAME>``, then the default.

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
        document_resolver: the text of documents a retrieval names by id only: a callable
            ``(document_id, data_source) -> text`` (plain or async), or ``module:function`` (default
            ``CP_OBSERVE_DOCUMENT_RESOLVER``). It runs on the evaluator thread, bounded by
            ``document_resolver_timeout_s`` and ``document_resolver_concurrency``.
        **settings: the settings; a name that is not one raises ``ConfigurationError``.

    Raises:
        ConfigurationError: an argument is invalid.
    """
    if redact is not None and not callable(redact):
        raise ConfigurationError("redact must be a callable (text) -> text")
    settings = dict(settings)
    if document_resolver is not None and not isinstance(document_resolver, str) and not callable(document_resolver):
        raise ConfigurationError("document_resolver must be a callable (document_id, data_source) -> text, "
                                 "or module:function")
    if isinstance(document_resolver, str):
        settings["document_resolver"] = document_resolver
    if isinstance(judge, str):
        settings["judge"] = judge
    data_source_callable = _data_source_setting(data_source, settings)
    resolved = Settings.resolve(settings)
    resource = Resource.create({"service.name": resolved.service_name} if resolved.service_name else {})
    tracer_provider = tracer_provider or _global_sdk(trace.get_tracer_provider(), TracerProvider)
    export_processor: BatchSpanProcessor | None = None
    if tracer_provider is None:
        tracer_provider = TracerProvider(
            resource=resource, active_span_processor=_ScorersFirst())  # type: ignore[no-untyped-call]  # untyped in the SDK
        exporter = build_span_exporter(resolved)
        if exporter is not None:
            from opentelemetry.sdk.trace.export import BatchSpanProcessor  # only with an exporter (and its cost)

            export_processor = BatchSpanProcessor(exporter)
            if not (resolved.hold_spans and not resolved.capture_only):
                tracer_provider.add_span_processor(export_processor)
        trace.set_tracer_provider(tracer_provider)
    if resolved.hold_spans and export_processor is None:
        logger.warning("hold_spans needs cp-observe to create the exporting pipeline; ignored")
    meter_provider = meter_provider or _global_sdk(metrics.get_meter_provider(), MeterProvider)
    if meter_provider is None:
        meter_provider = MeterProvider(resource=resource, metric_readers=build_metric_readers(resolved))
        metrics.set_meter_provider(meter_provider)
    elif resolved.metrics_port is not None:
        logger.warning("metrics_port ignored: the application already has a meter provider")
    logger_provider = logger_provider or _global_sdk(_logs.get_logger_provider(), LoggerProvider)
    if logger_provider is None:
        logger_provider = LoggerProvider(resource=resource)
        log_exporter = build_log_exporter(resolved)
        if log_exporter is not None:
            from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

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
        judge if judge is not None and not isinstance(judge, str) else judge_from_settings(resolved),
        resolved,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        logger_provider=logger_provider,
        export_processor=export_processor if resolved.hold_spans else None,
        sinks=[*sinks_from_settings(resolved), *(sinks or ())],
        **({"data_source": data_source_callable} if data_source_callable is not None else {}),
        **({"document_resolver": document_resolver} if callable(document_resolver) else {}),
    )
    if processor.sampler is not sampler:  # the processor's rates (paced, allocated) mark the decorators' spans
        _runtime.install(sampler=processor.sampler)
    tracer_provider.add_span_processor(processor)
    _CURRENT[0] = processor
    logger.info("cp-observe configured", judge=processor.judge.model, sample_rate=resolved.sample_rate,
                capture_content=resolved.capture_content)
    return processor


class _ScorersFirst(SynchronousMultiSpanProcessor):
    """The processors of a provider cp-observe creates: at shutdown, the scoring processors stop first.

    The SDK stops processors in the order they were added, and the exporting one is added before ours: an
    explicit ``provider.shutdown()`` would stop the export before our last evaluation spans reach it. (At
    interpreter exit, ``_processing/_exit.py`` finishes them before any provider shuts down.)
    """

    def shutdown(self) -> None:
        """Stop the scoring processors (they emit their last evaluations), then the rest in order."""
        processors = self._span_processors
        for processor in processors:
            if isinstance(processor, ContextPrecisionProcessor):
                processor.shutdown()
        for processor in processors:
            if not isinstance(processor, ContextPrecisionProcessor):
                processor.shutdown()


def _signature() -> inspect.Signature:
    """``configure``'s own keywords, then every other setting of the field table (``None``: unset)."""
    own = [p for p in inspect.signature(configure).parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    taken = {p.name for p in own}
    fields = Settings.model_fields
    return inspect.Signature(
        [*own, *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                   annotation=field.annotation if field.optional else f"{field.annotation.__name__} | None")
                 for name, field in fields.items() if name not in taken)],
        return_annotation=inspect.signature(configure).return_annotation,
    )


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


def _global_sdk(provider: Any, sdk_type: type[Any]) -> Any:
    return provider if isinstance(provider, sdk_type) else None


configure.__signature__ = _signature()  # type: ignore[attr-defined]
