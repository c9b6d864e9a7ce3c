"""A share with its Wilson score interval, and Cohen's κ of a 2x2 table with its large-sample interval.

- Wilson score interval (Wilson 1927): stays inside [0, 1] and behaves at 0 and n.
- Cohen's κ = (p_o - p_e) / (1 - p_e), with the large-sample standard error of Fleiss, Cohen and Everitt
  (1969, "Large sample standard errors of kappa and weighted kappa", Psychological Bulletin 72(5)) and the
  interval κ ± z·SE, clipped to [-1, 1]. When p_e = 1 (both raters gave one answer throughout) κ is undefined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cp_observe._stats._normal import Z95

__all__ = ["Proportion", "kappa", "wilson"]

@dataclass(frozen=True, slots=True)
class Proportion:
    """A share with its 95 % interval (``None`` figures when the denominator is 0)."""

    value: float | None
    low: float | None
    high: float | None
    successes: int
    total: int


def wilson(successes: int, total: int, *, z: float = Z95) -> Proportion:
    """The share ``successes / total`` and its Wilson score interval."""
    if total <= 0:
        return Proportion(None, None, None, successes, total)
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exactly 0 and 1 there; rounding would miss them
    high = 1.0 if successes == total else min(1.0, centre + half)
    return Proportion(p, low, high, successes, total)


def kappa(tp: int, fp: int, fn: int, tn: int, *, z: float = Z95) -> tuple[float | None, float | None, float | None,
                                                                         float | None]:
    """Cohen's κ of the 2x2 table, its standard error (Fleiss, Cohen and Everitt 1969) and the 95 % interval.

    Returns ``(kappa, se, low, high)``; all ``None`` when the table is empty or κ is undefined (p_e = 1).
    """
    n = tp + fp + fn + tn
    if n == 0:
        return None, None, None, None
    # p[i][j]: judge says i, person says j (1 relevant, 0 not).
    p = [[tn / n, fn / n], [fp / n, tp / n]]
    judge = [p[0][0] + p[0][1], p[1][0] + p[1][1]]
    person = [p[0][0] + p[1][0], p[0][1] + p[1][1]]
    observed = p[0][0] + p[1][1]
    expected = judge[0] * person[0] + judge[1] * person[1]
    if expected >= 1.0:
        return None, None, None, None
    k = (observed - expected) / (1 - expected)
    total = sum(p[i][i] * (1 - (judge[i] + person[i]) * (1 - k)) ** 2 for i in (0, 1))
    total += (1 - k) ** 2 * sum(p[i][j] * (person[i] + judge[j]) ** 2 for i in (0, 1) for j in (0, 1) if i != j)
    total -= (k - expected * (1 - k)) ** 2
    se = math.sqrt(max(0.0, total) / (n * (1 - expected) ** 2))
    return k, se, max(-1.0, k - z * se), min(1.0, k + z * se)
