"""The replay loop: stored traces through ``cp-observe serve``'s conversion into one ``ContextPrecisionProcessor``.

Per input request: ``spans_from_request`` (the function ``serve``'s front doors call), the time and data
source filters, then ``processor.on_end`` for each span in end-time order -- from there on it is the
in-process code: the trace-id ratio sampler, turn assembly, the judge, emission. Reading waits while the
processor holds ``queue_size`` items (the same occupancy bound ``serve``'s admission uses), so memory stays
bounded and nothing is dropped for want of room.

One deliberate difference from ``serve``: a span marked ``context_precision.sampled = true`` does not force
its trace. The mark records the decision of the live sample rate, so honouring it would make a replay at a
lower rate score every trace the live run sampled; a replay at rate r scores exactly the traces whose id
the ratio r picks, which is what live sampling at r scores.

Stopping early -- an unreadable input, ``max_evaluations`` reached, the budget spent, Ctrl-C -- stops the
reading only: what was fed is judged, emitted and counted, and the report says why reading stopped.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from cp_observe import _names as n
from cp_observe._config._settings import Settings
from cp_observe._errors import ConfigurationError
from cp_observe._judging._evaluate import judge_model_name
from cp_observe._traces._convert import spans_from_request
from cp_observe._traces._otlp_json import JsonLinesSpanExporter
from cp_observe._traces._source import ReplayInputError, Source
from cp_observe._types import Judge
from cp_observe._wiring._providers import (
    build_providers,
    build_span_exporter,
    judge_from_settings,
    processor_from_settings,
)
from cp_observe.replay._dry_run import DryRunJudge, token_prices
from cp_observe.replay._progress import Progress
from cp_observe.serve._admission import Admission, evaluator_queue_size

__all__ = ["DEFAULT_SERVICE_NAME", "ReplayOptions", "ReplayResult", "replay"]

DEFAULT_SERVICE_NAME = "cp-observe-replay"
_KINDS = frozenset({n.KIND_RETRIEVER, n.KIND_AGENT, n.KIND_RERANKER})
_OPERATIONS = {n.OPERATION_RETRIEVAL: n.KIND_RETRIEVER, n.OPERATION_INVOKE_AGENT: n.KIND_AGENT}
_WAIT_S = 0.005
_FLUSH_TIMEOUT_S = 24 * 3600.0


@dataclass(frozen=True)
class ReplayOptions:
    """What to replay and how; every ``None`` falls back to ``CP_OBSERVE_*``, then the library's default."""

    judge: str | None = None
    judge_api_base: str | None = None
    sample_rate: float | None = None
    threshold: float | None = None
    concurrency: int | None = None
    queue_size: int | None = None
    turn_timeout_s: float | None = None
    capture_content: bool | None = None
    since: datetime | None = None
    until: datetime | None = None
    data_sources: frozenset[str] | None = None
    max_evaluations: int | None = None
    budget_usd: float | None = None
    dry_run: bool = False
    output: Path | None = None  # OTLP/JSON lines of evaluations (and, with content capture on, the spans scored)
    otlp_endpoint: str | None = None  # evaluations over OTLP (without output: else OTEL_EXPORTER_OTLP_ENDPOINT)
    service_name: str | None = None
    segments: str | None = None  # span attributes whose values label the score series
    max_segment_values: int | None = None
    document_resolver: str | None = None  # module:function giving the text of documents named by id only

    def settings(self) -> Settings:
        """The library settings this replay runs with (explicit options, then ``CP_OBSERVE_*``, then defaults)."""
        fields = Settings.model_fields
        explicit = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name in fields}
        explicit["daily_budget_usd"] = self.budget_usd  # the one option named apart from its setting
        explicit.update(budget_pacing=False, allocation=False)  # a plain cap: stored traces replay faster than a period
        return Settings.resolve(explicit)


@dataclass
class ReplayResult:
    """What a replay read, fed, filtered and scored, why it stopped, and (dry run) what judging would cost."""

    inputs: list[str] = field(default_factory=list)
    requests: int = 0
    spans_read: int = 0
    spans_fed: int = 0
    rejected: int = 0  # spans with invalid ids, refused by the conversion (first reason in `rejected_error`)
    rejected_error: str = ""
    outside_time: int = 0
    other_data_source: int = 0
    targets_fed: int = 0  # target spans of sampled traces handed to the processor
    over_max_evaluations: int = 0
    stopped: str = ""  # why reading stopped early ("" when every input was read to the end)
    error: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    dry_run: bool = False
    judge_model: str = ""
    sample_rate: float = 1.0
    estimated_calls: int = 0
    estimated_prompt_tokens: int = 0
    estimated_completion_tokens: int = 0
    estimated_cost_usd: float | None = None
    output_lines: int = 0
    elapsed_s: float = 0.0


def replay(sources: Sequence[Source], options: ReplayOptions | None = None, *, judge: Judge | None = None,
           progress: Progress | None = None, tracer_provider: TracerProvider | None = None) -> ReplayResult:
    """Replay ``sources`` in order through the live scoring path; returns what happened.

    Args:
        sources: trace files or query APIs (``TraceFile``, ``JaegerQuery``, ``PhoenixProject``).
        options: the replay's options.
        judge: a ``Judge`` object instead of the one named by the settings (tests, embedding).
        progress: where progress goes (default: stderr, a bar on a terminal, lines otherwise).
        tracer_provider: where evaluation spans go instead of ``options.output`` / OTLP (tests, embedding).

    Raises:
        ConfigurationError: an option is invalid (nothing was read).
    """
    options = options or ReplayOptions()
    settings = options.settings()
    real_judge = judge if judge is not None else (None if options.dry_run else judge_from_settings(settings))
    model = judge_model_name(real_judge) if real_judge is not None else settings.judge
    dry = DryRunJudge(model, token_prices(model)) if options.dry_run else None
    chosen: Judge = dry if dry is not None else real_judge  # type: ignore[assignment]
    result = ReplayResult(inputs=[s.name for s in sources], dry_run=options.dry_run, judge_model=model,
                          sample_rate=settings.sample_rate)
    pipeline = _Pipeline(settings, options, tracer_provider)
    processor = processor_from_settings(
        chosen, settings, tracer_provider=pipeline.tracer_provider, meter_provider=pipeline.meter_provider,
        logger_provider=pipeline.logger_provider, queue_size=evaluator_queue_size(settings.queue_size),
    )
    admission = Admission(processor, settings.queue_size)
    progress = progress if progress is not None else Progress()
    started = time.monotonic()
    feeder = _Feeder(processor, admission, queue_size=settings.queue_size, options=options, result=result,
                     scored_spans=pipeline.scored_spans)
    try:
        for source in sources:
            if result.stopped:
                break
            try:
                for batch in source.batches():
                    feeder.feed(spans_from_request(batch.request), batch.where)
                    progress.update(source.name, source.unit, source.position, source.total,
                                    spans=result.spans_read, stats=processor.stats())
                    if result.stopped:
                        break
            except ReplayInputError as exc:
                result.error = str(exc)
                result.stopped = "input error"
            progress.update(source.name, source.unit, source.position, source.total, spans=result.spans_read,
                            stats=processor.stats(), force=True)
    except KeyboardInterrupt:
        result.stopped = "interrupted"
    finally:
        processor.force_flush(int(_FLUSH_TIMEOUT_S * 1000))
        processor.shutdown()
        pipeline.close()
        progress.close()
    result.stats = processor.stats()
    result.output_lines = pipeline.lines()
    result.elapsed_s = time.monotonic() - started
    if dry is not None:
        result.estimated_calls = dry.calls
        result.estimated_prompt_tokens = dry.prompt_tokens
        result.estimated_completion_tokens = dry.completion_tokens
        result.estimated_cost_usd = dry.cost_usd
    return result


@dataclass
class _Feeder:
    """Filters one converted request and hands it to the processor, waiting for room first."""

    processor: Any
    admission: Admission
    queue_size: int
    options: ReplayOptions
    result: ReplayResult
    scored_spans: JsonLinesSpanExporter | None

    def __post_init__(self) -> None:
        since, until = self.options.since, self.options.until
        self.since_ns = int(since.timestamp() * 1e9) if since is not None else None
        self.until_ns = int(until.timestamp() * 1e9) if until is not None else None

    def feed(self, converted: Any, where: str) -> None:
        result, options = self.result, self.options
        result.requests += 1
        result.spans_read += len(converted.spans) + converted.rejected
        if converted.rejected:
            result.rejected += converted.rejected
            result.rejected_error = result.rejected_error or f"{where}: {converted.error}"
        sampler = self.processor.sampler
        kept: list[ReadableSpan] = []
        targets: list[ReadableSpan] = []
        for span in converted.spans:
            end = span.end_time or 0
            if (self.since_ns is not None and end < self.since_ns) or (
                    self.until_ns is not None and end >= self.until_ns):
                result.outside_time += 1
                continue
            kind = _kind(span)
            target = kind is not None and _is_target(span, kind)
            # A reranker is named after the retrieval it reranks only in assembly: the data-source filter passes it.
            if (target and kind != n.KIND_RERANKER and options.data_sources is not None
                    and _source_of(span, str(kind)) not in options.data_sources):
                result.other_data_source += 1  # an agent that is no target is kept: it carries the answer
                continue
            context = span.context
            if target and context is not None and sampler(context.trace_id):
                cap = options.max_evaluations
                if cap is not None and result.targets_fed + len(targets) >= cap:
                    result.over_max_evaluations += 1
                    result.stopped = "max evaluations reached"
                    continue
                targets.append(span)
            kept.append(span)
        for start in range(0, len(kept), self.queue_size):
            chunk = kept[start:start + self.queue_size]
            self._wait_for_room(self.admission.items(chunk))
            on_end = self.processor.on_end
            for span in chunk:
                on_end(span)
        result.spans_fed += len(kept)
        result.targets_fed += len(targets)
        if targets and self.scored_spans is not None:
            self.scored_spans.export(targets)  # the scored spans travel with their evaluations, for the report
        if options.budget_usd is not None and self.processor.stats()["reasons"].get("skipped:budget_exhausted"):
            result.stopped = "budget spent"

    def _wait_for_room(self, items: int) -> None:
        if not items:
            return
        while True:
            occupancy = self.admission.occupancy()
            if occupancy == 0 or occupancy + items < self.queue_size:
                return
            time.sleep(_WAIT_S)


def _kind(span: ReadableSpan) -> str | None:
    attributes = span.attributes
    if not attributes:
        return None
    kind = attributes.get(n.OPENINFERENCE_SPAN_KIND)
    if kind in _KINDS:
        return str(kind)
    operation = attributes.get(n.GEN_AI_OPERATION_NAME)
    return _OPERATIONS.get(operation) if isinstance(operation, str) else None


def _is_target(span: ReadableSpan, kind: str) -> bool:
    """Retrievals, rerankers that reorder, agents that carry their own contexts, as the processor decides."""
    if kind == n.KIND_RERANKER:
        return not Admission.reranks_nothing(span)
    return kind == n.KIND_RETRIEVER or (span.attributes or {}).get(n.CP_CONTEXT_COUNT) is not None


def _source_of(span: ReadableSpan, kind: str) -> str:
    """The data source id of a retrieval, the agent name of an agent (the label its evaluation carries)."""
    key = n.GEN_AI_DATA_SOURCE_ID if kind == n.KIND_RETRIEVER else n.GEN_AI_AGENT_NAME
    value = (span.attributes or {}).get(key)
    return str(value) if value is not None else "unknown"


class _Pipeline:
    """Where evaluations go: a JSON-lines file, OTLP, a given provider, or nowhere (dry run)."""

    def __init__(self, settings: Settings, options: ReplayOptions, tracer_provider: TracerProvider | None) -> None:
        from cp_observe.serve._service import service_resource

        self.scored_spans: JsonLinesSpanExporter | None = None
        self._file: JsonLinesSpanExporter | None = None
        export = not options.dry_run and tracer_provider is None
        # OTLP when asked for explicitly, or when there is no file and the environment names an endpoint.
        otlp = export and (options.otlp_endpoint is not None or options.output is None)
        file_processors = []
        if export and options.output is not None:
            self._file = JsonLinesSpanExporter(options.output)
            # Synchronous: a file takes every evaluation, none is dropped from a full export queue.
            file_processors.append(SimpleSpanProcessor(self._file))
            # The scored spans go next to their evaluations (query, contexts, time: the report reads them),
            # unless content capture is off: then the file holds the evaluations only.
            self.scored_spans = self._file if settings.capture_content else None
        exporter = build_span_exporter(settings) if otlp else None
        if otlp and exporter is None:
            raise ConfigurationError("evaluations have nowhere to go: give --output FILE or --otlp-endpoint "
                                     "(or set OTEL_EXPORTER_OTLP_ENDPOINT), or use --dry-run")
        self.providers = build_providers(
            settings.model_copy(update={"metrics_port": None}),
            service_resource(settings.service_name or DEFAULT_SERVICE_NAME),
            tracer_provider=tracer_provider, span_exporter=exporter, otlp=otlp, span_processors=file_processors,
            export_queue_size=65_536, sampler=ALWAYS_ON,
        )
        self.tracer_provider = self.providers.tracer_provider
        self.meter_provider = self.providers.meter_provider
        self.logger_provider = self.providers.logger_provider

    def lines(self) -> int:
        return self._file.lines if self._file is not None else 0

    def close(self) -> None:
        self.providers.close(30.0)
