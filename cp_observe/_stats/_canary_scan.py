"""The canary statistic: one segment value's window against the rest of its data source at the same stage.

``gap_z`` is what the canary rules (deploy/prometheus/canary_rules.py writes them) compute in PromQL for each
window of their scan: the rest's mean minus the value's, less a margin, over the standard error of that
difference with the AP variance of the whole data source at the stage over the window (the same for both sides
when they do not differ) and the spread of a gap between equally good values (``gap_sd``). ``baseline_gap_z`` is
the branch against a recorded baseline MAP, with the value's own variance. Both return None under the minimum
count, as the rules drop the window there. Sums are (count, sum, sum of squares) of AP, what the score histogram
and the squares counter give. Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Gap", "baseline_gap_z", "gap_z"]

Sums = tuple[float, float, float]  # count, sum, sum of squares


@dataclass(frozen=True, slots=True)
class Gap:
    """One window's comparison: z, the gap (reference MAP minus the value's), its standard error, the reference."""

    z: float
    gap: float
    stderr: float
    reference: float
    against: str  # "rest" or "baseline"


def gap_z(value: Sums, total: Sums, *, margin: float, var_floor: float, min_count: float, gap_sd: float
          ) -> Gap | None:
    """The value against the rest of ``total`` (the data source at the stage, value included); None under the minimum.

    rest = total - value; gap = rest mean - value mean;
    SE = sqrt(max(Q/N - (S/N)^2, var_floor) (1/n + 1/n_rest) + gap_sd^2) for the total's count N, sum S and squares
    Q; z = (gap - margin) / SE.
    """
    n, s, _ = value
    big_n, big_s, big_q = total
    rest_n, rest_s = big_n - n, big_s - s
    if n < min_count or rest_n < min_count:
        return None
    var = max(big_q / big_n - (big_s / big_n) ** 2, var_floor)
    se = math.sqrt(var * (1 / n + 1 / rest_n) + gap_sd * gap_sd)
    gap = rest_s / rest_n - s / n
    return Gap((gap - margin) / se, gap, se, rest_s / rest_n, "rest")


def baseline_gap_z(value: Sums, baseline: float, *, margin: float, var_floor: float, min_count: float,
                   gap_sd: float) -> Gap | None:
    """The value against a baseline MAP: z = (baseline - mean - margin) / sqrt(max(var, var_floor) / n + gap_sd^2)."""
    n, s, q = value
    if n < min_count:
        return None
    mean = s / n
    se = math.sqrt(max(q / n - mean**2, var_floor) / n + gap_sd * gap_sd)
    gap = baseline - mean
    return Gap((gap - margin) / se, gap, se, baseline, "baseline")
