"""Change detection on a mean: the drop-detection rules' statistic.

``drop_z`` is the per-window statistic the shipped rules compute in PromQL (deploy/prometheus/detection_rules.py
writes them): the drop of a window's mean below a pooled baseline, less a margin, over its standard error taken
from the baseline's variance and the level's day-to-day spread. The oracle CUSUM the rules' delay is measured
against is the benchmarks' (``benchmarks/_oracle.py``): it knows the truth, so the wheel does not carry it.
Standard library only.
"""

from __future__ import annotations

import math

__all__ = ["drop_z"]


def drop_z(
    count: float, total: float, baseline_count: float, baseline_total: float, baseline_squares: float,
    *, margin: float, var_floor: float, min_count: float, level_sd: float, shift: float = 0.0,
    shift_var: float = 0.0,
) -> float | None:
    """(baseline mean - window mean - margin) / SE; None under the minimum.

    SE = sqrt(max(Q/N - (S/N)^2, var_floor) * (1/n + 1/N) + shift_var + level_sd^2), for the window's count n and
    sum, and the baseline's count N, sum S and sum of squares Q; the baseline mean is S/N + ``shift``, the weekly
    shift the rules estimate from the same weekday a week ago (``shift_var`` its variance). ``level_sd`` is how far
    a healthy day's MAP strays from that baseline at the same time of day: no window, however many evaluations it
    holds, can know today's level better than that.
    """
    if count < min_count or baseline_count < min_count:
        return None
    pool = baseline_total / baseline_count
    var = max(baseline_squares / baseline_count - pool * pool, var_floor)
    se = math.sqrt(var * (1 / count + 1 / baseline_count) + shift_var + level_sd * level_sd)
    return (pool + shift - total / count - margin) / se
