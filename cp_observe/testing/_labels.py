"""``HumanLabels``: supply people's relevance labels in a test, and check the judge against them.

In a test that scores with ``EvaluationCapture``, label the documents of the evaluations it captured (or name
spans by id), then read the agreement, or write the labels as the JSON lines ``cp-observe calibrate --labels``
reads::

    labels = HumanLabels()
    [evaluation] = capture.evaluations()
    labels.add(evaluation, position=0, relevant=True)
    labels.add(evaluation, position=1, relevant=False, reason="about billing")
    result = labels.agreement(capture.evaluations())
    assert result.table.agreement.value >= 0.9

Matching is the one rule ``calibrate`` uses (``_judging/_labels.py``): a label names a retrieval span and a
position in its retrieval order; labels on spans no evaluation scored, or on positions the judge never saw, are
counted apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cp_observe._emission._sinks import EvaluationRecord
from cp_observe._judging._agreement import Agreement
from cp_observe._judging._labels import HumanLabel, label_line, label_position

__all__ = ["HumanLabels", "LabelAgreement"]


@dataclass(frozen=True, slots=True)
class LabelAgreement:
    """The judge against the labels: the 2x2 table (agreement, TPR, TNR, kappa) and what was counted apart."""

    table: Agreement
    unmatched: int  # labels on spans none of the evaluations scored
    unseen: int  # labels on positions the judge never saw


class HumanLabels:
    """People's labels, kept in the order given."""

    def __init__(self) -> None:
        self.labels: list[HumanLabel] = []

    def add(self, evaluation: EvaluationRecord, *, position: int, relevant: bool, reason: str | None = None,
            annotator: str | None = None) -> HumanLabel:
        """Label the document at ``position`` (retrieval order) of the span ``evaluation`` scored."""
        return self.add_ids(evaluation.trace_id, evaluation.span_id, position=position, relevant=relevant,
                            reason=reason, annotator=annotator)

    def add_ids(self, trace_id: int, span_id: int, *, position: int, relevant: bool, reason: str | None = None,
                annotator: str | None = None) -> HumanLabel:
        """Label the document at ``position`` of the retrieval span ``span_id`` of trace ``trace_id``."""
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ValueError("position must be an integer >= 0")
        if not isinstance(relevant, bool):
            raise ValueError("relevant must be True or False")
        label = HumanLabel(trace_id, span_id, relevant, position=position, reason=reason, annotator=annotator,
                           where=f"HumanLabels[{len(self.labels)}]")
        self.labels.append(label)
        return label

    def agreement(self, evaluations: Iterable[EvaluationRecord]) -> LabelAgreement:
        """Compare every label with the verdict the evaluations of its span gave at its position."""
        by_span: dict[tuple[int, int], list[EvaluationRecord]] = {}
        for evaluation in evaluations:
            by_span.setdefault((evaluation.trace_id, evaluation.span_id), []).append(evaluation)
        pairs: list[tuple[bool, bool]] = []
        unmatched = unseen = 0
        for label in self.labels:
            found = by_span.get((label.trace_id, label.span_id))
            if not found:
                unmatched += 1
                continue
            seen = False
            for evaluation in found:
                position = label_position(label, len(evaluation.verdicts))
                if position is not None:
                    seen = True
                    pairs.append((evaluation.verdicts[position], label.relevant))
            unseen += not seen
        return LabelAgreement(Agreement.of(pairs), unmatched, unseen)

    def write(self, path: str | Path) -> Path:
        """Write the labels as JSON lines (``cp-observe calibrate --labels PATH``); returns the path."""
        target = Path(path)
        target.write_text("".join(label_line(label) + "\n" for label in self.labels), encoding="utf-8")
        return target
