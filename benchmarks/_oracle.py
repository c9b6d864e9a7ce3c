"""The oracle the alert simulations measure the shipped rules against: Page's CUSUM and Lorden's threshold.

``OracleCusum`` is Page's CUSUM for a drop of known size from a known (possibly time-varying) mean with a known
standard deviation: by Lorden's bound no detector with the same false-alarm rate is faster on average, so it is
the limit a rule's delay is reported against. It knows the truth a deployed rule cannot, so it lives beside the
benchmarks rather than in the wheel. Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["OracleCusum", "lorden_threshold"]


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
