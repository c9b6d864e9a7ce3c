"""``ContextPrecisionProcessor``: the OpenTelemetry span processor that scores sampled retrievals.

``on_end`` is the only part on the request path. For a span that is neither a retrieval, an agent nor a
local root it returns after two dictionary lookups; for one in an unsampled trace after a bit mask; for
a sampled one it takes the in-memory payload, keeps references (ids, times, the immutable attribute mapping,
the payload: ``_record.Ended``) and appends them to a bounded queue. It runs no user code (the
``data_source`` mapping runs on the evaluator thread, a refused target's too), never blocks and never
raises. Everything else runs on the evaluator thread (see ``_evaluator``).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode, TracerProvider

from cp_observe import _names as n
from cp_observe._capture._conventions import (
    ROLE_ANSWER,
    ROLE_RETRIEVER,
    DataSource,
    data_source_reader,
    plain_attributes,
    role,
)
from cp_observe._capture._payloads import PAYLOADS
from cp_observe._config import _runtime
from cp_observe._config._sampling import SourceRates, TraceIdRatio, sample_key, sampling_reason
from cp_observe._config._settings import Settings
from cp_observe._config._signature import TableSignature
from cp_observe._emission._emit import Emitter
from cp_observe._emission._sinks import Sink, SinkRunner
from cp_observe._fork import at_fork_method
from cp_observe._internal import report_internal_error
from cp_observe._judging._judges import resolve_judge
from cp_observe._judging._prices import require_prices
from cp_observe._log import logger
from cp_observe._processing._cascade import Cascade
from cp_observe._processing._evaluator import Evaluator
from cp_observe._processing._exit import watch as finish_at_exit
from cp_observe._processing._hold import HeldSpans
from cp_observe._processing._rate_plan import RatePlan, wants_plan
from cp_observe._processing._record import Ended, Record
from cp_observe._processing._resolver import DocumentResolver
from cp_observe._types import Judge, ScoreResult

__all__ = ["ContextPrecisionProcessor", "processor_options", "takes_as_target"]

_SINK_SHUTDOWN_S = 5.0


def _decorators_have_no_provider(runtime: _runtime.Runtime) -> bool:
    """True before configure(), with no provider installed and no SDK provider set globally."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

    return (
        not runtime.configured
        and runtime.tracer_provider is None
        and not isinstance(trace.get_tracer_provider(), SdkTracerProvider)
    )


def _weak_depth(processor: ContextPrecisionProcessor) -> Callable[[], int]:
    """The processor's queue depth, read through a weak reference, for the queue-depth gauge's callback.

    A meter keeps its callbacks as long as it lives (the SDK's, until exit): a strong reference there would keep
    every dropped processor alive, and its ``weakref.finalize`` from ever running.
    """
    ref = weakref.ref(processor)

    def depth() -> int:
        live = ref()
        return live.depth() if live is not None else 0

    return depth


def _answer_is_target(lookup: Mapping[str, Any] | None) -> bool:
    """An agent that reports contexts, or whose context_extractor raised (counted skipped/extractor_error)."""
    return lookup is not None and (
        lookup.get(n.CP_CONTEXT_COUNT) is not None or lookup.get(n.CP_USER_ERROR) == "extractor_error"
    )


def takes_as_target(span: ReadableSpan) -> bool:
    """Whether ``on_end`` would queue ``span`` as a target (in a sampled trace): the same rule as ``_on_end``."""
    lookup = plain_attributes(span)
    kind = role(lookup, span)
    return kind == ROLE_RETRIEVER or (kind == ROLE_ANSWER and _answer_is_target(lookup))


def _millis_left(deadline: float) -> int:
    return max(0, int((deadline - time.monotonic()) * 1000))


def processor_options(given: Mapping[str, Any], *, data_source: DataSource, segments: Sequence[str] | str | None,
                      cheap_judge: Judge | str | None, capture_content: bool | None) -> Settings:
    """The processor's keywords as its one options object: named, typed and bounded by the field table.

    The keywords the table types more narrowly are narrowed first: attribute names given as a list become the
    comma-separated string the table holds (a callable ``data_source`` and a ``Judge`` object are kept apart by
    the caller), and an unset ``capture_content`` follows the runtime (``configure()`` or the environment).

    Raises:
        TypeError: a keyword that is not a processor setting (as for any unknown keyword argument).
        ConfigurationError: a value out of its field's type or bounds (a ``ValueError``); names each one.
    """
    fields = Settings.model_fields
    unknown = [name for name in given if name not in fields or not fields[name].processor]
    if unknown:
        raise TypeError(f"ContextPrecisionProcessor() got an unexpected keyword argument {unknown[0]!r}")
    values = dict(given)
    if data_source is not None and not callable(data_source):
        values["data_source"] = Settings.data_source_setting(data_source)
    if segments is not None:
        values["segments"] = segments if isinstance(segments, str) else ",".join(segments)
    if isinstance(cheap_judge, str):
        values["cheap_judge"] = cheap_judge
    values["capture_content"] = _runtime.runtime().capture_content if capture_content is None else capture_content
    return Settings(**values)


class ContextPrecisionProcessor(SpanProcessor):
    """Scores a sampled share of retrievals in the background and emits spans, events and metrics.

    Add it to your tracer provider: ``provider.add_span_processor(ContextPrecisionProcessor(judge))``.

    Every setting marked for the processor in the settings reference (``sample_rate``, ``queue_size``,
    ``threshold``, ...) is a keyword argument of the same name, default and bounds; they are documented once, in
    that reference, which the documentation site generates from the field table. A value out of bounds raises
    ``ConfigurationError`` (a ``ValueError``) naming it; an unknown keyword raises ``TypeError``.

    Args:
        judge: a ``Judge`` (``LLMJudge``, ``LexicalJudge`` or your own) or a model string for ``LLMJudge``
            (``"lexical"`` for the offline judge).
        tracer_provider: where evaluation spans go (default: the global provider).
        meter_provider: where metrics go (default: the global provider).
        logger_provider: where ``gen_ai.evaluation.result`` events go (default: the global provider).
        export_processor: opt-in enrichment: give the processor that exports your spans (e.g. a
            ``BatchSpanProcessor``) here *instead of* adding it to the provider. Every span then passes through
            this processor; sampled target spans are held back until judged and exported with
            ``context_precision.score`` on them, or unenriched after ``hold_timeout_s``. Never lost.
        sinks: evaluation sinks (e.g. ``PhoenixSink``) each scored evaluation is also sent to, beside
            OpenTelemetry; each gets its own bounded queue and thread (the ``sink_*`` settings) and is counted as
            ``context_precision.sink.{sent,failed,dropped}``.
        data_source: the setting, or a callable of the span's attributes returning a name (``None`` keeps the
            conventional name), or attribute names as a list.
        segments: the setting, or its attribute names as a list. Refused when a label name collides with the
            library's own.
        cheap_judge: the setting (a model string or ``"lexical"``), or a ``Judge``.
        capture_content: the setting; unset, the runtime's (``configure()``'s, else the environment's).
        document_resolver: the setting (``module:function``), or the callable itself: ``(document_id, data_source)
            -> text`` (plain or async), for documents a retrieval names by id only. Run on the evaluator thread,
            never on the request path; see ``_processing/_resolver.py``.
        received_spans: the spans come from other processes over OTLP (``cp-observe serve``): a retrieval whose
            parent span never arrives within ``turn_timeout_s`` is skipped as ``parent_missing`` (its trace was
            split, most often across replicas not routed by trace id), not judged against its query.
        **options: the other processor settings.
    """

    __signature__ = TableSignature()

    def __init__(
        self,
        judge: Judge | str,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        logger_provider: Any | None = None,
        export_processor: SpanProcessor | None = None,
        sinks: Sequence[Sink] = (),
        data_source: DataSource = None,
        segments: Sequence[str] | str | None = None,
        cheap_judge: Judge | str | None = None,
        capture_content: bool | None = None,
        document_resolver: Callable[[str, str], Any] | str | None = None,
        received_spans: bool = False,
        **options: Any,
    ) -> None:
        if isinstance(document_resolver, str):
            options["document_resolver"] = document_resolver  # checked by the field; a callable is kept apart
        self.options = o = processor_options(options, data_source=data_source, segments=segments,
                                             cheap_judge=cheap_judge, capture_content=capture_content)
        self.judge = resolve_judge(judge) if isinstance(judge, str) else judge
        if not hasattr(self.judge, "judge"):
            raise ValueError("judge must implement the Judge protocol (an async judge(query, reference, contexts))")
        if cheap_judge is not None and not isinstance(cheap_judge, str):
            cheap: Judge | None = cheap_judge
        else:
            cheap = resolve_judge(o.cheap_judge) if o.cheap_judge else None
        if cheap is not None and not hasattr(cheap, "judge"):
            raise ValueError("cheap_judge must implement the Judge protocol, or be a model string")
        self.cascade = Cascade(cheap, o.llm_share) if cheap is not None else None
        if o.daily_budget_usd:  # an unpriced model would spend nothing against the budget (0 refuses every call)
            require_prices(self.judge, cheap)
        self.sampler = SourceRates(o.sample_rate) if wants_plan(o) else TraceIdRatio(o.sample_rate)
        runtime = _runtime.runtime()
        _runtime.register_sampler(id(self), self.sampler)
        if tracer_provider is not None and _decorators_have_no_provider(runtime):
            # Nothing else tells the decorators where to record: follow the provider this processor serves.
            _runtime.install(tracer_provider=tracer_provider)
        weakref.finalize(self, _runtime.register_sampler, id(self), None)
        self.shutdown_timeout_s = o.shutdown_timeout_s
        self._sinks = tuple(SinkRunner(sink, meter_provider=meter_provider, options=o) for sink in sinks)
        self._emitter = Emitter(
            options=o,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            logger_provider=logger_provider,
            queue_depth=_weak_depth(self),
            judge=self.judge,
            sinks=self._sinks,
            cheap_judge=cheap,
        )
        self._hold = HeldSpans(export_processor, options=o) if export_processor is not None else None
        self._evaluator = Evaluator(
            judge=self.judge,
            data_source=data_source_reader(data_source if callable(data_source) else o.data_source_attributes()),
            emitter=self._emitter,
            options=o,
            on_finished=self._release if self._hold is not None else None,
            on_tick=self._hold.expire if self._hold is not None else None,
            cascade=self.cascade,
            resolver=DocumentResolver(resolver, timeout_s=o.document_resolver_timeout_s,
                                      concurrency=o.document_resolver_concurrency)
            if (resolver := document_resolver if callable(document_resolver) else o.document_resolver) else None,
            received=received_spans,
        )
        if isinstance(self.sampler, SourceRates):  # a paced budget or an evaluation rate steers the sampler
            gates = self._evaluator.gates
            gates.plan = plan = RatePlan(self.sampler, gates.pacer, o,
                                         llm_share=o.llm_share if self.cascade is not None else None)
            plan.observe(meter_provider)
        self._flushing = threading.local()
        self._shutdown = False
        self._evaluator.start()  # now, not on the first request: submit never waits for a thread to start
        at_fork_method(self._after_fork)
        finish_at_exit(self)  # before the exporters stop, whichever order the processors were added in

    def _after_fork(self) -> None:
        self._evaluator.after_fork()
        if self._hold is not None:
            self._hold.after_fork()

    def _release(self, record: Record, outcome: str, result: ScoreResult | None) -> None:
        if self._hold is not None:
            self._hold.release((record.span_context.trace_id, record.span_context.span_id), result)

    # --- internal hooks of `cp-observe serve` (not public API) --------------------------------------------------------
    def _watch_finished(self, callback: Callable[[Record, str, ScoreResult | None], None]) -> None:
        """Call ``callback(record, outcome, result)`` on the evaluator thread for every finished target.

        ``serve``'s durable intake removes a target from its store here. Install it before the first span.
        """
        hold = self._release if self._hold is not None else None

        def finished(record: Record, outcome: str, result: ScoreResult | None) -> None:
            if hold is not None:
                hold(record, outcome, result)
            callback(record, outcome, result)

        self._evaluator.finish.on_finished = finished

    def _drop_unjudged(self, span: ReadableSpan, reason: str) -> None:
        """Count a target span sampled and dropped for ``reason`` without judging it (``serve``: ``expired``)."""
        self._on_end(span, drop=reason)

    # --- SpanProcessor ------------------------------------------------------------------------------------------------
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do at start (the decorators mark spans); in hold mode, pass the span on."""
        if self._hold is not None:
            try:
                self._hold.downstream.on_start(span, parent_context)
            except Exception as exc:  # noqa: BLE001 - the export processor failing must not reach the host
                report_internal_error("on_start", exc)

    def on_end(self, span: ReadableSpan) -> None:
        """Hand a sampled retrieval, agent or local root to the evaluator; O(1), never raises."""
        if self._hold is None:
            self._on_end(span)
            return
        held = False
        try:
            held = self._on_end(span, hold=True)
        finally:
            if not held:
                try:
                    self._hold.downstream.on_end(span)
                except Exception as exc:  # noqa: BLE001 - see on_start
                    report_internal_error("export on_end", exc)

    def _on_end(self, span: ReadableSpan, *, hold: bool = False, drop: str = "") -> bool:
        """Returns True when the span is held for enrichment (the caller then does not export it now)."""
        try:
            lookup = plain_attributes(span)
            kind = role(lookup, span)
            parent = span.parent
            local_root = parent is None or parent.is_remote
            if kind is None and not local_root:
                return False  # most spans: neither a target, an answer nor a root
            context = span.context
            if context is None:
                return False
            trace_id = context.trace_id
            reason = sampling_reason(trace_id, self.sampler, sample_key(lookup, kind == ROLE_RETRIEVER))
            marked = lookup.get(n.CP_SAMPLED) is True if lookup else False  # only these have a payload
            if reason is None or self._shutdown:
                if marked:  # the decorators kept its content for a judge that will not take it
                    PAYLOADS.take((trace_id, context.span_id))
                return False
            attributes = span.attributes  # (the SDK builds a read-only view per read: only for a span queued)
            if kind == ROLE_RETRIEVER:
                item_kind, target = "retriever", True
            elif kind == ROLE_ANSWER:
                item_kind, target = "agent", _answer_is_target(lookup)
            else:
                item_kind, target = "root", False
            payload = PAYLOADS.take((trace_id, context.span_id)) if marked and item_kind != "root" else None
            held = hold and target and self._hold is not None and self._hold.hold(span)
            # A retrieval's documents may be in its events (vector-DB spans); not read when the decorators kept the
            # contexts (the SDK copies the events on every read). The parent is read only for received spans.
            events = span.events if kind == ROLE_RETRIEVER and (payload is None or payload.contexts is None) else ()
            parent_id = parent.span_id if parent is not None and not local_root and kind == ROLE_RETRIEVER else 0
            ended = Ended(item_kind, context, span.start_time or 0, span.end_time or 0,  # positionally: cheaper
                          span.status.status_code is StatusCode.ERROR, local_root, attributes, payload, target, reason,
                          span.name, events, parent_id)
            if drop:
                self._evaluator.drop(ended, drop)  # serve's recovery: counted, never judged
            else:
                self._evaluator.submit(ended)
            return held
        except Exception as exc:  # noqa: BLE001 - on_end must never raise into the SDK or the host
            report_internal_error("on_end", exc)
            return False

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Judge everything queued, emit the evaluations, and flush the provider they went to."""
        if getattr(self._flushing, "active", False):
            return True  # re-entered through the provider's own force_flush below
        self._flushing.active = True
        deadline = time.monotonic() + timeout_millis / 1000
        try:
            done = self._evaluator.flush(timeout_millis / 1000)
            if self._hold is not None:
                self._hold.release_all()
                self._hold.downstream.force_flush(_millis_left(deadline))
            provider = self._emitter.tracer_provider
            flush = getattr(provider, "force_flush", None)
            left = _millis_left(deadline)
            if callable(flush) and left > 0:
                done = bool(flush(left)) and done
            for sink in self._sinks:  # after the provider: the spans the annotations name are exported first
                # Each queued evaluation is tried once; retries keep their backoff on the sink's thread.
                done = sink.flush(_millis_left(deadline) / 1000, retries=False) and done
            return done
        finally:
            self._flushing.active = False

    def shutdown(self) -> None:
        """Drain within ``shutdown_timeout_s``; what could not finish is counted as dropped (shutdown)."""
        self._shutdown_by(time.monotonic() + self.shutdown_timeout_s)

    def _exit_flush(self, deadline: float) -> None:
        """At interpreter exit, while thread pools still run: judge and emit what is queued, until ``deadline``."""
        if not self._shutdown:
            self._evaluator.flush(max(0.0, deadline - time.monotonic()))

    def _shutdown_by(self, deadline: float) -> None:
        """``shutdown`` with an absolute deadline (the exit hooks share one bound); logs what it dropped, once."""
        if self._shutdown:
            return
        _runtime.register_sampler(id(self), None)
        before = self._dropped_at_shutdown()
        self._evaluator.shutdown(max(0.0, deadline - time.monotonic()))  # targets ending meanwhile: dropped
        self._shutdown = True
        dropped = self._dropped_at_shutdown() - before
        if dropped:
            logger.warning("evaluations not finished within shutdown_timeout_s were dropped", dropped=dropped,
                           shutdown_timeout_s=self.shutdown_timeout_s)
        if self._hold is not None:
            self._hold.release_all()
            self._hold.downstream.shutdown()
        for sink in self._sinks:
            sink.shutdown(max(0.1, min(deadline - time.monotonic(), _SINK_SHUTDOWN_S)))

    def _dropped_at_shutdown(self) -> int:
        reasons = self._evaluator.accounting.snapshot(lambda: 0)["reasons"]
        return int(reasons.get(f"{n.OUTCOME_DROPPED}:shutdown", 0))

    # --- introspection ------------------------------------------------------------------------------------------------
    @property
    def queue_size(self) -> int:
        """Targets that may wait or run at once before new ones are dropped."""
        return self._evaluator.queue_size

    def depth(self) -> int:
        """Targets queued, waiting for their agent's answer, ready or being judged (never reads low)."""
        return self._evaluator.depth()

    def stats(self) -> dict[str, Any]:
        """Counts of targets: sampled, scored, failed, dropped, skipped, pending, and reasons.

        Once nothing is pending, ``sampled == scored + failed + dropped + skipped``. With a paced budget,
        ``budget`` shows the period's spend against its limit and its even-paced allowance; with a paced budget or
        ``max_evaluations_per_minute``, ``sampling`` shows each data source's rate in force and the traffic and
        evaluations a second it was chosen from.
        """
        stats = self._evaluator.accounting.snapshot(self._evaluator.depth)
        gates = self._evaluator.gates
        if gates.pacer is not None:
            stats["budget"] = gates.pacer.snapshot()
        if gates.plan is not None:
            stats["sampling"] = gates.plan.snapshot()
        return stats

    def sink_stats(self) -> dict[str, dict[str, int]]:
        """Per sink: evaluations offered, sent, failed, dropped and pending."""
        return {sink.name: sink.stats() for sink in self._sinks}

    @property
    def split_traces(self) -> int:
        """Traces whose spans arrived more than ``turn_timeout_s`` apart (after their retrievals were released)."""
        return self._evaluator.assembler.split_traces

    @property
    def circuit_state(self) -> str:
        """``closed``, ``open`` or ``half_open``."""
        return self._evaluator.gates.circuit.state
