"""Which evaluations become test cases: score, segment, data source, time range and the worst N, combinable.

Every filter given must hold (a repeated ``--segment`` of one name, or a repeated data source, is an "or").
What is left out is counted under the first filter it failed, so the command can say what it skipped and why.
The worst N are kept in a heap of N, so memory grows with N, not with the input.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from cp_observe import _names as n
from cp_observe._config._segments import label_name
from cp_observe.dataset._record import Record

__all__ = ["Selection", "Selector", "parse_segment"]


def parse_segment(text: str) -> tuple[str, str]:
    """``name=value`` (the attribute or its label name) as (label name, value); raises ``ValueError``."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--segment wants NAME=VALUE, got {text!r}")
    return label_name(name.strip()), value


@dataclass(frozen=True)
class Selection:
    """The filters; ``None`` (or empty) means the filter is off."""

    max_score: float | None = None  # keep scores <= this
    segments: Mapping[str, frozenset[str]] = field(default_factory=dict)  # label name -> values kept
    data_sources: frozenset[str] | None = None
    since: datetime | None = None
    until: datetime | None = None
    worst: int | None = None

    def __post_init__(self) -> None:
        if self.worst is not None and self.worst < 1:
            raise ValueError("--worst must be >= 1")
        if self.max_score is not None and self.max_score < 0:
            raise ValueError("--max-score must be >= 0")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValueError("--since must be before --until")


class Selector:
    """Applies a ``Selection`` to records one at a time; ``selected()`` gives the kept ones, in input order."""

    def __init__(self, selection: Selection) -> None:
        self.selection = selection
        self.skipped: Counter[str] = Counter()
        self._since = int(selection.since.timestamp() * 1e9) if selection.since is not None else None
        self._until = int(selection.until.timestamp() * 1e9) if selection.until is not None else None
        self._kept: list[tuple[float, int, Record]] = []  # a max-heap on score (negated) when worst is set
        self._sequence = 0

    def offer(self, record: Record) -> None:
        """Keep ``record`` if every filter holds, else count why not."""
        reason = self._refusal(record)
        if reason is not None:
            self.skipped[reason] += 1
            return
        self._sequence += 1
        entry = (-record.score, -self._sequence, record)
        worst = self.selection.worst
        if worst is None or len(self._kept) < worst:
            heapq.heappush(self._kept, entry)
            return
        self.skipped[f"not among the worst {worst}"] += 1
        if entry > self._kept[0]:  # lower score (or as low and earlier) than the best kept
            heapq.heapreplace(self._kept, entry)

    def offer_all(self, records: Iterable[Record]) -> None:
        for record in records:
            self.offer(record)

    def selected(self) -> list[Record]:
        """The kept records in input order (the worst N: lowest score first)."""
        if self.selection.worst is not None:
            return [r for _, _, r in sorted(self._kept, key=lambda e: (-e[0], -e[1]))]
        return [r for _, _, r in sorted(self._kept, key=lambda e: -e[1])]

    def _refusal(self, record: Record) -> str | None:
        s = self.selection
        if s.max_score is not None and record.score > s.max_score:
            return f"score above --max-score {s.max_score:g}"
        if s.data_sources is not None and record.data_source not in s.data_sources:
            return "other data source"
        for name, values in s.segments.items():
            if record.segments.get(name, n.SEGMENT_NONE) not in values:  # missing reads as `none`, as on the series
                return f"other {name} segment value"
        if self._since is not None and record.time_unix_nano < self._since:
            return "before --since"
        if self._until is not None and record.time_unix_nano >= self._until:
            return "at or after --until"
        return None
