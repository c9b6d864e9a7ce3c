"""Emission of one evaluation: the evaluation span, the ``gen_ai.evaluation.result`` log record, metrics.

Runs on the evaluator thread, never on the request path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry._logs import get_logger_provider as global_logger_provider
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.metrics import get_meter_provider as global_meter_provider
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, Status, StatusCode, TracerProvider

from cp_observe import _internal
from cp_observe import _names as n
from cp_observe._emission._sinks import EvaluationRecord, SinkRunner, recorded_documents
from cp_observe._judging._identity import JudgeIdentity, judge_identity
from cp_observe._types import ScoreResult

__all__ = ["Emitter", "Target"]

_SCOPE = "cp_observe"
_MAX_REASON = 500


@dataclass(slots=True)
class Target:
    """The span being scored and the labels its evaluation carries."""

    span_context: SpanContext
    data_source: str
    agent_name: str | None
    reference: str
    sampling_reason: str
    attributes: Any = None  # the scored span's attributes (the sinks read which documents it records)
    stage: str = n.STAGE_RETRIEVAL  # issue 23: the ranking stage scored (a label, and CP_STAGE on span and event)


class Emitter:
    """Creates the instruments once and emits each evaluation's span, log record and metrics."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None,
        meter_provider: MeterProvider | None,
        logger_provider: Any | None,
        threshold: float,
        capture_content: bool,
        queue_depth: Any,
        judge: Any = None,
        sinks: Sequence[SinkRunner] = (),
    ) -> None:
        self._tracer_provider = tracer_provider
        self.sinks = tuple(sinks)
        self._tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(_SCOPE)
        self._logger = (logger_provider or global_logger_provider()).get_logger(_SCOPE)
        meter = (meter_provider or global_meter_provider()).get_meter(_SCOPE)
        self.threshold = threshold
        self.capture_content = capture_content
        self.identity = judge_identity(judge) if judge is not None else JudgeIdentity(n.JUDGE_KIND_CUSTOM, "none")
        self._score = meter.create_histogram(
            n.METRIC_SCORE,
            unit="1",
            description="Average precision of sampled retrievals (context precision).",
            explicit_bucket_boundaries_advisory=n.SCORE_BUCKETS,
        )
        # Sum of squared scores, with the histogram's _sum and _count: the exact variance of any window, so the
        # alert rules can state a standard error (the buckets would only bound it). See deploy/README.md.
        self._squares = meter.create_counter(
            n.METRIC_SCORE_SQUARES, unit="1", description="Sum of squared average precision of sampled retrievals."
        )
        self._evaluations = meter.create_counter(
            n.METRIC_EVALUATIONS, unit="{evaluation}", description="Sampled evaluation targets by outcome."
        )
        self._sampled = meter.create_counter(
            n.METRIC_SAMPLED, unit="{evaluation}", description="Evaluation targets marked sampled."
        )
        self._verdicts = meter.create_counter(
            n.METRIC_VERDICTS, unit="{verdict}", description="Per-context verdicts by relevance."
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
        self._cost = meter.create_counter(n.METRIC_JUDGE_COST, unit="{USD}", description="Judge cost in US dollars.")
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
    def labels(target: Target) -> dict[str, str]:
        """Metric attributes of a target: data source, evaluation name, stage, and agent when known."""
        labels = {n.GEN_AI_DATA_SOURCE_ID: target.data_source, n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME,
                  n.STAGE: target.stage}
        if target.agent_name:
            labels[n.GEN_AI_AGENT_NAME] = target.agent_name
        return labels

    @staticmethod
    def _on_span(labels: Mapping[str, str]) -> dict[str, str]:
        """The metric labels as span attributes: the stage is ``context_precision.stage`` there, not ``stage``."""
        attributes = {k: v for k, v in labels.items() if k != n.STAGE}
        attributes[n.CP_STAGE] = labels[n.STAGE]
        return attributes

    def judge_attributes(self, model: str) -> dict[str, str]:
        """The judge's identity as attributes: model, prompt version and kind."""
        return {n.CP_JUDGE_MODEL: model, n.CP_JUDGE_PROMPT_VERSION: self.identity.prompt_version,
                n.CP_JUDGE_KIND: self.identity.kind}

    def count(self, outcome: str, reason: str, labels: Mapping[str, str]) -> None:
        """Count one target's outcome."""
        self._evaluations.add(1, {**labels, n.OUTCOME: outcome, n.REASON: reason})

    def count_sampled(self, labels: Mapping[str, str]) -> None:
        """Count one target marked sampled."""
        self._sampled.add(1, labels)

    def scored(self, target: Target, result: ScoreResult, *, start_ns: int, end_ns: int, model: str) -> None:
        """Emit a successful evaluation."""
        labels = self.labels(target)
        label = n.LABEL_PASS if result.score >= self.threshold else n.LABEL_FAIL
        explanation = self._explanation(result)  # built once: the span, the log record and the sinks share it
        attributes: dict[str, Any] = {
            n.OPENINFERENCE_SPAN_KIND: n.KIND_EVALUATOR,
            n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME,
            n.GEN_AI_EVALUATION_SCORE_VALUE: result.score,
            n.GEN_AI_EVALUATION_SCORE_LABEL: label,
            n.GEN_AI_EVALUATION_EXPLANATION: explanation,
            n.CP_AVERAGE_PRECISION: result.average_precision,
            n.CP_VERDICTS: [v.relevant for v in result.verdicts],
            n.CP_REFERENCE: target.reference,
            **self.judge_attributes(model),
            n.CP_JUDGE_CALLS: result.usage.calls,
            n.CP_CONTEXT_COUNT: len(result.verdicts),
            n.CP_SAMPLING_REASON: target.sampling_reason,
            n.OI_EVALUATION_NAME: n.EVALUATION_NAME,
            n.OI_EVALUATION_SCORE: result.score,
            n.OI_EVALUATION_LABEL: label,
            n.OI_EVALUATION_EXPLANATION: explanation,
            **self._on_span(labels),
            **_rerank_attributes(result),
        }
        if result.truncated:
            attributes[n.CP_TRUNCATED_CONTEXTS] = list(result.truncated)
        if self.capture_content:
            # Judges' reasons may quote the content, so they travel only when content capture is on.
            attributes[n.CP_REASONS] = [v.reason[:_MAX_REASON] for v in result.verdicts]
        span = self._start_span(target, start_ns, attributes)
        span.end(end_time=end_ns)
        self._log(target, label, result, model, explanation)
        # Recorded in the evaluation span's context: the SDK's trace-based exemplar filter then attaches its
        # trace and span id, which lead from a score bucket to the evaluated trace. The judge's identity is a
        # label here (one value per deployed judge, so low cardinality), not on the outcome counters.
        in_span = trace.set_span_in_context(span)
        score_labels = {**labels, **self.judge_attributes(model)}
        ap = result.average_precision
        self._score.record(ap, score_labels, context=in_span)
        self._squares.add(ap * ap, score_labels, context=in_span)
        if result.rerank is not None:
            self._lift.record(result.rerank.lift, score_labels, context=in_span)
        self.count(n.OUTCOME_SCORED, "ok", labels)
        relevant = sum(1 for v in result.verdicts if v.relevant)
        if relevant:
            self._verdicts.add(relevant, {**labels, n.RELEVANT: "true"})
        if len(result.verdicts) - relevant:
            self._verdicts.add(len(result.verdicts) - relevant, {**labels, n.RELEVANT: "false"})
        self._judge_metrics(model, prompt=result.usage.prompt_tokens, completion=result.usage.completion_tokens,
                            cost=result.cost_usd, seconds=(end_ns - start_ns) / 1e9, outcome=n.OUTCOME_SCORED)
        if self.sinks:  # last: whatever a sink does, the span, event and metrics above are already out
            self._to_sinks(target, span, label, result, model, explanation=explanation)

    def failed(self, target: Target, error: BaseException, reason: str, *, start_ns: int, end_ns: int,
               model: str) -> None:
        """Emit a failed evaluation: an ERROR evaluation span and the failure count; no score."""
        labels = self.labels(target)
        attributes: dict[str, Any] = {
            n.OPENINFERENCE_SPAN_KIND: n.KIND_EVALUATOR,
            n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME,
            **self.judge_attributes(model),
            n.CP_REFERENCE: target.reference,
            n.CP_SAMPLING_REASON: target.sampling_reason,
            n.ERROR_TYPE: type(error).__name__,
            **self._on_span(labels),
        }
        calls = getattr(error, "calls", None)
        if isinstance(calls, int):
            attributes[n.CP_JUDGE_CALLS] = calls
        span = self._start_span(target, start_ns, attributes)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {reason}"))
        span.end(end_time=end_ns)
        self.count(n.OUTCOME_FAILED, reason, labels)
        self._judge_metrics(model, prompt=0, completion=0, cost=None, seconds=(end_ns - start_ns) / 1e9,
                            outcome=n.OUTCOME_FAILED)

    def _start_span(self, target: Target, start_ns: int, attributes: dict[str, Any]) -> Any:
        parent = trace.set_span_in_context(NonRecordingSpan(target.span_context))
        return self._tracer.start_span(
            n.EVALUATION_SPAN_NAME,
            context=parent,
            links=[Link(target.span_context, {"link.type": "scored_span"})],
            attributes=attributes,
            start_time=start_ns,
        )

    def _to_sinks(self, target: Target, span: Any, label: str, result: ScoreResult, model: str, *,
                  explanation: str) -> None:
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
            annotator_kind=self.identity.annotator,
            prompt_version=self.identity.declared_prompt_version,
            data_source=target.data_source,
            agent_name=target.agent_name,
            reference=target.reference,
        )
        for sink in self.sinks:
            sink.offer(record)

    def _explanation(self, result: ScoreResult) -> str:
        # An LLM-written reason can quote content; with capture off the verdict-built reason is used.
        if self.capture_content:
            return result.reason
        from cp_observe._judging._reason import build_reason

        return build_reason(result.verdicts, result.score, result.scale)

    def _log(self, target: Target, label: str, result: ScoreResult, model: str, explanation: str) -> None:
        attributes: dict[str, Any] = {
            n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME,
            n.GEN_AI_EVALUATION_SCORE_VALUE: result.score,
            n.GEN_AI_EVALUATION_SCORE_LABEL: label,
            n.GEN_AI_EVALUATION_EXPLANATION: explanation,
            n.CP_VERDICTS: [v.relevant for v in result.verdicts],
            n.CP_REFERENCE: target.reference,
            n.GEN_AI_DATA_SOURCE_ID: target.data_source,
            n.CP_STAGE: target.stage,
            **_rerank_attributes(result),
            **self.judge_attributes(model),
        }
        context = trace.set_span_in_context(NonRecordingSpan(target.span_context))
        self._logger.emit(
            LogRecord(
                context=context,
                severity_number=SeverityNumber.INFO,
                event_name=n.GEN_AI_EVALUATION_RESULT_EVENT,
                body=None,
                attributes=attributes,
            )
        )

    def _judge_metrics(self, model: str, *, prompt: int, completion: int, cost: float | None, seconds: float,
                       outcome: str) -> None:
        self._duration.record(seconds, {n.GEN_AI_REQUEST_MODEL: model, n.OUTCOME: outcome})
        if prompt:
            self._tokens.record(prompt, {n.GEN_AI_REQUEST_MODEL: model, n.GEN_AI_TOKEN_TYPE: "input"})
        if completion:
            self._tokens.record(completion, {n.GEN_AI_REQUEST_MODEL: model, n.GEN_AI_TOKEN_TYPE: "output"})
        if cost:
            self._cost.add(cost, {n.GEN_AI_REQUEST_MODEL: model})


def _rerank_attributes(result: ScoreResult) -> dict[str, Any]:
    """Issue 23: what a reranker did to the retrieval it reordered (nothing for a retrieval's own evaluation)."""
    rerank = result.rerank
    if rerank is None:
        return {}
    return {n.CP_RERANK_AP_BEFORE: rerank.average_precision_before, n.CP_RERANK_LIFT: rerank.lift,
            n.CP_RERANK_DROPPED_RELEVANT: rerank.dropped_relevant}


def _observe_errors(_options: CallbackOptions) -> list[Observation]:
    """One point per ``(kind, site)`` of ``_internal.error_counts()``, process-wide."""
    points = []
    for key, count in _internal.error_counts().items():
        kind, _, site = key.partition(":")  # kinds never contain ":"; a site may
        points.append(Observation(count, {n.ERROR_KIND: kind, n.ERROR_SITE: site}))
    return points
