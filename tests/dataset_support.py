"""Helpers for the dataset tests: stored traces carrying the segment and rerank attributes.

Their names are in ``_names.py``. These traces are what those stages put on an evaluation span, written through
the real OpenTelemetry SDK and the replay's JSON-lines exporter, read back through the same file reader as any trace:
an agent span with the answer, its retrieval with the query and the documents, and the evaluation span under
the retrieval with the verdicts, the score, the segment value and (for a reranked one) the rerank attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from cp_observe import _names as n
from cp_observe import average_precision
from cp_observe.replay import JsonLinesSpanExporter


@dataclass(frozen=True)
class Case:
    """One stored, scored retrieval."""

    query: str
    contexts: tuple[str, ...]
    verdicts: tuple[bool, ...]
    answer: str
    data_source: str = "docs"
    version: str | None = None  # the `retriever.version` segment value
    rerank: tuple[float, int] | None = None  # AP before reranking, relevant documents dropped
    time_ns: int = 1_700_000_000_000_000_000


def write_traces(path: Path, cases: list[Case]) -> None:
    """Write ``cases`` as OTLP/JSON lines, one trace each, through the SDK and ``JsonLinesSpanExporter``."""
    exporter = JsonLinesSpanExporter(path)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.dataset_support")
    for i, case in enumerate(cases):
        start = case.time_ns + i * 1_000_000
        agent = tracer.start_span("invoke_agent support", start_time=start, attributes={
            n.OPENINFERENCE_SPAN_KIND: n.KIND_AGENT, n.OUTPUT_VALUE: case.answer, "retriever.version":
            case.version or ""})
        with trace.use_span(agent, end_on_exit=False):
            documents = {n.document_attribute(k, "content"): text for k, text in enumerate(case.contexts)}
            retrieval = tracer.start_span(f"retrieval {case.data_source}", start_time=start + 1000, attributes={
                n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.GEN_AI_DATA_SOURCE_ID: case.data_source,
                n.GEN_AI_RETRIEVAL_QUERY_TEXT: case.query, **documents})
            retrieval.end(end_time=start + 2000)
            agent.end(end_time=start + 3000)
            ap = average_precision(list(case.verdicts))
            attributes: dict[str, object] = {
                n.OPENINFERENCE_SPAN_KIND: n.KIND_EVALUATOR, n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME,
                n.GEN_AI_EVALUATION_SCORE_VALUE: round(ap, 2), n.CP_AVERAGE_PRECISION: ap,
                n.CP_VERDICTS: list(case.verdicts), n.CP_REASONS: [f"reason {k}" for k in range(len(case.verdicts))],
                n.CP_REFERENCE: n.REFERENCE_OUTPUT, n.GEN_AI_DATA_SOURCE_ID: case.data_source,
                n.CP_JUDGE_MODEL: "lexical",
                n.CP_STAGE: n.STAGE_RERANK if case.rerank is not None else n.STAGE_RETRIEVAL,
            }
            if case.version is not None:
                attributes[n.CP_SEGMENT_PREFIX + "retriever_version"] = case.version
            if case.rerank is not None:
                before, dropped = case.rerank
                attributes.update({n.CP_RERANK_AP_BEFORE: before, n.CP_RERANK_LIFT: ap - before,
                                   n.CP_RERANK_DROPPED_RELEVANT: dropped})
            context = trace.set_span_in_context(retrieval)
            evaluation = tracer.start_span(n.EVALUATION_SPAN_NAME, context=context, start_time=start + 4000,
                                           attributes=attributes)  # type: ignore[arg-type]
            evaluation.end(end_time=start + 5000)
    provider.shutdown()


def canary_cases() -> list[Case]:
    """A data source with a worse `v2` variant (relevant context pushed down) and some reranked retrievals."""
    good = ("Plans: Free, Team at $8.", "Refunds within 30 days.", "Offline notes: 200.")
    cases = []
    for i in range(12):
        cases.append(Case(f"question {i} about plans", good, (True, False, False), "Team costs $8.", version="v1",
                          rerank=(0.5, 0) if i % 3 == 0 else None))
    for i in range(12):
        worse = (True, False, False) if i % 4 == 0 else (False, False, True)
        cases.append(Case(f"question {i} about plans (v2)", good, worse, "Team costs $8.", version="v2",
                          rerank=(1.0, 1) if i % 3 == 0 else None))
    cases.append(Case("unversioned", good, (False, True, False), "Refunds within 30 days.", data_source="faq"))
    return cases
