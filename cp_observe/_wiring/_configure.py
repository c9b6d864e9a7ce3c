"""``configure()``: one call that wires the hook into the application's OpenTelemetry set-up.

If the application already has SDK providers (global or passed in), the processor joins them. If not,
providers are created with OTLP exporters configured from the standard ``OTEL_*`` variables (or
``otlp_endpoint``), and optionally a Prometheus endpoint on ``metrics_port``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import _logs, metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider

from cp_observe._config import _runtime
from cp_observe._config._sampling import TraceIdRatio
from cp_observe._config._settings import Settings
from cp_observe._config._signature import table_signature
from cp_observe._emission._sinks import Sink
from cp_observe._errors import ConfigurationError
from cp_observe._log import logger
from cp_observe._processing._processor import ContextPrecisionProcessor
from cp_observe._types import Judge
from cp_observe._wiring._providers import (
    Providers,
    build_providers,
    build_span_exporter,
    export_choice,
    judge_from_settings,
    processor_from_settings,
    sinks_from_settings,
)

__all__ = ["configure", "current_processor", "replace_current_processor"]

_CURRENT: list[ContextPrecisionProcessor | None] = [None]  # the processor the last configure() installed
# The one forwarding processor configure() attached to each tracer provider, and the one a processor is behind.
_FORWARDERS: weakref.WeakKeyDictionary[TracerProvider, _Forwarder] = weakref.WeakKeyDictionary()
_BEHIND: weakref.WeakKeyDictionary[ContextPrecisionProcessor, _Forwarder] = weakref.WeakKeyDictionary()
# What each provider configure() created exports to (see export_choice), to warn when a later call asks for another.
_EXPORTS: weakref.WeakKeyDictionary[Any, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def current_processor() -> ContextPrecisionProcessor | None:
    """The processor the last ``configure()`` installed (``None``: none, or capture-only).

    The next ``configure()`` shuts it down before it installs its own, behind the same forwarding processor. The
    test kit's ``IsolatedRuntime`` reads it when it opens, to put it back when it closes.
    """
    return _CURRENT[0]


def replace_current_processor(processor: ContextPrecisionProcessor | None) -> ContextPrecisionProcessor | None:
    """Make ``processor`` the one the next ``configure()`` shuts down, without shutting down the one it replaces.

    The forwarding processor the replaced one was behind stops calling it, and the one ``processor`` was installed
    behind (if any) calls it again. For the test kit's ``IsolatedRuntime``, which shuts down what ``configure()``
    installed while it was open and then puts back the processor that was current before. Returns the one replaced.
    """
    previous, _CURRENT[0] = _CURRENT[0], processor
    if previous is not None and (forwarder := _BEHIND.get(previous)) is not None and forwarder.target is previous:
        forwarder.target = None
    if processor is not None and (forwarder := _BEHIND.get(processor)) is not None:
        forwarder.target = processor
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
    hold = resolved.hold_spans and not resolved.capture_only
    tracer_provider = tracer_provider or _global_sdk(trace.get_tracer_provider(), TracerProvider)
    providers = build_providers(
        resolved, resource, tracer_provider=tracer_provider,
        span_exporter=build_span_exporter(resolved) if tracer_provider is None else None,  # only when created
        meter_provider=meter_provider or _global_sdk(metrics.get_meter_provider(), MeterProvider),
        logger_provider=logger_provider or _global_sdk(_logs.get_logger_provider(), LoggerProvider),
        active_span_processor=_ScorersFirst(),  # type: ignore[no-untyped-call]  # untyped in the SDK
        attach_export=not hold,
    )
    tracer_provider, meter_provider = providers.tracer_provider, providers.meter_provider
    logger_provider = providers.logger_provider
    _publish(providers.created, export_choice(resolved))
    _warn_on_other_exports(providers, export_choice(resolved))
    if resolved.hold_spans and providers.export_processor is None:
        logger.warning("hold_spans needs cp-observe to create the exporting pipeline; ignored")
    if resolved.metrics_port is not None and meter_provider not in providers.created:
        logger.warning("metrics_port ignored: the application already has a meter provider")

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
    previous = replace_current_processor(None)
    if previous is not None:
        previous.shutdown()
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
        export_processor=providers.export_processor if resolved.hold_spans else None,
        sinks=[*sinks_from_settings(resolved), *(sinks or ())],
        **({"data_source": data_source_callable} if data_source_callable is not None else {}),
        **({"document_resolver": document_resolver} if callable(document_resolver) else {}),
    )
    if processor.sampler is not sampler:  # the processor's rates (paced, allocated) mark the decorators' spans
        _runtime.install(sampler=processor.sampler)
    forwarder = _FORWARDERS.get(tracer_provider)
    if forwarder is None:
        forwarder = _FORWARDERS[tracer_provider] = _Forwarder()
        tracer_provider.add_span_processor(forwarder)
    _BEHIND[processor] = forwarder
    replace_current_processor(processor)
    logger.info("cp-observe configured", judge=processor.judge.model, sample_rate=resolved.sample_rate,
                capture_content=resolved.capture_content)
    return processor


class _Forwarder(SpanProcessor):
    """The one span processor ``configure()`` adds to a provider, forwarding to the processor of the last call.

    The SDK cannot remove a span processor from a provider. A second ``configure()`` (a notebook cell run again)
    re-points this one instead of adding another, so exactly one scoring processor is live on the provider; the
    one it replaced is shut down and no longer called. ``target`` is one reference, read once per call, so
    ``on_end`` (which the garbage collector can reach) takes no lock.
    """

    def __init__(self) -> None:
        self.target: ContextPrecisionProcessor | None = None

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """The current processor's ``on_start``."""
        target = self.target
        if target is not None:
            target.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        """The current processor's ``on_end``."""
        target = self.target
        if target is not None:
            target.on_end(span)

    def shutdown(self) -> None:
        """Shut the current processor down (the provider is shutting down)."""
        target = self.target
        if target is not None:
            target.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Flush the current processor."""
        target = self.target
        return target.force_flush(timeout_millis) if target is not None else True


class _ScorersFirst(SynchronousMultiSpanProcessor):
    """The processors of a provider cp-observe creates: at shutdown, the scoring processors stop first.

    The SDK stops processors in the order they were added, and the exporting one is added before ours: an
    explicit ``provider.shutdown()`` would stop the export before our last evaluation spans reach it. (At
    interpreter exit, ``_processing/_exit.py`` finishes them before any provider shuts down.)
    """

    def shutdown(self) -> None:
        """Stop the scoring processors (they emit their last evaluations), then the rest in order."""
        processors = self._span_processors
        scoring = (ContextPrecisionProcessor, _Forwarder)
        for processor in processors:
            if isinstance(processor, scoring):
                processor.shutdown()
        for processor in processors:
            if not isinstance(processor, scoring):
                processor.shutdown()


def _publish(created: Sequence[Any], exports: tuple[Any, ...]) -> None:
    """Make the providers this call created the global ones, remembering what they export to."""
    for provider in created:
        _EXPORTS[provider] = exports
        if isinstance(provider, TracerProvider):
            trace.set_tracer_provider(provider)
        elif isinstance(provider, MeterProvider):
            metrics.set_meter_provider(provider)
        else:
            _logs.set_logger_provider(provider)


def _warn_on_other_exports(providers: Providers, exports: tuple[Any, ...]) -> None:
    """Warn when this call asks for other exporters than providers an earlier call created, which keep theirs.

    Their exporters cannot be swapped (a meter provider's readers are fixed when it is built, and no provider can
    drop a processor), so a changed ``otlp_endpoint``, ``metrics_port`` or OTLP variable would silently not apply.
    """
    used = (providers.tracer_provider, providers.meter_provider, providers.logger_provider)
    earlier = {_EXPORTS.get(provider, exports) for provider in used} - {exports}
    if earlier:
        before = earlier.pop()
        changed = sorted({name for name, _ in set(before[2]) ^ set(exports[2])})  # names, never values
        logger.warning("configure() called again with other exporters: the providers an earlier call created keep "
                       "theirs (restart the process, or pass providers in)",
                       otlp_endpoint_changed=before[0] != exports[0], metrics_port_changed=before[1] != exports[1],
                       variables_changed=",".join(changed))


def _data_source_setting(data_source: Any, settings: dict[str, Any]) -> Callable[[Mapping[str, Any]], Any] | None:
    """A callable ``data_source`` is returned; attribute names go into ``settings`` (as the variable would)."""
    if callable(data_source):
        return data_source  # type: ignore[no-any-return]
    names = Settings.data_source_setting(data_source)
    if names is not None:
        settings["data_source"] = names
    return None


def _global_sdk(provider: Any, sdk_type: type[Any]) -> Any:
    return provider if isinstance(provider, sdk_type) else None


configure.__signature__ = table_signature(configure)  # type: ignore[attr-defined]
