"""Count, sum and sum of squares: a mean, its standard error, its interval, and Welch's difference of two means.

These three numbers are what the score histogram and the squares counter export, what the recording rules
aggregate and what the report streams, so every mean and interval here is computed from them alone. The standard
error is the recording rules' ``sqrt(max(Σx²/n - mean², 0) / max(n - 1, 1))`` (the sample variance over n).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Moments", "standard_error", "welch_se"]


def standard_error(count: float, total: float, squares: float) -> float:
    """The standard error of the mean from count, sum and sum of squares (NaN when empty)."""
    if count <= 0:
        return math.nan
    mean = total / count
    return math.sqrt(max(squares / count - mean * mean, 0.0) / max(count - 1, 1))


@dataclass
class Moments:
    """Count, sum and sum of squares of a sample (of average precisions): its mean, SE and interval."""

    count: float = 0
    total: float = 0.0
    total_sq: float = 0.0

    @classmethod
    def of(cls, values: Iterable[float]) -> Moments:
        """The moments of ``values``."""
        out = cls()
        for value in values:
            out.add(value)
        return out

    def add(self, value: float) -> None:
        """Count one value."""
        self.count += 1
        self.total += value
        self.total_sq += value * value

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.count + other.count, self.total + other.total, self.total_sq + other.total_sq)

    def __sub__(self, other: Moments) -> Moments:
        """These moments without ``other``'s (the rest of a data source without one segment value)."""
        return Moments(self.count - other.count, self.total - other.total, self.total_sq - other.total_sq)

    @property
    def mean(self) -> float:
        """The mean (0 when empty)."""
        return self.total / self.count if self.count else 0.0

    @property
    def stderr(self) -> float:
        """The standard error of the mean (``standard_error``)."""
        return standard_error(self.count, self.total, self.total_sq)

    def interval(self, z: float = 1.96) -> tuple[float, float] | None:
        """The mean ± z·SE, clipped to [0, 1] (average precisions); ``None`` below two values."""
        if self.count < 2:
            return None
        half = z * self.stderr
        return max(0.0, self.mean - half), min(1.0, self.mean + half)


def welch_se(first: Moments, second: Moments) -> float:
    """Welch's standard error of ``second.mean - first.mean`` for two independent samples."""
    return math.hypot(first.stderr, second.stderr)
