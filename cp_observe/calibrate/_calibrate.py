"""``cp-observe calibrate``'s numbers: people's labels matched to the judge's verdicts, per data source and judge.

Matching. A label names a retrieval span (trace and span id) and a document on it, by position (the retrieval
order recorded on the span) or by ``document.id`` (looked up in that order). It is compared with every
judgement of that span (one per judge identity that scored it). A label is counted apart, never dropped:

- ``unmatched``: no judgement of that span was read (the span was not scored, or its evaluation is elsewhere);
- ``unseen``: the span was judged, but not that document (its position is past the judged contexts, or its
  ``document_id`` is not among the span's documents).

Corrected MAP. A retrieval is *labelled* when every position the judge saw has a label (several labels on one
position: the majority; a tie, the first read). For labelled retrievals ``y`` = AP from the labels and ``f`` =
AP from the verdicts; ``f`` of the other scored retrievals of the group is the unlabelled sample. PPI (λ = 1)
and PPI++ (tuned λ) then give MAP with a 95 % interval (``_judging/_ppi.py``). **Valid only when the labelled
retrievals are a uniform random subsample of the scored ones** (``calibration_rate`` draws such a sample);
``labelled_outside_draw`` counts labelled retrievals not drawn, which breaks that when it is not 0.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cp_observe._judging._agreement import Agreement
from cp_observe._judging._labels import HumanLabel, label_position
from cp_observe._judging._map import average_precision
from cp_observe._stats._moments import Moments
from cp_observe._stats._normal import Z95
from cp_observe.calibrate._judged import JudgedRetrieval, JudgeKey

__all__ = ["Calibration", "Disagreement", "GroupFigures", "calibrate", "calibration_lines", "corrected_map"]

ALL = "all data sources"
_TOP_DISAGREEMENTS = 10


@dataclass
class Disagreement:
    """One context (by document id, else content, else span and position) the judge and people disagree on."""

    context: str
    count: int = 0
    judge_said_relevant: int = 0  # ... and the person said not
    person_said_relevant: int = 0
    judge_reason: str = ""
    person_reason: str = ""
    query_span: str = ""


@dataclass
class GroupFigures:
    """Agreement and MAP figures of one (data source, judge) group."""

    data_source: str
    judge: JudgeKey
    agreement: Agreement
    retrievals: int
    labelled_retrievals: int
    judge_map: dict[str, Any]
    corrected: dict[str, Any] | None
    disagreements: list[Disagreement]
    labelled_outside_draw: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return {
            "data_source": self.data_source,
            "judge": {"model": self.judge.model, "prompt_version": self.judge.prompt_version, "kind": self.judge.kind},
            **self.agreement.as_dict(),
            "retrievals": self.retrievals, "labelled_retrievals": self.labelled_retrievals,
            "labelled_outside_draw": self.labelled_outside_draw,
            "judge_only_map": self.judge_map, "corrected_map": self.corrected,
            "disagreements": [d.__dict__ for d in self.disagreements],
        }


@dataclass
class Calibration:
    """Everything ``calibrate`` found."""

    groups: list[GroupFigures] = field(default_factory=list)
    labels: int = 0
    unmatched: int = 0
    unseen: int = 0
    unreadable: list[str] = field(default_factory=list)
    unmatched_examples: list[str] = field(default_factory=list)
    unseen_examples: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready result."""
        return {
            "inputs": self.inputs, "labels": self.labels,
            "counted_apart": {"unmatched": self.unmatched, "unseen": self.unseen, "unreadable": len(self.unreadable),
                              "unmatched_examples": self.unmatched_examples,
                              "unseen_examples": self.unseen_examples, "unreadable_examples": self.unreadable[:20]},
            "assumption": "the corrected MAP is valid only when the labelled retrievals are a uniform random "
                          "subsample of the scored ones (calibration_rate draws one)",
            "groups": [g.as_dict() for g in self.groups],
        }


def _context_key(retrieval: JudgedRetrieval, position: int) -> str:
    if position < len(retrieval.document_ids) and retrieval.document_ids[position]:
        return f"document {retrieval.document_ids[position]}"
    if position < len(retrieval.contexts) and retrieval.contexts[position]:
        return retrieval.contexts[position]
    return f"span {retrieval.span_id:016x} position {position}"


def _mean_interval(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"estimate": None, "low": None, "high": None, "n": 0}
    moments = Moments.of(values)
    low, high = moments.interval(Z95) or (None, None)
    return {"estimate": moments.mean, "low": low, "high": high, "n": len(values)}


def corrected_map(y: Sequence[float], f_labelled: Sequence[float],
                  f_unlabelled: Sequence[float]) -> dict[str, Any] | None:
    """PPI and PPI++ MAP with 95 % intervals, and the labels-only (classical) mean; ``None`` below 2 labelled."""
    if len(y) < 2:
        return None
    from cp_observe._judging._ppi import classical_mean, ppi_mean

    def shown(estimate: Any) -> dict[str, Any]:
        return {"estimate": estimate.estimate, "standard_error": estimate.standard_error, "low": estimate.low,
                "high": estimate.high, "lam": estimate.lam, "labelled": estimate.labelled,
                "unlabelled": estimate.unlabelled}

    out: dict[str, Any] = {"classical": shown(classical_mean(list(y), alpha=0.05))}
    if f_unlabelled:
        out["ppi"] = shown(ppi_mean(list(y), list(f_labelled), list(f_unlabelled), lam=1.0, alpha=0.05))
        out["ppi_plus_plus"] = shown(ppi_mean(list(y), list(f_labelled), list(f_unlabelled), alpha=0.05))
    return out


def calibrate(retrievals: Iterable[JudgedRetrieval], labels: Iterable[HumanLabel], *,
              inputs: Sequence[str] = (), unreadable: Sequence[str] = ()) -> Calibration:
    """Match ``labels`` to ``retrievals`` and compute every group's figures."""
    result = Calibration(inputs=list(inputs), unreadable=list(unreadable))
    by_span: dict[int, list[JudgedRetrieval]] = defaultdict(list)
    groups: dict[tuple[str, JudgeKey], list[JudgedRetrieval]] = defaultdict(list)
    for retrieval in retrievals:
        by_span[retrieval.span_id].append(retrieval)
        groups[(retrieval.data_source, retrieval.judge)].append(retrieval)
        groups[(ALL, retrieval.judge)].append(retrieval)
    # (retrieval identity) -> position -> labels in the order read
    per_retrieval: dict[int, dict[int, list[HumanLabel]]] = defaultdict(lambda: defaultdict(list))
    for label in labels:
        result.labels += 1
        candidates = [r for r in by_span.get(label.span_id, ()) if r.trace_id == label.trace_id]
        if not candidates:
            result.unmatched += 1
            if len(result.unmatched_examples) < 20:
                result.unmatched_examples.append(label.where or f"span {label.span_id:016x}")
            continue
        seen = False
        for retrieval in candidates:
            position = label_position(label, len(retrieval.verdicts), retrieval.document_ids)
            if position is not None:
                seen = True
                per_retrieval[id(retrieval)][position].append(label)
        if not seen:
            result.unseen += 1
            if len(result.unseen_examples) < 20:
                result.unseen_examples.append(label.where or f"span {label.span_id:016x}")
    for (source, judge), members in sorted(groups.items(), key=lambda item: (item[0][0] == ALL, item[0])):
        result.groups.append(_figures(source, judge, members, per_retrieval))
    return result


def _figures(source: str, judge: JudgeKey, members: list[JudgedRetrieval],
             per_retrieval: dict[int, dict[int, list[HumanLabel]]]) -> GroupFigures:
    pairs: list[tuple[bool, bool]] = []
    disagreements: dict[str, Disagreement] = {}
    y: list[float] = []
    f_labelled: list[float] = []
    f_unlabelled: list[float] = []
    outside = 0
    for retrieval in members:
        judged_ap = average_precision(retrieval.verdicts)
        positions = per_retrieval.get(id(retrieval), {})
        for position, found in positions.items():
            verdict = retrieval.verdicts[position]
            for label in found:
                pairs.append((verdict, label.relevant))
                if verdict != label.relevant:
                    key = _context_key(retrieval, position)
                    entry = disagreements.setdefault(key, Disagreement(key, query_span=f"{retrieval.span_id:016x}"))
                    entry.count += 1
                    entry.judge_said_relevant += verdict
                    entry.person_said_relevant += label.relevant
                    if not entry.judge_reason and position < len(retrieval.reasons):
                        entry.judge_reason = retrieval.reasons[position]
                    if not entry.person_reason and label.reason:
                        entry.person_reason = label.reason
        if retrieval.verdicts and all(i in positions for i in range(len(retrieval.verdicts))):
            human = [_majority(positions[i]) for i in range(len(retrieval.verdicts))]
            y.append(average_precision(human))
            f_labelled.append(judged_ap)
            outside += retrieval.needs_label is False
        else:
            f_unlabelled.append(judged_ap)
    top = sorted(disagreements.values(), key=lambda d: (-d.count, d.context))[:_TOP_DISAGREEMENTS]
    return GroupFigures(
        data_source=source, judge=judge, agreement=Agreement.of(pairs), retrievals=len(members),
        labelled_retrievals=len(y), judge_map=_mean_interval([*f_labelled, *f_unlabelled]),
        corrected=corrected_map(y, f_labelled, f_unlabelled), disagreements=top, labelled_outside_draw=outside,
    )


def _majority(labels: list[HumanLabel]) -> bool:
    counts = Counter(label.relevant for label in labels)
    if counts[True] == counts[False]:
        return labels[0].relevant
    return counts[True] > counts[False]


def _fmt(p: dict[str, Any]) -> str:
    if p.get("value") is None:
        return "-"
    return f"{p['value']:.3f} [{p['low']:.3f}, {p['high']:.3f}]"


def calibration_lines(figures: dict[str, Any]) -> list[str]:
    """The terminal summary of ``Calibration.as_dict()`` (``calibrate``, and ``report --labels``)."""
    apart = figures["counted_apart"]
    lines = [f"{figures['labels']} labels; counted apart: {apart['unmatched']} on spans with no judgement read, "
             f"{apart['unseen']} on documents the judge never saw, {apart['unreadable']} unreadable"]
    for g in figures["groups"]:
        lines.append(f"  {g['data_source']} / {g['judge']['model']}: {g['labels']} labels, agreement "
                     f"{_fmt(g['agreement'])}, TPR {_fmt(g['tpr'])}, TNR {_fmt(g['tnr'])}, kappa {_fmt(g['kappa'])}")
        corrected = g["corrected_map"] or {}
        judge_map = g["judge_only_map"]
        if judge_map["estimate"] is not None:
            text = f"    MAP judge only {judge_map['estimate']:.3f} (n {judge_map['n']})"
            for key, name in (("ppi", "PPI"), ("ppi_plus_plus", "PPI++")):
                if key in corrected:
                    e = corrected[key]
                    text += f", {name} {e['estimate']:.3f} [{e['low']:.3f}, {e['high']:.3f}]"
            lines.append(text + f" from {g['labelled_retrievals']} labelled retrievals")
    return lines
