"""Every span attribute, event, metric and environment variable name cp-observe uses.

This is the one module that spells them. Other modules, the collector configs, the dashboards and the
alert rules refer to these names; the tests check that they agree.

The span names and attributes follow both the OpenTelemetry GenAI semantic conventions (``gen_ai.*``)
and OpenInference (``openinference.span.kind``, ``input.value``, ``retrieval.documents.*``,
``evaluations.*``), so Jaeger, Tempo and Phoenix all show the spans well.
"""

from __future__ import annotations

from typing import Final

# --- span names -------------------------------------------------------------------------------------------------------
RETRIEVAL_SPAN_PREFIX: Final = "retrieval"
AGENT_SPAN_PREFIX: Final = "invoke_agent"
EVALUATION_SPAN_NAME: Final = "evaluation context_precision"

# --- OpenTelemetry GenAI conventions ----------------------------------------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
OPERATION_RETRIEVAL: Final = "retrieval"
OPERATION_INVOKE_AGENT: Final = "invoke_agent"
GEN_AI_DATA_SOURCE_ID: Final = "gen_ai.data_source.id"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_RETRIEVAL_QUERY_TEXT: Final = "gen_ai.retrieval.query.text"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"
# The judge's prompt-cache use: evaluation span attributes (GenAI convention names), and the token histogram's
# gen_ai.token.type values for the same counts (each a part of its "input" tokens).
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
TOKEN_TYPE_CACHE_READ: Final = "cache_read"
TOKEN_TYPE_CACHE_CREATION: Final = "cache_creation"
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
GEN_AI_EVALUATION_RESULT_EVENT: Final = "gen_ai.evaluation.result"
ERROR_TYPE: Final = "error.type"
# Read from other instrumentations (see _conventions): GenAI operations, outputs and retrieved documents.
OPERATION_CHAT: Final = "chat"
OPERATION_TEXT_COMPLETION: Final = "text_completion"
OPERATION_GENERATE_CONTENT: Final = "generate_content"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_RETRIEVAL_DOCUMENTS: Final = "gen_ai.retrieval.documents"
#: The number of documents a retrieval asked for (recommended); written on cp-observe's retrieval spans when the
#: decorated function has an argument named ``k``, ``top_k`` or ``limit``, read from any retrieval span.
GEN_AI_RETRIEVAL_TOP_K: Final = "gen_ai.retrieval.top_k"
#: What older GenAI instrumentations (opentelemetry-util-genai before 1.2) wrote for it; newer conventions keep
#: this name for decoding, so it is read as the requested k on retrieval spans only.
GEN_AI_REQUEST_TOP_K: Final = "gen_ai.request.top_k"

EVALUATION_NAME: Final = "context_precision"
LABEL_PASS: Final = "pass"
LABEL_FAIL: Final = "fail"

# --- OpenInference ----------------------------------------------------------------------------------------------------
OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
KIND_RETRIEVER: Final = "RETRIEVER"
KIND_AGENT: Final = "AGENT"
KIND_EVALUATOR: Final = "EVALUATOR"
INPUT_VALUE: Final = "input.value"
OUTPUT_VALUE: Final = "output.value"
OUTPUT_MIME_TYPE: Final = "output.mime_type"  # the answer rule parses JSON output values
RETRIEVAL_DOCUMENTS: Final = "retrieval.documents"
DOCUMENT_FIELDS: Final = ("id", "content", "score", "metadata")
KIND_RERANKER: Final = "RERANKER"
KIND_LLM: Final = "LLM"
INPUT_MIME_TYPE: Final = "input.mime_type"
MIME_JSON: Final = "application/json"
LLM_OUTPUT_MESSAGES: Final = "llm.output_messages"
RERANKER_QUERY: Final = "reranker.query"
RERANKER_INPUT_DOCUMENTS: Final = "reranker.input_documents"
RERANKER_OUTPUT_DOCUMENTS: Final = "reranker.output_documents"
#: The reranking model (``@reranker(model=...)`` writes it): compared with the judge's (``_judging/_identity.py``).
RERANKER_MODEL_NAME: Final = "reranker.model_name"
RERANKER_TOP_K: Final = "reranker.top_k"
OI_EVALUATION_NAME: Final = "evaluations.0.evaluation.name"
OI_EVALUATION_SCORE: Final = "evaluations.0.evaluation.score"
OI_EVALUATION_LABEL: Final = "evaluations.0.evaluation.label"
OI_EVALUATION_EXPLANATION: Final = "evaluations.0.evaluation.explanation"


def document_attribute(index: int, field: str, prefix: str = RETRIEVAL_DOCUMENTS) -> str:
    """Return the OpenInference attribute for one field of the document at ``index`` (retrieved by default).

    ``prefix`` is ``RETRIEVAL_DOCUMENTS``, ``RERANKER_INPUT_DOCUMENTS`` or ``RERANKER_OUTPUT_DOCUMENTS``.
    """
    return f"{prefix}.{index}.document.{field}"


def output_message_attribute(index: int, field: str) -> str:
    """Return the OpenInference attribute for one field (``role``, ``content``) of an LLM's output message."""
    return f"{LLM_OUTPUT_MESSAGES}.{index}.message.{field}"


# --- OpenLLMetry (Traceloop) and its vector-DB instrumentations -------------------------------------------------------
OPERATION_VECTOR_DB_RETRIEVE: Final = "vector_db_retrieve"
TRACELOOP_ENTITY_NAME: Final = "traceloop.entity.name"
TRACELOOP_ENTITY_INPUT: Final = "traceloop.entity.input"
TRACELOOP_ENTITY_OUTPUT: Final = "traceloop.entity.output"
DB_SYSTEM: Final = "db.system"
DB_QUERY_TEXT: Final = "db.query.text"
DB_QUERY_RESULT_EVENT: Final = "db.query.result"
DB_QUERY_RESULT_ID: Final = "db.query.result.id"
DB_QUERY_RESULT_SCORE: Final = "db.query.result.score"
DB_QUERY_RESULT_DOCUMENT: Final = "db.query.result.document"


# --- cp-observe's own attributes --------------------------------------------------------------------------------------
CP_SAMPLED: Final = "context_precision.sampled"
CP_SAMPLING_REASON: Final = "context_precision.sampling.reason"
CP_CONTEXT_COUNT: Final = "context_precision.context.count"
#: On the evaluation: the k the retrieval asked for (``gen_ai.retrieval.top_k``, or ``gen_ai.request.top_k`` on a
#: retrieval span), beside ``CP_RETRIEVAL_RETURNED``, the number of documents it returned.
CP_RETRIEVAL_TOP_K: Final = "context_precision.retrieval.top_k"
CP_RETRIEVAL_RETURNED: Final = "context_precision.retrieval.returned"
CP_CONTENT_CAPTURED: Final = "context_precision.content.captured"
CP_VERDICTS: Final = "context_precision.verdicts"
CP_REASONS: Final = "context_precision.reasons"
CP_REFERENCE: Final = "context_precision.reference"
CP_JUDGE_MODEL: Final = "context_precision.judge.model"
CP_AVERAGE_PRECISION: Final = "context_precision.average_precision"
CP_TRUNCATED_CONTEXTS: Final = "context_precision.truncated_contexts"
CP_JUDGE_CALLS: Final = "context_precision.judge.calls"
CP_SCORE: Final = "context_precision.score"
CP_PARTIAL: Final = "context_precision.partial"
#: A callback the user gave (query, context_extractor, output, redact) raised: the skip reason.
CP_USER_ERROR: Final = "context_precision.user_error"
CP_ANSWER_SOURCE: Final = "context_precision.reference.source"
# The judge's identity. The OpenTelemetry GenAI evaluation attributes (gen_ai.evaluation.name,
# .score.value, .score.label, .explanation) have no judge model, prompt version or kind, so these live in the
# project's namespace, next to CP_JUDGE_MODEL.
CP_JUDGE_PROMPT_VERSION: Final = "context_precision.judge.prompt_version"
CP_JUDGE_KIND: Final = "context_precision.judge.kind"
JUDGE_KIND_LLM: Final = "llm"
JUDGE_KIND_LEXICAL: Final = "lexical"
JUDGE_KIND_CUSTOM: Final = "custom"

# Segments (the user's own span attributes named by the ``segments`` setting). On the evaluation span
# and its event each segment is ``CP_SEGMENT_PREFIX + <label name>``; on the metric series the label name itself
# (the attribute name with every character but letters, digits and ``_`` replaced by ``_``).
CP_SEGMENT_PREFIX: Final = "context_precision.segment."
SEGMENT_NONE: Final = "none"
SEGMENT_OTHER: Final = "other"
# Which ranking stage an evaluation scored, and what a reranker did to the retrieval it reordered.
CP_STAGE: Final = "context_precision.stage"
STAGE_RETRIEVAL: Final = "retrieval"
STAGE_RERANK: Final = "rerank"
CP_RERANK_AP_BEFORE: Final = "context_precision.rerank.average_precision_before"
CP_RERANK_LIFT: Final = "context_precision.rerank.lift"
CP_RERANK_DROPPED_RELEVANT: Final = "context_precision.rerank.dropped_relevant"
#: True when the reranker's model is the judge's model or of its family (``_judging/_identity.py``,
#: ``same_family``): LLM judges favour LLM rerankers, most of all their own model, so the lift may be inflated.
CP_RERANK_JUDGE_IS_RERANKER: Final = "context_precision.rerank.judge_is_reranker"
# The @reranker decorator's span name prefix ("rerank {name}").
RERANK_SPAN_PREFIX: Final = "rerank"
# A scored retrieval drawn (uniformly, at ``calibration_rate``) for a person to label.
CP_NEEDS_LABEL: Final = "context_precision.needs_label"
# The cheap-plus-LLM cascade. Every scored retrieval carries the cheap judge's score and identity; a
# uniform ``llm_share`` of them also the LLM judge's (the score the evaluation reports where present). What
# happened to the LLM judgement: CASCADE_LLM_JUDGED, CASCADE_LLM_NOT_DRAWN, a gate's skip reason, or
# "failed:<reason>".
CP_CASCADE_CHEAP_SCORE: Final = "context_precision.cascade.cheap.score"
CP_CASCADE_CHEAP_AP: Final = "context_precision.cascade.cheap.average_precision"
CP_CASCADE_CHEAP_VERDICTS: Final = "context_precision.cascade.cheap.verdicts"
CP_CASCADE_CHEAP_JUDGE_MODEL: Final = "context_precision.cascade.cheap.judge.model"
CP_CASCADE_CHEAP_JUDGE_KIND: Final = "context_precision.cascade.cheap.judge.kind"
CP_CASCADE_LLM: Final = "context_precision.cascade.llm"
CP_CASCADE_LLM_SCORE: Final = "context_precision.cascade.llm.score"
CP_CASCADE_LLM_AP: Final = "context_precision.cascade.llm.average_precision"
CP_CASCADE_LLM_JUDGE_MODEL: Final = "context_precision.cascade.llm.judge.model"
CP_CASCADE_LLM_JUDGE_KIND: Final = "context_precision.cascade.llm.judge.kind"
CASCADE_LLM_JUDGED: Final = "judged"
CASCADE_LLM_NOT_DRAWN: Final = "not_drawn"

REFERENCE_OUTPUT: Final = "output"
REFERENCE_QUERY: Final = "query"

# --- metrics (OpenTelemetry name -> Prometheus series) ----------------------------------------------------------------
#: histogram, unit "1" -> context_precision_score_{bucket,sum,count}
METRIC_SCORE: Final = "context_precision.score"
# With the histogram's _sum and _count it gives each window's exact variance, so its standard error.
#: counter of squared average precision, labels as the score histogram -> context_precision_score_squares_total
METRIC_SCORE_SQUARES: Final = "context_precision.score.squares"
#: counter by outcome -> context_precision_evaluations_total
METRIC_EVALUATIONS: Final = "context_precision.evaluations"
#: counter of evaluation targets marked sampled -> context_precision_sampled_total
METRIC_SAMPLED: Final = "context_precision.sampled"
#: histogram of judge latency in seconds -> context_precision_judge_duration_seconds_*
METRIC_JUDGE_DURATION: Final = "context_precision.judge.duration"
#: GenAI convention histogram of tokens -> gen_ai_client_token_usage_*
METRIC_TOKEN_USAGE: Final = "gen_ai.client.token.usage"
#: counter of judge cost in US dollars -> context_precision_judge_cost_usd_total
METRIC_JUDGE_COST: Final = "context_precision.judge.cost_usd"
#: counter of per-context verdicts by relevant=true|false -> context_precision_verdicts_total
METRIC_VERDICTS: Final = "context_precision.verdicts"
#: up-down counter of evaluations waiting -> context_precision_queue_depth
METRIC_QUEUE_DEPTH: Final = "context_precision.queue.depth"
# What _internal.error_counts() counts (failures contained, never raised into the host), process-wide.
#: observable counter of contained failures by kind and site -> context_precision_internal_errors_total
METRIC_INTERNAL_ERRORS: Final = "context_precision.internal_errors"
# Judge against people, set by ``cp-observe calibrate --push`` (a scheduled run, not the
# emitter), by data source and judge identity (model, prompt version, kind).
#: gauge, share of labelled contexts where the judge's verdict equals the person's -> context_precision_judge_agreement
METRIC_JUDGE_AGREEMENT: Final = "context_precision.judge.agreement"
#: gauge, labelled contexts that agreement is computed over -> context_precision_judge_agreement_labels
METRIC_JUDGE_AGREEMENT_LABELS: Final = "context_precision.judge.agreement.labels"
# Evaluations whose segment value was folded into SEGMENT_OTHER (the segment's distinct values were full).
#: counter by segment (its label name) -> context_precision_segment_overflow_total
METRIC_SEGMENT_OVERFLOW: Final = "context_precision.segment.overflow"
# A trace whose spans arrived more than turn_timeout_s apart: another of its spans came after its retrievals were
# released at their deadline (in serve: batches far apart, or a trace split across replicas not routed by trace id).
#: counter of split traces -> context_precision_traces_split_total
METRIC_TRACES_SPLIT: Final = "context_precision.traces.split"
# The sums PPI++ needs, per data source, one counter split by ``term`` (f the cheap judge's average
# precision, y the LLM judge's): TERM_COUNT, TERM_F, TERM_F2 over every cascade evaluation; TERM_N, TERM_Y,
# TERM_Y2, TERM_F_SUB, TERM_F2_SUB, TERM_FY over the LLM-judged subsample. The recording rules turn them into
# the PPI++ MAP and its standard error (deploy/prometheus/rules).
#: counter of the cascade's PPI sums by term -> context_precision_cascade_sums_total
METRIC_CASCADE_SUMS: Final = "context_precision.cascade.sums"
# Per reranked retrieval, AP of the reranker's output order minus AP of its input order.
#: histogram, unit "1", labels as the score histogram (stage="rerank") -> context_precision_rerank_lift_*
METRIC_RERANK_LIFT: Final = "context_precision.rerank.lift"
# The paced budget and the per-data-source sample rates (_processing/_rate_plan.py): what the sampler holds in force
# now, and the period's spend against its limit and against the paced allowance.
#: gauge, the share of a data source's traces sampled now, by data source -> context_precision_sample_rate
METRIC_SAMPLE_RATE: Final = "context_precision.sample_rate"
#: gauge, this process's budget for the current period (its replica share) -> context_precision_budget_limit_usd
METRIC_BUDGET_LIMIT: Final = "context_precision.budget.limit_usd"
#: gauge, judge cost counted in the current period -> context_precision_budget_spent_usd
METRIC_BUDGET_SPENT: Final = "context_precision.budget.spent_usd"
#: gauge, what an even pace would have spent by now in the period -> context_precision_budget_allowance_usd
METRIC_BUDGET_ALLOWANCE: Final = "context_precision.budget.allowance_usd"
#: Skip reason of a judge call refused because this pacing window's spend reached its burst allowance.
SKIP_BUDGET_PACED: Final = "budget_paced"
#: Skip reason of a judge call refused because the period's budget is spent (the hard cap).
SKIP_BUDGET_EXHAUSTED: Final = "budget_exhausted"
#: The sampling key of a span whose data source is not known at span start (agents, roots): the highest rate.
SAMPLE_KEY_ANY: Final = ""

# `cp-observe serve`'s own instruments (SERVE_ prefix: not part of the library's METRIC_* set).
#: counter of OTLP requests by protocol and result -> context_precision_serve_requests_total
SERVE_METRIC_REQUESTS: Final = "context_precision.serve.requests"
#: counter of spans received by protocol -> context_precision_serve_spans_total
SERVE_METRIC_SPANS: Final = "context_precision.serve.spans"
#: gauge, the admission's occupancy bound -> context_precision_serve_occupancy
SERVE_METRIC_OCCUPANCY: Final = "context_precision.serve.occupancy"
#: counter of requests refused before admission, by protocol and reason -> context_precision_serve_refusals_total
SERVE_METRIC_REFUSALS: Final = "context_precision.serve.refusals"
#: counter of targets a restarted serve resumed from its durable store -> context_precision_serve_recovered_total
SERVE_METRIC_RECOVERED: Final = "context_precision.serve.recovered"
PROTOCOL: Final = "protocol"
RESULT: Final = "result"

#: OpenMetrics exemplar labels on context_precision_score buckets (Grafana's exemplarTraceIdDestinations name).
EXEMPLAR_TRACE_ID: Final = "trace_id"
EXEMPLAR_SPAN_ID: Final = "span_id"

SCORE_BUCKETS: Final = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
# Buckets of the rerank lift (AP after minus AP before, in [-1, 1]).
LIFT_BUCKETS: Final = (-0.5, -0.25, -0.1, -0.05, 0.0, 0.05, 0.1, 0.25, 0.5, 1.0)
DURATION_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# Metric attribute (label) names.
OUTCOME: Final = "outcome"
REASON: Final = "reason"
RELEVANT: Final = "relevant"
#: The ranking stage an evaluation scored (STAGE_RETRIEVAL | STAGE_RERANK).
STAGE: Final = "stage"
#: On METRIC_SEGMENT_OVERFLOW, the segment (its label name) whose values overflowed.
SEGMENT: Final = "segment"
OUTCOME_SCORED: Final = "scored"
OUTCOME_FAILED: Final = "failed"
OUTCOME_DROPPED: Final = "dropped"
OUTCOME_SKIPPED: Final = "skipped"
OUTCOMES: Final = (OUTCOME_SCORED, OUTCOME_FAILED, OUTCOME_DROPPED, OUTCOME_SKIPPED)
#: Skip reasons of a retrieval whose documents carry ids but no text (the newest GenAI conventions' documents):
#: no document resolver is set, or the resolver raised, overran ``document_resolver_timeout_s``, or gave no text.
SKIP_NO_DOCUMENT_TEXT: Final = "no_document_text"
SKIP_RESOLVER_ERROR: Final = "resolver_error"
SKIP_RESOLVER_TIMEOUT: Final = "resolver_timeout"
SKIP_RESOLVER_NO_TEXT: Final = "resolver_no_text"
#: On METRIC_INTERNAL_ERRORS: whose failure (internal | user | host, as _internal tells them apart) and where.
ERROR_KIND: Final = "kind"
ERROR_SITE: Final = "site"
#: On METRIC_CASCADE_SUMS, which sum a point adds to (count, f, f2 over all; n, y, y2, f_sub, f2_sub,
#: fy over the LLM-judged subsample).
TERM: Final = "term"
TERM_COUNT: Final = "count"
TERM_F: Final = "f"
TERM_F2: Final = "f2"
TERM_N: Final = "n"
TERM_Y: Final = "y"
TERM_Y2: Final = "y2"
TERM_F_SUB: Final = "f_sub"
TERM_F2_SUB: Final = "f2_sub"
TERM_FY: Final = "fy"
#: The attribute set the emitter's summed counters (_emission/_sums.py) report past their bound of
#: attribute sets, as the OpenTelemetry SDK's cardinality limit names it.
OTEL_METRIC_OVERFLOW: Final = "otel.metric.overflow"

# --- environment variables --------------------------------------------------------------------------------------------
ENV_PREFIX: Final = "CP_OBSERVE_"
#: The OpenTelemetry GenAI switch for content capture; "false" / "NO_CONTENT" turn capture off.
ENV_OTEL_CAPTURE_CONTENT: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: The OpenTelemetry SDK's choice of span exporters (comma-separated: otlp, console, none), honoured when
#: cp-observe creates the tracer provider; "console" prints every span, evaluations included, to stdout.
ENV_OTEL_TRACES_EXPORTER: Final = "OTEL_TRACES_EXPORTER"
#: litellm fetches a remote cost map at import unless this is "True".
ENV_LITELLM_LOCAL_COST_MAP: Final = "LITELLM_LOCAL_MODEL_COST_MAP"
#: litellm fetches its Anthropic beta-headers config from GitHub on an Anthropic call unless this is "True".
ENV_LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS: Final = "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS"
#: "true" makes litellm use its bundled copy of everything it would fetch on its own (catalogs, checks,
#: tokenizers, the cost map, the beta headers) instead of requesting it.
ENV_LITELLM_OFFLINE_MODE: Final = "LITELLM_OFFLINE_MODE"

# --- evaluation sinks -------------------------------------------------------------------------------------------------
# Counters by sink (SINK_ prefix: created by the sink runner, not part of the emitter's METRIC_* set).
#: evaluations a sink delivered -> context_precision_sink_sent_total
SINK_METRIC_SENT: Final = "context_precision.sink.sent"
#: evaluations a sink gave up on (refused, or retries exhausted), by reason -> context_precision_sink_failed_total
SINK_METRIC_FAILED: Final = "context_precision.sink.failed"
#: evaluations never sent (queue full, shutdown), by reason -> context_precision_sink_dropped_total
SINK_METRIC_DROPPED: Final = "context_precision.sink.dropped"
SINK: Final = "sink"
SINK_PHOENIX: Final = "phoenix"
#: Phoenix: the span annotation's identifier (re-sending upserts it) and the per-document annotation.
PHOENIX_ANNOTATION_IDENTIFIER: Final = "cp-observe"
PHOENIX_DOCUMENT_ANNOTATION_NAME: Final = "relevance"
LABEL_RELEVANT: Final = "relevant"
LABEL_IRRELEVANT: Final = "irrelevant"
ANNOTATOR_LLM: Final = "LLM"
ANNOTATOR_CODE: Final = "CODE"
# People's labels read back from Phoenix, and the retrievals drawn for them to label.
ANNOTATOR_HUMAN: Final = "HUMAN"
#: Span annotation posted on a scored span drawn at ``calibration_rate`` (label "yes", score 1): Phoenix lists
#: and filters span annotations, so people can pick exactly the unbiased set to label.
PHOENIX_NEEDS_LABEL_ANNOTATION_NAME: Final = "needs_label"
#: Phoenix's own variable for its API key, read when CP_OBSERVE_PHOENIX_API_KEY is unset.
ENV_PHOENIX_API_KEY: Final = "PHOENIX_API_KEY"

# --- the programs' log lines ------------------------------------------------------------------------------------------
#: ``text`` or ``json`` (one object per line): the format of serve's and the offline commands' log lines on
#: stderr, when ``--log-format`` is not given.
ENV_LOG_FORMAT: Final = "CP_OBSERVE_LOG_FORMAT"
