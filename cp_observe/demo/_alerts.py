"""What the shipped alert rules would say about the demo's degraded phase: the drop, its interval, which alerts fire.

The arithmetic is the rules' (deploy/prometheus/rules/context_precision.rules.yml and
context_precision_detection.rules.yml): the window's mean, its standard error from the sum of squares, and the same z,
thresholds, margin and minimum; ``tests/demo/test_demo_alerts.py`` keeps these constants equal to the rules. The
healthy phase stands in for the regression alert's baseline (the same window on the last seven days), the degraded
phase for one of its windows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cp_observe._stats._moments import Moments
from cp_observe._stats._normal import Z95, Z_RULES
from cp_observe._stats._sequential import drop_z

__all__ = [
    "DROP_THRESHOLD",
    "MINIMUM",
    "REGRESSION_LEVEL_SD",
    "REGRESSION_MARGIN",
    "REGRESSION_Z",
    "VAR_FLOOR",
    "Window",
    "Z",
    "report",
]

Z = Z_RULES  # one-sided 99 %, as ContextPrecisionMAPDrop writes it
DROP_THRESHOLD = 0.5  # ContextPrecisionMAPDrop
REGRESSION_MARGIN = 0.0  # ContextPrecisionMAPRegression: the drop that counts (0: any the evidence shows)
REGRESSION_LEVEL_SD = 0.01  # and the level's day-to-day spread, in its standard error
REGRESSION_Z = 4.8  # ContextPrecisionMAPRegression: the threshold of its family of windows
VAR_FLOOR = 0.01  # ContextPrecisionMAPRegression: the least AP variance it assumes
MINIMUM = 20  # scored evaluations per window; below it ContextPrecisionLowVolume


@dataclass(frozen=True, slots=True)
class Window:
    """Count, mean and standard error of the scores of one window, as the recording rules compute them."""

    count: int
    mean: float
    stderr: float

    @classmethod
    def of(cls, scores: Sequence[float]) -> Window:
        """The statistics of ``scores`` (SE = sqrt((sum of squares / n - mean^2) / (n - 1)))."""
        if not scores:
            return cls(0, math.nan, math.nan)
        moments = Moments.of(scores)
        return cls(len(scores), moments.mean, moments.stderr)


def report(before: Sequence[float], after: Sequence[float]) -> list[str]:
    """Lines saying how far the MAP dropped, with its 95 % interval, and which alerts would fire on it."""
    old, new = Window.of(before), Window.of(after)
    if not old.count or not new.count:
        return ["degraded phase: not enough scored turns to compare"]
    drop = old.mean - new.mean
    se = math.hypot(old.stderr, new.stderr)  # Welch
    lines = [
        f"degraded phase: MAP {old.mean:.2f} -> {new.mean:.2f} over {old.count} + {new.count} scored turns",
        f"  drop {drop:.2f}, 95% interval {drop - Z95 * se:.2f} .. {drop + Z95 * se:.2f}",
    ]
    upper = new.mean + Z * new.stderr
    fires = []
    if new.count < MINIMUM:
        fires.append(f"ContextPrecisionLowVolume ({new.count} < {MINIMUM} scored evaluations: MAP not judged)")
    else:
        if upper < DROP_THRESHOLD:
            fires.append(f"ContextPrecisionMAPDrop (99% upper bound {upper:.2f} < {DROP_THRESHOLD})")
        if old.count >= MINIMUM:
            z = drop_z(new.count, new.count * new.mean, old.count, old.count * old.mean,
                       old.count * (old.stderr**2 * max(old.count - 1, 1) + old.mean**2),
                       margin=REGRESSION_MARGIN, var_floor=VAR_FLOOR, min_count=MINIMUM,
                       level_sd=REGRESSION_LEVEL_SD)
            if z is not None and z > REGRESSION_Z:
                fires.append(f"ContextPrecisionMAPRegression (drop of {z:.1f} standard errors > {REGRESSION_Z})")
    lines.append("  alerts that would fire: " + ("; ".join(fires) if fires else "none"))
    return lines
