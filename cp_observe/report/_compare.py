"""The statistics of the report beyond one data source's MAP: A/B verdicts, segments, canaries, rerank lift.

- **A/B verdict** (``report --compare``): where the same evaluations appear in both runs (the same scored span,
  by trace and span id; else the same data source and query), the difference is paired: the mean of per-key
  differences ± z·s/√n over the keys both runs hold (a key seen several times in a run counts as its mean).
  With fewer than two shared keys it is Welch's unpaired difference of MAPs. At confidence c the second run
  is **worse** when the whole two-sided c-interval of (second - first) is below 0, **better** when it is
  above 0, else **no difference**. ``report`` exits non-zero on worse, for CI.
- **Segments**: MAP, n and the 95 % interval per segment value (``context_precision.segment.*`` on the
  evaluation spans), per data source.
- **Canary**: each segment value against the rest of its data source: the difference (value - rest) and the
  99 % one-sided upper bound of it (Welch), from count, sum and sum of squares; the value is flagged worse
  when that bound is below 0. One comparison over the whole run (the live canary alert, which checks many
  windows every minute, needs a higher threshold for the same confidence).
- **Rerank lift**: per reranked evaluation the AP before (the retrieved order) and after (what the reranker
  kept), their lift and the relevant documents the reranker dropped.

Memory: per key two numbers, at most ``MAX_KEYS`` keys per run (more are counted, not paired); segment
values at most ``MAX_SEGMENT_VALUES`` per data source and segment (more fold into ``other``, counted);
rerank points at most ``MAX_RERANK_POINTS`` in the chart (the totals count all).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cp_observe import _names as n
from cp_observe._stats._canary import shortfall
from cp_observe._stats._moments import Moments, welch_se
from cp_observe._stats._normal import z_one_sided, z_two_sided

__all__ = ["MAX_KEYS", "MAX_RERANK_POINTS", "MAX_SEGMENT_VALUES", "Comparison", "Paired", "Rerank", "Segments",
           "compare"]

MAX_KEYS = 200_000
MAX_SEGMENT_VALUES = 200
MAX_RERANK_POINTS = 2_000
CANARY_CONFIDENCE = 0.99


@dataclass
class Paired:
    """Per evaluation key, the count and sum of its average precisions (bounded)."""

    keys: dict[str, list[float]] = field(default_factory=dict)
    over: int = 0

    def add(self, key: str, value: float) -> None:
        slot = self.keys.get(key)
        if slot is None:
            if len(self.keys) >= MAX_KEYS:
                self.over += 1
                return
            slot = self.keys[key] = [0.0, 0.0]
        slot[0] += 1
        slot[1] += value


@dataclass
class Segments:
    """Moments per (data source, segment label, value), with the data source's own moments."""

    by_value: dict[tuple[str, str], dict[str, Moments]] = field(default_factory=dict)
    sources: dict[str, Moments] = field(default_factory=dict)
    overflow: int = 0

    def add(self, source: str, segments: dict[str, str], value: float) -> None:
        if not segments:
            return
        self.sources.setdefault(source, Moments()).add(value)
        for label, given in segments.items():
            values = self.by_value.setdefault((source, label), {})
            kept = given
            if given not in values and len(values) >= MAX_SEGMENT_VALUES:
                self.overflow += 1
                kept = n.SEGMENT_OTHER
            values.setdefault(kept, Moments()).add(value)

    def canary(self, source: str, label: str, value: str) -> tuple[float, float | None]:
        """(value - rest) of the data source, and its 99 % one-sided upper bound (``None`` when a side has n < 2)."""
        one = self.by_value[(source, label)][value]
        rest = self.sources[source] - one
        gap, bound = shortfall(one, rest, z_one_sided(CANARY_CONFIDENCE))
        return -gap, (None if one.count < 2 or rest.count < 2 else -bound)


@dataclass
class Rerank:
    """Reranked evaluations: the points of the chart (bounded) and the totals over all."""

    points: list[tuple[float, float, float, int]] = field(default_factory=list)  # before, after, lift, dropped
    count: int = 0
    lift_total: float = 0.0
    dropped_total: int = 0
    improved: int = 0
    worsened: int = 0

    def add(self, before: float, after: float, lift: float, dropped: int) -> None:
        self.count += 1
        self.lift_total += lift
        self.dropped_total += dropped
        self.improved += lift > 0
        self.worsened += lift < 0
        if len(self.points) < MAX_RERANK_POINTS:
            self.points.append((before, after, lift, dropped))


@dataclass(frozen=True)
class Comparison:
    """The A/B verdict of the second run against the first."""

    first_map: float
    second_map: float
    difference: float
    interval: tuple[float, float] | None
    paired: int  # shared keys the difference is over (0: unpaired, Welch)
    confidence: float
    verdict: str  # "better", "worse", "no difference", or "too few evaluations"


def compare(first: Moments, second: Moments, first_keys: Paired, second_keys: Paired,
            confidence: float = 0.95) -> Comparison:
    """The verdict of ``second`` against ``first`` at ``confidence`` (see the module docstring)."""
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    z = z_two_sided(confidence)
    differences = Moments()
    for key, (count, total) in second_keys.keys.items():
        slot = first_keys.keys.get(key)
        if slot is not None:
            differences.add(total / count - slot[1] / slot[0])
    if differences.count >= 2:
        diff = differences.mean
        half = z * differences.stderr
        paired = int(differences.count)
    else:
        diff = second.mean - first.mean
        paired = 0
        if first.count < 2 or second.count < 2:
            return Comparison(first.mean, second.mean, diff, None, 0, confidence, "too few evaluations")
        half = z * welch_se(first, second)
    interval = (diff - half, diff + half)
    verdict = "worse" if interval[1] < 0 else "better" if interval[0] > 0 else "no difference"
    return Comparison(first.mean, second.mean, diff, interval, paired, confidence, verdict)
