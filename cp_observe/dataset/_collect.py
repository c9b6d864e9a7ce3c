"""Evaluations read back from stored traces as dataset records: ``cp-observe dataset``'s reading half.

The inputs are those of ``replay`` (trace files, Jaeger, Tempo, Phoenix, through the same ``Source`` classes)
and dataset files (a run's output: ``cp-observe dataset``, or ``run_evals`` results written with
``write_eval_results``). Nothing is judged: each context precision evaluation span already holds the verdicts,
the score and the segment and rerank attributes; its parent, the scored span, holds the query and the contexts
(read by the tracing-convention readers the processor uses); the answer is the nearest ancestor of the scored
span that carries one (``answer_of``), when the evaluation was judged against an answer.

Spans are remembered in a bounded map (the ``MAX_SPANS`` most recent) and evaluations in a bounded list
(``MAX_EVALUATIONS``; more are counted, not kept), resolved when every input has been read, so their order in
the input does not matter. What cannot become a record is counted by reason:
evaluations that failed (no score), scored spans not found or without content (content capture off), ancestors
evicted from the map.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from cp_observe import _names as n
from cp_observe._capture._answer import answer_of
from cp_observe._capture._conventions import query_of, retrieved_of
from cp_observe._traces._convert import spans_from_request
from cp_observe._traces._source import Source
from cp_observe.dataset._record import Record, is_dataset_file, read_records

__all__ = ["MAX_EVALUATIONS", "MAX_SPANS", "Collected", "Collector", "is_dataset", "segments_of"]

MAX_SPANS = 500_000
MAX_EVALUATIONS = 1_000_000
_MAX_DEPTH = 64


@dataclass
class Collected:
    """The records read, and what was read but could not become one (reason -> count)."""

    records: list[Record] = field(default_factory=list)
    spans_read: int = 0
    evaluations: int = 0
    skipped: Counter[str] = field(default_factory=Counter)


@dataclass(slots=True)
class _Target:
    parent: int | None
    end_ns: int
    query: str | None
    contexts: list[str] | None
    answer: str | None


class Collector:
    """Reads sources (``Source`` objects, or paths of dataset files) and turns evaluations into records."""

    def __init__(self) -> None:
        self.result = Collected()
        self._spans: OrderedDict[int, _Target] = OrderedDict()
        self._pending: list[tuple[ReadableSpan, int | None]] = []

    def read_dataset(self, path: str) -> None:
        """Every record of a dataset file, as is."""
        for record in read_records(path):
            self.result.evaluations += 1
            if self._room():
                self.result.records.append(record)

    def read(self, source: Source) -> None:
        """Every span of ``source``; ``ReplayInputError`` stops it (what was read is kept)."""
        for batch in source.batches():
            converted = spans_from_request(batch.request)
            if converted.rejected:
                self.result.skipped[f"spans with invalid ids ({converted.error})"] += converted.rejected
            for span in converted.spans:
                self.result.spans_read += 1
                self._span(span)

    def finish(self) -> Collected:
        """Resolve the evaluations read against the spans read; returns everything."""
        for span, parent in self._pending:
            record = self._record(span, parent)
            if record is not None:
                self.result.records.append(record)
        self._pending.clear()
        self._spans.clear()
        return self.result

    def _span(self, span: ReadableSpan) -> None:
        attributes = span.attributes or {}
        context = span.context
        if context is None:
            return
        if span.name == n.EVALUATION_SPAN_NAME or attributes.get(n.OPENINFERENCE_SPAN_KIND) == n.KIND_EVALUATOR:
            if attributes.get(n.GEN_AI_EVALUATION_NAME, n.EVALUATION_NAME) == n.EVALUATION_NAME:
                self.result.evaluations += 1
                if self._room():
                    self._pending.append((span, span.parent.span_id if span.parent is not None else None))
            return
        retrieved = retrieved_of(attributes, span.events)
        self._spans[context.span_id] = _Target(
            parent=span.parent.span_id if span.parent is not None else None, end_ns=span.end_time or 0,
            query=query_of(attributes) if retrieved is not None else None,
            contexts=list(retrieved.texts) if retrieved is not None else None,
            answer=answer_of(attributes) if retrieved is None else None,
        )
        while len(self._spans) > MAX_SPANS:
            self._spans.popitem(last=False)

    def _room(self) -> bool:
        if len(self._pending) + len(self.result.records) < MAX_EVALUATIONS:
            return True
        self.result.skipped[f"over the bound of {MAX_EVALUATIONS} evaluations read"] += 1
        return False

    def _record(self, span: ReadableSpan, parent: int | None) -> Record | None:
        attributes: Any = span.attributes or {}
        skipped = self.result.skipped
        if span.status.status_code is StatusCode.ERROR or n.CP_AVERAGE_PRECISION not in attributes:
            skipped["failed evaluations (no score)"] += 1
            return None
        target = self._spans.get(parent) if parent is not None else None
        if target is None:
            skipped["scored span not in the input (or over the span bound)"] += 1
            return None
        if target.query is None or not target.contexts:
            skipped["scored span without query or contexts (content capture off?)"] += 1
            return None
        reference = str(attributes.get(n.CP_REFERENCE, n.REFERENCE_OUTPUT))
        answer = None
        if reference == n.REFERENCE_OUTPUT:
            answer = self._answer(target)
            if answer is None:
                skipped["judged against an answer not in the input"] += 1
                return None
        rerank = None
        if n.CP_RERANK_AP_BEFORE in attributes:
            rerank = {"average_precision_before": float(attributes[n.CP_RERANK_AP_BEFORE]),
                      "lift": float(attributes.get(n.CP_RERANK_LIFT, 0.0)),
                      "dropped_relevant": int(attributes.get(n.CP_RERANK_DROPPED_RELEVANT, 0))}
        stage = attributes.get(n.CP_STAGE)
        context = span.context
        return Record(
            query=target.query, contexts=target.contexts, answer=answer,
            score=float(attributes.get(n.GEN_AI_EVALUATION_SCORE_VALUE, attributes[n.CP_AVERAGE_PRECISION])),
            average_precision=float(attributes[n.CP_AVERAGE_PRECISION]),
            verdicts=[bool(v) for v in attributes.get(n.CP_VERDICTS, ())],
            reasons=[str(r) for r in attributes.get(n.CP_REASONS, ())], reference=reference,
            trace_id=f"{context.trace_id:032x}" if context is not None else "",
            span_id=f"{parent:016x}" if parent is not None else "",
            data_source=str(attributes.get(n.GEN_AI_DATA_SOURCE_ID, "unknown")),
            segments=segments_of(attributes), time_unix_nano=target.end_ns,
            judge_model=str(attributes.get(n.CP_JUDGE_MODEL, "")),
            stage=str(stage) if stage is not None else None, rerank=rerank,
        )

    def _answer(self, target: _Target) -> str | None:
        """The answer of the nearest ancestor carrying one (the scored span's own agent, LLM call or root)."""
        parent = target.parent
        for _ in range(_MAX_DEPTH):
            if parent is None:
                return None
            above = self._spans.get(parent)
            if above is None:
                return None
            if above.answer:
                return above.answer
            parent = above.parent
        return None


def segments_of(attributes: Any) -> dict[str, str]:
    """The segment values an evaluation span carries: label name -> value."""
    prefix = n.CP_SEGMENT_PREFIX
    return {key[len(prefix):]: str(value) for key, value in attributes.items() if key.startswith(prefix)}


def is_dataset(path: str) -> bool:
    """True for a dataset file (a run's output), False for a trace file."""
    return is_dataset_file(path)
