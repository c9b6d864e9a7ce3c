"""The report's numbers: evaluations read from OTLP/JSON lines (or ``run_evals`` results), aggregated per data source.

Reading streams: per data source it keeps running sums (MAP and its variance), time buckets (MAP over
time; one second wide, widened as they grow past ``MAX_BUCKETS``), per-rank counts (relevance rate and
precision at k), a ten-bin score histogram and the ``worst`` lowest scores; so memory grows with data
sources and ranks, not with evaluations. The spans the
evaluations scored (a replay writes them next to their evaluations; a Collector file holds them anyway) give
each evaluation its query, its contexts and the time of the retrieval; they are looked up by the
evaluation span's parent in a bounded map of the most recent ``MAX_TARGETS`` targets.

Confidence intervals are normal approximations at 95 %: MAP ± 1.96·s/√n, and for two runs the difference of
MAPs ± 1.96·√(s₁²/n₁ + s₂²/n₂) (Welch). Average precision is bounded and often bimodal, so for small n read
the interval as a guide; at n < 2 none is given.

A report line is a data source and stage (``report_line``, the one rule for evaluation spans and dataset lines
alike): a data source's rerank-stage evaluations score what its reranker kept, so they are a line of their own,
``"<data source> (rerank)"``, with their own MAP, segments and canary verdicts, never pooled with the retrieval's;
two runs are compared line by line, rerank with rerank.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from cp_observe import _names as n
from cp_observe._stats._moments import Moments, welch_se
from cp_observe._traces._convert import spans_from_request
from cp_observe._traces._files import TraceFile
from cp_observe._traces._source import ReplayInputError
from cp_observe.dataset._collect import segments_of
from cp_observe.dataset._record import DatasetError, Record, is_dataset_file, read_records
from cp_observe.report._compare import Comparison, Paired, Rerank, Segments, compare

__all__ = ["MAX_TARGETS", "Evaluation", "Run", "SourceStats", "evaluations_from_run_evals", "load_run",
           "report_line", "summary_text", "verdict", "verdict_text", "write_report"]

MAX_TARGETS = 100_000
MAX_RANKS = 50
MAX_BUCKETS = 4096
_RESOLUTIONS = (1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400)
_Z = 1.96
_PREVIEW = 160


def report_line(data_source: str, stage: str | None) -> str:
    """The report line an evaluation counts on: its data source, or ``"<data source> (rerank)"`` for its rerank stage.

    ``stage`` is ``context_precision.stage`` of the evaluation span or the dataset line's ``stage``; missing (an
    evaluation from before stages, or ``run_evals``) is the retrieval stage.
    """
    return f"{data_source} ({n.STAGE_RERANK})" if stage == n.STAGE_RERANK else data_source


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One scored retrieval as the report sees it."""

    data_source: str  # gen_ai.data_source.id; the report line is report_line(data_source, stage)
    average_precision: float
    verdicts: tuple[bool, ...]
    time_ns: int
    reasons: tuple[str, ...] = ()
    query: str | None = None
    contexts: tuple[str, ...] = ()
    judge_model: str = ""
    reference: str = ""
    key: str = ""  # what pairs it with the same evaluation in another run: trace:span id, else line and query
    segments: tuple[tuple[str, str], ...] = ()
    rerank: tuple[float, float, int] | None = None  # AP before, lift, relevant documents dropped
    stage: str | None = None  # n.STAGE_RETRIEVAL or n.STAGE_RERANK; None: the retrieval stage


@dataclass(kw_only=True)
class SourceStats(Moments):
    """Running aggregates of one data source (or of all of them): its moments, and what the report draws."""

    name: str
    worst_kept: int = 10
    failed: int = 0
    resolution_s: int = 1  # width of the time buckets; coarsened as the buckets grow past MAX_BUCKETS
    buckets: dict[int, list[float]] = field(default_factory=dict)  # bucket start (s) -> [count, sum]
    relevant_at: list[int] = field(default_factory=lambda: [0] * MAX_RANKS)
    seen_at: list[int] = field(default_factory=lambda: [0] * MAX_RANKS)
    precision_sum: list[float] = field(default_factory=lambda: [0.0] * MAX_RANKS)
    histogram: list[int] = field(default_factory=lambda: [0] * 10)
    judges: set[str] = field(default_factory=set)
    _worst: list[tuple[float, int, Evaluation]] = field(default_factory=list)

    def fold(self, evaluation: Evaluation, sequence: int) -> None:
        """Fold one evaluation in."""
        ap = evaluation.average_precision
        self.add(ap)  # the moments: count, sum and squares
        second = evaluation.time_ns // 1_000_000_000
        bucket = self.buckets.setdefault(second - second % self.resolution_s, [0, 0.0])
        bucket[0] += 1
        bucket[1] += ap
        if len(self.buckets) > MAX_BUCKETS:
            self._coarsen()
        relevant = 0
        for k, verdict in enumerate(evaluation.verdicts[:MAX_RANKS]):
            relevant += verdict
            self.seen_at[k] += 1
            self.relevant_at[k] += verdict
            self.precision_sum[k] += relevant / (k + 1)
        self.histogram[min(9, int(ap * 10))] += 1
        if evaluation.judge_model:
            self.judges.add(evaluation.judge_model)
        entry = (-ap, sequence, evaluation)
        if len(self._worst) < self.worst_kept:
            heapq.heappush(self._worst, entry)
        elif entry > self._worst[0]:
            heapq.heapreplace(self._worst, entry)

    def worst(self) -> list[Evaluation]:
        """The lowest-scoring evaluations kept, lowest first."""
        return [e for _, _, e in sorted(self._worst, key=lambda x: (-x[0], x[1]))]

    def ranks(self) -> int:
        """The deepest rank any evaluation reached."""
        return max((k + 1 for k in range(MAX_RANKS) if self.seen_at[k]), default=0)

    def _coarsen(self) -> None:
        """Widen the time buckets to the next step of the ladder and merge them (memory stays bounded)."""
        resolution = self.resolution_s = next((r for r in _RESOLUTIONS if r > self.resolution_s),
                                              self.resolution_s * 2)
        self.buckets = _merged(self.buckets, lambda start: start - start % resolution)

    def over_time(self, bins: int = 48) -> list[tuple[int, int, float]]:
        """(start second, count, MAP) for up to ``bins`` equal spans of time, empty spans left out."""
        if not self.buckets:
            return []
        first, last = min(self.buckets), max(self.buckets)
        width = max(self.resolution_s, math.ceil((last - first + 1) / bins))
        merged = _merged(self.buckets, lambda start: first + (start - first) // width * width)
        return [(m, int(c), s / c) for m, (c, s) in sorted(merged.items())]


def _merged(buckets: dict[int, list[float]], slot_of: Callable[[int], int]) -> dict[int, list[float]]:
    """Time buckets (start -> [count, sum]) added together by the slot ``slot_of`` gives each start."""
    merged: dict[int, list[float]] = {}
    for start, (count, total) in buckets.items():
        slot = merged.setdefault(slot_of(start), [0, 0.0])
        slot[0] += count
        slot[1] += total
    return merged


@dataclass
class Run:
    """One run's evaluations: per report line (data source and stage), and all together under ``ALL``."""

    label: str
    sources: dict[str, SourceStats]
    overall: SourceStats
    files: list[str]
    spans_read: int = 0
    evaluations: int = 0
    without_target: int = 0
    keys: Paired = field(default_factory=Paired)
    segments: Segments = field(default_factory=Segments)
    rerank: Rerank = field(default_factory=Rerank)
    stages: Counter[str] = field(default_factory=Counter)  # evaluations per stage (None counts as retrieval)
    #: Rerank evaluations whose reranker's model is the judge's kind (``judge_is_reranker``), per report line.
    self_judged: Counter[str] = field(default_factory=Counter)


def _difference(a: SourceStats, b: SourceStats) -> tuple[float, tuple[float, float] | None]:
    """MAP of ``b`` minus MAP of ``a``, and its 95 % interval (Welch), ``None`` when either has n < 2."""
    diff = b.mean - a.mean
    if a.count < 2 or b.count < 2:
        return diff, None
    half = _Z * welch_se(a, b)
    return diff, (diff - half, diff + half)


class _Reader:
    def __init__(self, label: str, worst: int) -> None:
        self.run = Run(label, {}, SourceStats(name="all data sources", worst_kept=worst), [])
        self.worst = worst
        self.targets: OrderedDict[int, tuple[int, str | None, tuple[str, ...]]] = OrderedDict()
        self.sequence = 0

    def _line(self, data_source: str, stage: str | None) -> SourceStats:
        line = report_line(data_source, stage)
        stats = self.run.sources.get(line)
        if stats is None:
            stats = self.run.sources[line] = SourceStats(name=line, worst_kept=self.worst)
        return stats

    def add(self, evaluation: Evaluation) -> None:
        self.sequence += 1
        stats = self._line(evaluation.data_source, evaluation.stage)
        stats.fold(evaluation, self.sequence)
        self.run.overall.fold(evaluation, self.sequence)
        self.run.evaluations += 1
        self.run.stages[evaluation.stage or n.STAGE_RETRIEVAL] += 1
        ap = evaluation.average_precision
        key = evaluation.key or (f"{stats.name}\x00{evaluation.query}" if evaluation.query else "")
        if key:
            self.run.keys.add(key, ap)
        self.run.segments.add(stats.name, dict(evaluation.segments), ap)
        if evaluation.rerank is not None:
            before, lift, dropped = evaluation.rerank
            self.run.rerank.add(before, ap, lift, dropped)

    def span(self, span: ReadableSpan) -> None:
        attributes = span.attributes or {}
        context = span.context
        if context is None:
            return
        if span.name == n.EVALUATION_SPAN_NAME or attributes.get(n.OPENINFERENCE_SPAN_KIND) == n.KIND_EVALUATOR:
            if attributes.get(n.GEN_AI_EVALUATION_NAME, n.EVALUATION_NAME) != n.EVALUATION_NAME:
                return
            self._evaluation(span, attributes)
            return
        if n.GEN_AI_RETRIEVAL_QUERY_TEXT in attributes or n.CP_CONTEXT_COUNT in attributes or \
                attributes.get(n.GEN_AI_OPERATION_NAME) == n.OPERATION_RETRIEVAL:
            query = attributes.get(n.GEN_AI_RETRIEVAL_QUERY_TEXT) or attributes.get(n.RERANKER_QUERY) or \
                attributes.get(n.INPUT_VALUE)
            reranker = attributes.get(n.OPENINFERENCE_SPAN_KIND) == n.KIND_RERANKER  # scored on what it kept
            prefix = n.RERANKER_OUTPUT_DOCUMENTS if reranker else n.RETRIEVAL_DOCUMENTS
            contexts = []
            for i in range(MAX_RANKS):
                value = attributes.get(n.document_attribute(i, "content", prefix))
                if value is None:
                    break
                contexts.append(str(value)[:_PREVIEW])
            self.targets[context.span_id] = (span.end_time or 0, str(query) if query is not None else None,
                                             tuple(contexts))
            while len(self.targets) > MAX_TARGETS:
                self.targets.popitem(last=False)

    def _evaluation(self, span: ReadableSpan, attributes: Any) -> None:
        source = str(attributes.get(n.GEN_AI_DATA_SOURCE_ID, "unknown"))
        stage = attributes.get(n.CP_STAGE)
        stage = str(stage) if stage is not None else None
        if span.status.status_code is StatusCode.ERROR or n.CP_AVERAGE_PRECISION not in attributes:
            self._line(source, stage).failed += 1
            self.run.overall.failed += 1
            return
        target = self.targets.get(span.parent.span_id) if span.parent is not None else None
        if target is None:
            self.run.without_target += 1
        verdicts = tuple(bool(v) for v in attributes.get(n.CP_VERDICTS, ()))
        context = span.context
        key = f"{context.trace_id:032x}:{span.parent.span_id:016x}" if context is not None and span.parent else ""
        rerank = None
        if n.CP_RERANK_AP_BEFORE in attributes:
            rerank = (float(attributes[n.CP_RERANK_AP_BEFORE]), float(attributes.get(n.CP_RERANK_LIFT, 0.0)),
                      int(attributes.get(n.CP_RERANK_DROPPED_RELEVANT, 0)))
        reasons = tuple(str(r) for r in attributes.get(n.CP_REASONS, ()))
        if attributes.get(n.CP_RERANK_JUDGE_IS_RERANKER) is True:
            self.run.self_judged[report_line(source, stage)] += 1
        self.add(Evaluation(
            data_source=source,
            average_precision=float(attributes[n.CP_AVERAGE_PRECISION]),
            verdicts=verdicts,
            time_ns=target[0] if target is not None else (span.start_time or 0),
            reasons=reasons,
            query=target[1] if target is not None else None,
            contexts=target[2] if target is not None else (),
            judge_model=str(attributes.get(n.CP_JUDGE_MODEL, "")),
            reference=str(attributes.get(n.CP_REFERENCE, "")),
            key=key, segments=tuple(sorted(segments_of(attributes).items())), rerank=rerank, stage=stage,
        ))

    def record(self, record: Record) -> None:
        """One line of a dataset file (a run's output)."""
        key = f"{record.trace_id}:{record.span_id}" if record.trace_id and record.span_id else ""
        rerank = None
        if record.rerank is not None:
            rerank = (record.rerank.get("average_precision_before", 0.0), record.rerank.get("lift", 0.0),
                      int(record.rerank.get("dropped_relevant", 0)))
        self.add(Evaluation(
            data_source=record.data_source, average_precision=record.average_precision,
            verdicts=tuple(record.verdicts), time_ns=record.time_unix_nano, reasons=tuple(record.reasons),
            query=record.query, contexts=tuple(c[:_PREVIEW] for c in record.contexts),
            judge_model=record.judge_model, reference=record.reference, key=key,
            segments=tuple(sorted(record.segments.items())), rerank=rerank, stage=record.stage,
        ))


def load_run(paths: Sequence[str | Path], *, label: str = "run", worst: int = 10) -> Run:
    """Read evaluations from trace files (OTLP/JSON lines or protobuf) or dataset files.

    Trace files hold evaluation spans and the spans they scored; dataset files are ``cp-observe dataset``'s
    output or ``write_eval_results``'.

    Raises:
        ReplayInputError: a file cannot be read; the message names the file and line.
    """
    reader = _Reader(label, worst)
    for path in paths:
        reader.run.files.append(str(path))
        try:
            if is_dataset_file(path):
                for record in read_records(path):
                    reader.record(record)
                continue
        except DatasetError as exc:
            raise ReplayInputError(str(exc)) from None
        source = TraceFile(path)
        for batch in source.batches():
            converted = spans_from_request(batch.request)
            reader.run.spans_read += len(converted.spans)
            for span in converted.spans:
                reader.span(span)
    if not reader.run.evaluations and not reader.run.overall.failed:
        raise ReplayInputError(f"{', '.join(map(str, paths))}: no context precision evaluation spans found")
    return reader.run


def evaluations_from_run_evals(results: Any, *, data_source: str = "run_evals", time_ns: int | None = None) -> Run:
    """A ``Run`` from ``run_evals`` results (``EvalRunResult``): every scorer result becomes an evaluation."""
    import time

    reader = _Reader("run_evals", 10)
    when = time_ns if time_ns is not None else time.time_ns()
    for item in results.items:
        for result in item.scorer_results.values():
            query = item.item.get("input") if isinstance(item.item, dict) else None
            reader.add(Evaluation(
                data_source=data_source, average_precision=float(result.average_precision),
                verdicts=tuple(v.relevant for v in result.verdicts), time_ns=when,
                reasons=tuple(v.reason for v in result.verdicts), query=str(query) if query is not None else None,
                judge_model=result.judge_model, reference=result.reference,
            ))
        for _ in item.errors:
            reader.run.overall.failed += 1
    return reader.run


def _fmt_interval(interval: tuple[float, float] | None) -> str:
    return f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval is not None else "(n < 2)"


def verdict(run: Run, other: Run, confidence: float = 0.95) -> Comparison:
    """The A/B verdict of ``other`` against ``run`` (paired where both hold the same evaluations)."""
    return compare(run.overall, other.overall, run.keys, other.keys, confidence)  # the overall moments: the MAP


def verdict_text(comparison: Comparison, first: str, second: str) -> str:
    """One line: both MAPs, the difference with its interval, and the verdict."""
    how = f"paired over {comparison.paired} shared evaluations" if comparison.paired else "unpaired (Welch)"
    return (f"verdict: {second} vs {first} at {comparison.confidence:.0%} confidence: {comparison.verdict.upper()}; "
            f"MAP {comparison.first_map:.3f} -> {comparison.second_map:.3f}, difference "
            f"{comparison.difference:+.3f} {_fmt_interval(comparison.interval)} ({how})")


def summary_text(run: Run, other: Run | None = None, comparison: Comparison | None = None) -> str:
    """The plain-text summary printed on the terminal."""
    stages = ""
    if run.stages[n.STAGE_RERANK]:
        stages = (f"{run.stages[n.STAGE_RETRIEVAL]} {n.STAGE_RETRIEVAL} stage, "
                  f"{run.stages[n.STAGE_RERANK]} {n.STAGE_RERANK} stage; ")
    lines = [f"{run.label}: {run.evaluations} evaluations ({stages}{run.overall.failed} failed) from "
             f"{', '.join(run.files)}"]
    rows: Iterable[SourceStats] = [*sorted(run.sources.values(), key=lambda s: s.name), run.overall]
    for stats in rows:
        lines.append(f"  {stats.name:<28} MAP {stats.mean:.3f}  95% CI {_fmt_interval(stats.interval()):<16} "
                     f"n {stats.count:<6} failed {stats.failed}")
        if stats.count and stats is not run.overall:
            rates = " ".join(f"@{k + 1} {stats.relevant_at[k] / stats.seen_at[k]:.2f}"
                             for k in range(min(stats.ranks(), 10)) if stats.seen_at[k])
            lines.append(f"  {'':<28} relevance by rank: {rates}")
    if other is not None:
        lines.append(f"{other.label} vs {run.label} (difference in MAP, 95% CI):")
        for name, a, b in _pairs(run, other):
            diff, interval = _difference(a, b)
            lines.append(f"  {name:<28} {a.mean:.3f} -> {b.mean:.3f}  diff {diff:+.3f} {_fmt_interval(interval)}")
        if comparison is not None:
            lines.append(verdict_text(comparison, run.label, other.label))
    for (source, label), values in sorted(run.segments.by_value.items()):
        for value in sorted(values):
            diff, bound = run.segments.canary(source, label, value)
            if bound is not None and bound < 0:
                lines.append(f"canary: {source} {label}={value} is below the rest of {source} by {-diff:.3f} "
                             f"(99% one-sided bound {bound:+.3f})")
    if run.rerank.count:
        lines.append(f"rerank: {run.rerank.count} reranked, mean lift {run.rerank.lift_total / run.rerank.count:+.3f}, "
                     f"{run.rerank.dropped_total} relevant documents dropped")
    lines.extend(self_judged_lines(run))
    return "\n".join(lines)


def self_judged_lines(run: Run) -> list[str]:
    """One warning per report line whose reranker is the judge's model or family: its lift may be inflated."""
    return [f"warning: {line}: {count} rerank evaluations judged by the reranker's own model family "
            "(context_precision.rerank.judge_is_reranker); LLM judges favour their own kind, so the lift may be "
            "inflated: use a judge from another family" for line, count in sorted(run.self_judged.items())]


def _pairs(run: Run, other: Run) -> list[tuple[str, SourceStats, SourceStats]]:
    out = [(name, run.sources[name], other.sources[name]) for name in sorted(run.sources) if name in other.sources]
    out.append(("all data sources", run.overall, other.overall))
    return out


def write_report(path: str | Path, run: Run, other: Run | None = None, *,
                 title: str = "Context precision report", comparison: Comparison | None = None,
                 calibration: dict[str, Any] | None = None) -> None:
    """Write the self-contained HTML report to ``path``.

    With ``other``: the A/B verdict, at 95 % unless ``comparison`` is given; with ``calibration``: the MAP
    corrected by people's labels.
    """
    from cp_observe.report._corrected import corrected_table
    from cp_observe.report._html import render

    if other is not None and comparison is None:
        comparison = verdict(run, other)
    corrected = corrected_table(calibration) if calibration is not None else ""
    Path(path).write_text(render(run, other, title=title, pairs=_pairs(run, other) if other else [],
                                 difference=_difference, comparison=comparison, corrected=corrected),
                          encoding="utf-8")
