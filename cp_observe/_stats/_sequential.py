"""Change detection on a mean: the drop-detection rules' statistic and the oracle it is measured against.

``drop_z`` is the per-window statistic the shipped rules compute in PromQL (deploy/prometheus/detection_rules.py
writes them): the drop of a window's mean below a pooled baseline, less a margin, over its standard error taken
from the baseline's variance and the level's day-to-day spread. ``OracleCusum`` is Page's CUSUM for a drop of known
size from a known (possibly time-varying) mean with a known standard deviation: by Lorden's bound no detector with
the same false-alarm rate is faster on average, so it is the limit a rule's delay is reported against. Standard
library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["OracleCusum", "drop_z", "lorden_threshold"]


def drop_z(
    count: float, total: float, baseline_count: float, baseline_total: float, baseline_squares: float,
    *, margin: float, var_floor: float, min_count: float, level_sd: float,
) -> float | None:
    """(baseline mean - window mean - margin) / SE; None under the minimum.

    SE = sqrt(max(Q/N - (S/N)^2, var_floor) * (1/n + 1/N) + level_sd^2), for the window's count n and sum, and the
    baseline's count N, sum S and sum of squares Q. ``level_sd`` is how far a healthy day's MAP strays from the
    pooled baseline's at the same time of day (the weekly rhythm): no window, however many evaluations it holds,
    can know today's level better than that.
    """
    if count < min_count or baseline_count < min_count:
        return None
    base = baseline_total / baseline_count
    var = max(baseline_squares / baseline_count - base * base, var_floor)
    se = math.sqrt(var * (1 / count + 1 / baseline_count) + level_sd * level_sd)
    return (base - total / count - margin) / se


def lorden_threshold(false_alarm_every: float) -> float:
    """CUSUM threshold h = log(ARL0): at most one false alarm per ``false_alarm_every`` observations on average."""
    if false_alarm_every <= 1:
        raise ValueError(f"false_alarm_every must exceed 1, got {false_alarm_every}")
    return math.log(false_alarm_every)


@dataclass
class OracleCusum:
    """Page's CUSUM for a drop ``drop`` from a known mean, with a known standard deviation, on batches.

    Each ``update`` takes one batch (count, sum) drawn while the pre-change mean was ``mean`` and the standard
    deviation ``sigma``; the Gaussian log-likelihood ratio of the batch, drop vs none, is added and the
    statistic floored at 0 (per batch: a batch of one evaluation is the textbook per-observation CUSUM).
    """

    drop: float
    threshold: float
    statistic: float = field(default=0.0)

    def update(self, count: float, total: float, mean: float, sigma: float) -> bool:
        """Add a batch; True when the statistic exceeds the threshold (then it restarts from 0)."""
        if count:
            k = self.drop / (sigma * sigma)
            self.statistic = max(0.0, self.statistic + k * (count * mean - total - count * self.drop / 2))
        if self.statistic > self.threshold:
            self.statistic = 0.0
            return True
        return False
