"""Emission of one evaluation: the evaluation span, the ``gen_ai.evaluation.result`` log record, metrics.

Runs on the evaluator thread, never on the request path.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import LogRecord, NoOpLogger, SeverityNumber
from opentelemetry._logs import get_logger_provider as global_logger_provider
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.metrics import get_meter_provider as global_meter_provider
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, Status, StatusCode, TracerProvider

from cp_observe import _internal
from cp_observe import _names as n
from cp_observe._config._settings import Settings
from cp_observe._emission._segments import SegmentValues
from cp_observe._emission._sinks import EvaluationRecord, SinkRunner, recorded_documents
from cp_observe._emission._sums import Key, key, sums_for
from cp_observe._judging._calibration import needs_label
from cp_observe._judging._evaluate import judge_model_name
from cp_observe._judging._identity import JudgeIdentity, judge_identity, same_family
from cp_observe._judging._prices import billed_usd
from cp_observe._types import CascadeResult, ScoreResult, Usage

__all__ = ["Emitter", "Target"]

_SCOPE = "cp_observe"
_MAX_REASON = 500
_MAX_SERIES = 1024  # label sets whose metric attributes are kept built; past it the oldest is rebuilt on use
_LINK_ATTRIBUTES = MappingProxyType({"link.type": "scored_span"})


class _Series:
    """The metric attribute dicts of one label set and judge model, built once and reused for every evaluation.

    The SDK copies nothing it is given here (it hashes the items), so one dict per series serves every call.
    A plain class with slots, not a dataclass: building a dataclass costs about a millisecond at import.
    """

    __slots__ = ("irrelevant", "irrelevant_key", "judge", "labels_key", "relevant", "relevant_key", "score",
                 "score_key", "scored", "scored_key")

    def __init__(self, *, score: Mapping[str, str], scored: Mapping[str, str], relevant: Mapping[str, str],
                 irrelevant: Mapping[str, str], judge: Mapping[str, str], score_key: Key, scored_key: Key,
                 relevant_key: Key, irrelevant_key: Key, labels_key: Key) -> None:
        self.score = score  # labels + the judge's identity: score and squares
        self.scored = scored  # labels + outcome scored, reason ok
        self.relevant = relevant
        self.irrelevant = irrelevant
        self.judge = judge  # model, prompt version, kind (span and log attributes)
        # The same sets as the counters' keys in the observable sums (_sums.py): score (squares), scored,
        # relevant, irrelevant, and the base labels (cascade sums add the term).
        self.score_key = score_key
        self.scored_key = scored_key
        self.relevant_key = relevant_key
        self.irrelevant_key = irrelevant_key
        self.labels_key = labels_key


@dataclass(slots=True)
class Target:
    """The span being scored and the labels its evaluation carries."""

    span_context: SpanContext
    data_source: str
    agent_name: str | None
    reference: str
    sampling_reason: str
    attributes: Any = None  # the scored span's attributes (the sinks read which documents it records)
    segments: tuple[tuple[str, str], ...] = ()  # (label name, value) per configured segment (SegmentValues)
    stage: str = n.STAGE_RETRIEVAL  # the ranking stage scored (a label, and CP_STAGE on span and event)
    top_k: int | None = None  # the k the retrieval asked for (``_conventions.top_k_of``), when it says
    returned: int | None = None  # how many documents it returned
    reranker_model: str | None = None  # the model a reranker names (``reranker.model_name``)


class Emitter:
    """Creates the instruments once and emits each evaluation's span, log record and metrics.

    Of the processor's options it reads ``threshold``, ``capture_content``, ``calibration_rate``, ``segments`` and
    ``max_segment_values`` (default: the field table's defaults).
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None,
        meter_provider: MeterProvider | None,
        logger_provider: Any | None,
        queue_depth: Any,
        options: Settings | None = None,
        judge: Any = None,
        sinks: Sequence[SinkRunner] = (),
        cheap_judge: Any = None,
    ) -> None:
        options = options if options is not None else Settings()
        segments = options.segment_labels()
        self._tracer_provider = tracer_provider
        self.sinks = tuple(sinks)
        self._tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(_SCOPE)
        self._logger = (logger_provider or global_logger_provider()).get_logger(_SCOPE)
        meter = (meter_provider or global_meter_provider()).get_meter(_SCOPE)
        self.threshold = options.threshold
        self.capture_content = options.capture_content
        self.calibration_rate = options.calibration_rate
        self.identity = judge_identity(judge) if judge is not None else JudgeIdentity(n.JUDGE_KIND_CUSTOM, "none")
        self._llm_cost_key = key({n.GEN_AI_REQUEST_MODEL: judge_model_name(judge) if judge is not None else "none"})
        # The cascade's cheap judge, when there is one: its scores carry its own identity.
        self.cheap_identity = judge_identity(cheap_judge) if cheap_judge is not None else self.identity
        # Keyed by the full label tuple (every label ``labels()`` gives, whatever is added there) and the model.
        self._series: OrderedDict[tuple[Any, ...], _Series] = OrderedDict()
        self._model_series: dict[str, tuple[Any, ...]] = {}  # per model: duration and token labels, cost key
        # A log pipeline nobody configured (an explicit no-op provider, or the SDK disabled): no record is built.
        self._logs_on = not isinstance(self._logger, NoOpLogger)
        self._score = meter.create_histogram(
            n.METRIC_SCORE,
            unit="1",
            description="Average precision of sampled retrievals (context precision).",
            explicit_bucket_boundaries_advisory=n.SCORE_BUCKETS,
        )
        # Squares (sum of squared scores, with the histogram's _sum and _count: the exact variance of any window,
        # so the alert rules can state a standard error; see deploy/README.md), the cascade's PPI sums (split
        # by term: the recording rules turn them into the PPI++ MAP), evaluations by outcome, verdicts by
        # relevance and judge cost are our own sums, exported by observable counters (_sums.py).
        self._sums = sums_for(meter, _SUMMED)
        self._sampled = meter.create_counter(
            n.METRIC_SAMPLED, unit="{evaluation}", description="Evaluation targets marked sampled."
        )
        self._duration = meter.create_histogram(
            n.METRIC_JUDGE_DURATION,
            unit="s",
            description="Duration of one judgement (all judge calls of one evaluation).",
            explicit_bucket_boundaries_advisory=n.DURATION_BUCKETS,
        )
        self._tokens = meter.create_histogram(
            n.METRIC_TOKEN_USAGE, unit="{token}", description="Tokens used by the judge per evaluation."
        )
        self._split = meter.create_counter(
            n.METRIC_TRACES_SPLIT, unit="{trace}",
            description="Traces whose spans arrived more than turn_timeout_s apart (route replicas by trace id).",
        )
        self.segments: SegmentValues | None = None
        if segments:
            overflow = meter.create_counter(
                n.METRIC_SEGMENT_OVERFLOW, unit="{evaluation}",
                description="Evaluations whose segment value became 'other' (too many distinct values), by segment.",
            )
            self.segments = SegmentValues(segments, options.max_segment_values,
                                          on_overflow=lambda label: overflow.add(1, {n.SEGMENT: label}))
        self._lift = meter.create_histogram(
            n.METRIC_RERANK_LIFT,
            unit="1",
            description="AP of a reranker's output order minus AP of its input order, per reranked retrieval.",
            explicit_bucket_boundaries_advisory=n.LIFT_BUCKETS,
        )

        def observe_depth(_: CallbackOptions) -> list[Observation]:
            return [Observation(int(queue_depth()))]

        meter.create_observable_gauge(
            n.METRIC_QUEUE_DEPTH,
            callbacks=[observe_depth],
            unit="{evaluation}",
            description="Evaluations waiting or running.",
        )
        # Read on the metric reader's collection (its export thread, or a /metrics scrape), never on the
        # request path: the boundary in _internal only counts, this exports what it counted.
        meter.create_observable_counter(
            n.METRIC_INTERNAL_ERRORS,
            callbacks=[_observe_errors],
            unit="{error}",
            description="Failures cp-observe contained (its own, a user callback's, a host object's), by site.",
        )

    @property
    def tracer_provider(self) -> TracerProvider | None:
        """The provider evaluation spans go to (``None``: the global one)."""
        return self._tracer_provider

    @staticmethod
    def dimensions(target: Target) -> dict[str, str]:
        """A target's dimensions, on its evaluation span and its metrics: data source, evaluation name, agent."""
        labels = {n.GEN_AI_DATA_SOURCE_ID: target.data_source, n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME}
        if target.agent_name:
            labels[n.GEN_AI_AGENT_NAME] = target.agent_name
        return labels

    @staticmethod
    def base_labels(target: Target) -> dict[str, str]:
        """Metric attributes every series of a target carries: its dimensions and its ranking stage."""
        labels = Emitter.dimensions(target)
        labels[n.STAGE] = target.stage
        return labels

    @staticmethod
    def labels(target: Target) -> dict[str, str]:
        """Metric attributes of a target: its base labels, then one label per segment (when segments are set)."""
        labels = Emitter.base_labels(target)
        if target.segments:
            labels.update(target.segments)
        return labels

    def judge_attributes(self, model: str, identity: JudgeIdentity | None = None) -> dict[str, str]:
        """The judge's identity as attributes: model, prompt version and kind (default: the main judge's)."""
        identity = identity or self.identity
        return {n.CP_JUDGE_MODEL: model, n.CP_JUDGE_PROMPT_VERSION: identity.prompt_version,
                n.CP_JUDGE_KIND: identity.kind}

    def series(self, labels: Mapping[str, str], model: str, identity: JudgeIdentity | None = None) -> _Series:
        """The metric attribute dicts of ``labels``, ``model`` and the judge's identity, built on first use (LRU)."""
        identity = identity or self.identity
        cached = (*labels.items(), model, identity)
        found = self._series.get(cached)
        if found is not None:
            self._series.move_to_end(cached)
            return found
        judge = self.judge_attributes(model, identity)
        score = {**labels, **judge}
        scored = {**labels, n.OUTCOME: n.OUTCOME_SCORED, n.REASON: "ok"}
        relevant = {**labels, n.RELEVANT: "true"}
        irrelevant = {**labels, n.RELEVANT: "false"}
        found = _Series(score=score, scored=scored, relevant=relevant, irrelevant=irrelevant, judge=judge,
                        score_key=key(score), scored_key=key(scored), relevant_key=key(relevant),
                        irrelevant_key=key(irrelevant), labels_key=key(labels))
        self._series[cached] = found
        if len(self._series) > _MAX_SERIES:
            self._series.popitem(last=False)
        return found

    def count(self, outcome: str, reason: str, labels: Mapping[str, str]) -> None:
        """Count one target's outcome."""
        self._sums.add(((n.METRIC_EVALUATIONS, key({**labels, n.OUTCOME: outcome, n.REASON: reason}), 1),))

    def count_split(self) -> None:
        """Count one trace whose spans arrived more than ``turn_timeout_s`` apart."""
        self._split.add(1)

    def count_sampled(self, labels: Mapping[str, str]) -> None:
        """Count one target marked sampled."""
        self._sampled.add(1, labels)

    def scored(self, target: Target, result: ScoreResult, *, start_ns: int, end_ns: int, model: str,
               cascade: CascadeResult | None = None) -> None:
        """Emit a successful evaluation; in the cascade, ``result`` is ``cascade.reported`` and both scores go out."""
        labels = self.labels(target)
        identity = self.identity if cascade is None or cascade.llm is not None else self.cheap_identity
        series = self.series(labels, model, identity)
        label = n.LABEL_PASS if result.score >= self.threshold else n.LABEL_FAIL
        explanation = self._explanation(result)  # built once: the span, the log record and the sinks share it
        verdicts = [v.relevant for v in result.verdicts]  # one list: the span and the log record share it
        attributes: dict[str, Any] = {
            n.OPENINFERENCE_SPAN_KIND: n.KIND_EVALUATOR,
            n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME,
            n.GEN_AI_EVALUATION_SCORE_VALUE: result.score,
            n.GEN_AI_EVALUATION_SCORE_LABEL: label,
            n.GEN_AI_EVALUATION_EXPLANATION: explanation,
            n.CP_AVERAGE_PRECISION: result.average_precision,
            n.CP_VERDICTS: verdicts,
            n.CP_REFERENCE: target.reference,
            **series.judge,
            n.CP_JUDGE_CALLS: result.usage.calls,
            n.CP_CONTEXT_COUNT: len(result.verdicts),
            n.CP_SAMPLING_REASON: target.sampling_reason,
            n.OI_EVALUATION_NAME: n.EVALUATION_NAME,
            n.OI_EVALUATION_SCORE: result.score,
            n.OI_EVALUATION_LABEL: label,
            n.OI_EVALUATION_EXPLANATION: explanation,
            **self.dimensions(target),
            n.CP_STAGE: target.stage,
            **_rerank_attributes(result),
        }
        if result.usage.prompt_tokens:  # the judge reported its usage: its prompt-cache use, hits and misses alike
            attributes[n.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = result.usage.cache_read_tokens
            attributes[n.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] = result.usage.cache_creation_tokens
        attributes.update(_segment_attributes(target))
        attributes.update(_retrieval_attributes(target, model))
        if result.truncated:
            attributes[n.CP_TRUNCATED_CONTEXTS] = list(result.truncated)
        context = target.span_context
        needs = self.calibration_rate > 0 and needs_label(context.trace_id, context.span_id, self.calibration_rate)
        if needs:
            attributes[n.CP_NEEDS_LABEL] = True
        if self.capture_content:
            # Judges' reasons may quote the content, so they travel only when content capture is on.
            attributes[n.CP_REASONS] = [v.reason[:_MAX_REASON] for v in result.verdicts]
        if cascade is not None:
            attributes.update(self._cascade_attributes(cascade))
        parent = trace.set_span_in_context(NonRecordingSpan(target.span_context))  # the span's and the log's
        span = self._start_span(target, start_ns, attributes, parent)
        span.end(end_time=end_ns)
        if self._logs_on:
            self._log(target, label, result, explanation, verdicts=verdicts, judge=series.judge, context=parent)
        # Recorded in the evaluation span's context: the SDK's trace-based exemplar filter then attaches its
        # trace and span id, which lead from a score bucket to the evaluated trace. The judge's identity is a
        # label here (one value per deployed judge, so low cardinality), not on the outcome counters.
        in_span = trace.set_span_in_context(span)
        ap = result.average_precision
        self._score.record(ap, series.score, context=in_span)
        # The counters' additions, in the order the synchronous counters had them, go in under one lock.
        sums: list[tuple[str, Key, float]] = [(n.METRIC_SCORE_SQUARES, series.score_key, ap * ap)]
        if result.rerank is not None:
            self._lift.record(result.rerank.lift, series.score, context=in_span)
        if cascade is not None:
            self._add_cascade_sums(cascade, series.labels_key, sums)
        sums.append((n.METRIC_EVALUATIONS, series.scored_key, 1))  # count(OUTCOME_SCORED, "ok", labels)
        relevant = verdicts.count(True)
        if relevant:
            sums.append((n.METRIC_VERDICTS, series.relevant_key, relevant))
        if len(verdicts) - relevant:
            sums.append((n.METRIC_VERDICTS, series.irrelevant_key, len(verdicts) - relevant))
        if cascade is None:
            self._judge_metrics(model, result.usage, result.cost_usd, (end_ns - start_ns) / 1e9, sums=sums)
        else:  # each judge that ran, with its own time, tokens and cost
            self._cascade_judge_metrics(cascade, sums)
        self._sums.add(sums)
        if self.sinks:  # last: whatever a sink does, the span, event and metrics above are already out
            self._to_sinks(target, span, label, result, model, explanation=explanation, identity=identity,
                           needs_label=needs)

    def _cascade_attributes(self, cascade: CascadeResult) -> dict[str, Any]:
        """Both judges' scores with their identities, and what happened to the LLM judgement."""
        cheap = cascade.cheap
        attributes: dict[str, Any] = {
            n.CP_CASCADE_CHEAP_SCORE: cheap.score,
            n.CP_CASCADE_CHEAP_AP: cheap.average_precision,
            n.CP_CASCADE_CHEAP_VERDICTS: [v.relevant for v in cheap.verdicts],
            n.CP_CASCADE_CHEAP_JUDGE_MODEL: cheap.judge_model,
            n.CP_CASCADE_CHEAP_JUDGE_KIND: self.cheap_identity.kind,
            n.CP_CASCADE_LLM: cascade.llm_status,
        }
        if cascade.llm is not None:
            attributes[n.CP_CASCADE_LLM_SCORE] = cascade.llm.score
            attributes[n.CP_CASCADE_LLM_AP] = cascade.llm.average_precision
            attributes[n.CP_CASCADE_LLM_JUDGE_MODEL] = cascade.llm.judge_model
            attributes[n.CP_CASCADE_LLM_JUDGE_KIND] = self.identity.kind
        return attributes

    @staticmethod
    def _add_cascade_sums(cascade: CascadeResult, labels: Key, sums: list[tuple[str, Key, float]]) -> None:
        """Add this evaluation to the PPI sums: f (cheap AP) always, y (LLM AP) and the cross terms when judged."""
        f = cascade.cheap.average_precision
        terms = [(n.TERM_COUNT, 1.0), (n.TERM_F, f), (n.TERM_F2, f * f)]
        if cascade.llm is not None:
            y = cascade.llm.average_precision
            terms += [(n.TERM_N, 1.0), (n.TERM_Y, y), (n.TERM_Y2, y * y), (n.TERM_F_SUB, f), (n.TERM_F2_SUB, f * f),
                      (n.TERM_FY, f * y)]
        for term, value in terms:
            sums.append((n.METRIC_CASCADE_SUMS, labels | {(n.TERM, term)}, value))

    def _cascade_judge_metrics(self, cascade: CascadeResult, sums: list[tuple[str, Key, float]]) -> None:
        cheap, llm = cascade.cheap, cascade.llm
        self._judge_metrics(cheap.judge_model, cheap.usage, cheap.cost_usd, cascade.cheap_seconds, sums=sums)
        if llm is None and cascade.llm_failed_cost_usd:  # a failed LLM judgement's billed replies
            sums.append((n.METRIC_JUDGE_COST, self._llm_cost_key, cascade.llm_failed_cost_usd))
        if llm is not None:
            self._judge_metrics(llm.judge_model, llm.usage, llm.cost_usd, cascade.llm_seconds, sums=sums)

    def failed(self, target: Target, error: BaseException, reason: str, *, start_ns: int, end_ns: int,
               model: str, cheap: bool = False) -> None:
        """Emit a failed evaluation: an ERROR evaluation span and the failure count; no score.

        ``cheap``: it was the cascade's cheap judge that failed (its identity goes on the span).
        """
        labels = self.labels(target)
        attributes: dict[str, Any] = {
            n.OPENINFERENCE_SPAN_KIND: n.KIND_EVALUATOR,
            n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME,
            **self.judge_attributes(model, self.cheap_identity if cheap else None),
            n.CP_REFERENCE: target.reference,
            n.CP_SAMPLING_REASON: target.sampling_reason,
            n.ERROR_TYPE: type(error).__name__,
            **self.dimensions(target),
            n.CP_STAGE: target.stage,
        }
        attributes.update(_segment_attributes(target))
        calls = getattr(error, "calls", None)
        if isinstance(calls, int):
            attributes[n.CP_JUDGE_CALLS] = calls
        span = self._start_span(target, start_ns, attributes)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {reason}"))
        span.end(end_time=end_ns)
        self.count(n.OUTCOME_FAILED, reason, labels)
        # The replies a failed judgement received were billed all the same (JudgeError.cost_usd).
        self._judge_metrics(model, Usage(), billed_usd(error), (end_ns - start_ns) / 1e9, outcome=n.OUTCOME_FAILED)

    def _start_span(self, target: Target, start_ns: int, attributes: dict[str, Any], parent: Any = None) -> Any:
        if parent is None:
            parent = trace.set_span_in_context(NonRecordingSpan(target.span_context))
        return self._tracer.start_span(
            n.EVALUATION_SPAN_NAME,
            context=parent,
            links=[Link(target.span_context, _LINK_ATTRIBUTES)],
            attributes=attributes,
            start_time=start_ns,
        )

    def _to_sinks(self, target: Target, span: Any, label: str, result: ScoreResult, model: str, *,
                  explanation: str, identity: JudgeIdentity, needs_label: bool = False) -> None:
        """Offer the evaluation to every sink (a bounded append each; the sinks' threads do the sending)."""
        record = EvaluationRecord(
            trace_id=target.span_context.trace_id,
            span_id=target.span_context.span_id,
            evaluation_span_id=span.get_span_context().span_id,
            score=result.score,
            label=label,
            explanation=explanation,
            average_precision=result.average_precision,
            verdicts=tuple(v.relevant for v in result.verdicts),
            reasons=tuple(v.reason[:_MAX_REASON] for v in result.verdicts) if self.capture_content else None,
            documents=recorded_documents(target.attributes),
            judge_model=model,
            annotator_kind=identity.annotator,
            prompt_version=identity.declared_prompt_version,
            data_source=target.data_source,
            agent_name=target.agent_name,
            reference=target.reference,
            needs_label=needs_label,
            judge_kind=self.identity.kind,
        )
        for sink in self.sinks:
            sink.offer(record)

    def _explanation(self, result: ScoreResult) -> str:
        # An LLM-written reason can quote content; with capture off the verdict-built reason is used.
        if self.capture_content:
            return result.reason
        from cp_observe._judging._reason import build_reason

        return build_reason(result.verdicts, result.score, result.scale)

    def _log(self, target: Target, label: str, result: ScoreResult, explanation: str, *, verdicts: list[bool],
             judge: Mapping[str, str], context: Any) -> None:
        attributes: dict[str, Any] = {
            n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME,
            n.GEN_AI_EVALUATION_SCORE_VALUE: result.score,
            n.GEN_AI_EVALUATION_SCORE_LABEL: label,
            n.GEN_AI_EVALUATION_EXPLANATION: explanation,
            n.CP_VERDICTS: verdicts,
            n.CP_REFERENCE: target.reference,
            n.GEN_AI_DATA_SOURCE_ID: target.data_source,
            **judge,
            **_segment_attributes(target),
            n.CP_STAGE: target.stage,
            **_rerank_attributes(result),
        }
        self._logger.emit(
            LogRecord(
                context=context,
                severity_number=SeverityNumber.INFO,
                event_name=n.GEN_AI_EVALUATION_RESULT_EVENT,
                body=None,
                attributes=attributes,
            )
        )

    def _judge_metrics(self, model: str, usage: Usage, cost: float | None, seconds: float, *,
                       outcome: str = n.OUTCOME_SCORED, sums: list[tuple[str, Key, float]] | None = None) -> None:
        """Duration and tokens (histograms), and the cost: added to ``sums`` (the caller adds them), or now.

        Cache reads and writes are recorded under their own token types as well; both are part of ``input``.
        """
        built = self._model_series.get(model)
        if built is None:
            if len(self._model_series) >= _MAX_SERIES:
                self._model_series.clear()
            m = n.GEN_AI_REQUEST_MODEL
            built = self._model_series[model] = (
                {m: model, n.OUTCOME: n.OUTCOME_SCORED}, {m: model, n.OUTCOME: n.OUTCOME_FAILED},
                {m: model, n.GEN_AI_TOKEN_TYPE: "input"}, {m: model, n.GEN_AI_TOKEN_TYPE: "output"},
                key({m: model}), {m: model, n.GEN_AI_TOKEN_TYPE: n.TOKEN_TYPE_CACHE_READ},
                {m: model, n.GEN_AI_TOKEN_TYPE: n.TOKEN_TYPE_CACHE_CREATION})
        scored, failed, tokens_in, tokens_out, cost_key, tokens_read, tokens_written = built
        duration = scored if outcome == n.OUTCOME_SCORED else failed if outcome == n.OUTCOME_FAILED else None
        self._duration.record(seconds, duration or {n.GEN_AI_REQUEST_MODEL: model, n.OUTCOME: outcome})
        counts = (usage.prompt_tokens, usage.completion_tokens, usage.cache_read_tokens, usage.cache_creation_tokens)
        for count, attributes in zip(counts, (tokens_in, tokens_out, tokens_read, tokens_written), strict=True):
            if count:
                self._tokens.record(count, attributes)
        if cost:
            if sums is None:
                self._sums.add(((n.METRIC_JUDGE_COST, cost_key, cost),))
            else:
                sums.append((n.METRIC_JUDGE_COST, cost_key, cost))


# The counters kept as sums (_sums.py): name, unit, description.
_SUMMED = (
    (n.METRIC_SCORE_SQUARES, "1", "Sum of squared average precision of sampled retrievals."),
    (n.METRIC_CASCADE_SUMS, "1", "Cheap and LLM judges' sums for prediction-powered MAP."),
    (n.METRIC_EVALUATIONS, "{evaluation}", "Sampled evaluation targets by outcome."),
    (n.METRIC_VERDICTS, "{verdict}", "Per-context verdicts by relevance."),
    (n.METRIC_JUDGE_COST, "{USD}", "Judge cost in US dollars."),
)


def _segment_attributes(target: Target) -> dict[str, str]:
    """The evaluation span's and event's segment attributes (``CP_SEGMENT_PREFIX + label``), whatever capture says."""
    return {n.CP_SEGMENT_PREFIX + label: value for label, value in target.segments}


def _retrieval_attributes(target: Target, model: str) -> dict[str, Any]:
    """The k asked for beside the documents returned, and whether a reranker's model is the judge's kind."""
    attributes: dict[str, Any] = {}
    if target.top_k is not None:
        attributes[n.CP_RETRIEVAL_TOP_K] = target.top_k
    if target.returned is not None:
        attributes[n.CP_RETRIEVAL_RETURNED] = target.returned
    if target.reranker_model is not None and target.stage == n.STAGE_RERANK:
        attributes[n.CP_RERANK_JUDGE_IS_RERANKER] = same_family(model, target.reranker_model)
    return attributes


def _rerank_attributes(result: ScoreResult) -> dict[str, Any]:
    """What a reranker did to the retrieval it reordered (nothing for a retrieval's own evaluation)."""
    rerank = result.rerank
    if rerank is None:
        return {}
    return {n.CP_RERANK_AP_BEFORE: rerank.average_precision_before, n.CP_RERANK_LIFT: rerank.lift,
            n.CP_RERANK_DROPPED_RELEVANT: rerank.dropped_relevant}


def _observe_errors(_options: CallbackOptions) -> list[Observation]:
    """One point per ``(kind, site)`` of ``_internal.error_counts()``, process-wide."""
    points = []
    for error, count in _internal.error_counts().items():
        kind, _, site = error.partition(":")  # kinds never contain ":"; a site may
        points.append(Observation(count, {n.ERROR_KIND: kind, n.ERROR_SITE: site}))
    return points
