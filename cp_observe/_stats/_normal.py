"""Standard normal quantiles: the z of a two-sided interval or a one-sided bound, and the rules' fixed z."""

from __future__ import annotations

from statistics import NormalDist

__all__ = ["Z95", "Z_RULES", "z_one_sided", "z_two_sided", "z_value"]

Z95 = 1.959963984540054  # the 97.5 % point: a two-sided 95 % interval
Z_RULES = 2.33  # the one-sided 99 % z the shipped alert rules write (rounded, as PromQL holds it)


def z_two_sided(confidence: float) -> float:
    """The normal quantile of a two-sided interval at ``confidence`` (0.95 gives 1.96)."""
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def z_one_sided(confidence: float) -> float:
    """The normal quantile of a one-sided bound at ``confidence`` (0.99 gives 2.326)."""
    return NormalDist().inv_cdf(confidence)


def z_value(alpha: float, *, two_sided: bool = True) -> float:
    """The standard normal quantile for a ``1 - alpha`` interval (two-sided) or bound (one-sided)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return NormalDist().inv_cdf(1.0 - (alpha / 2.0 if two_sided else alpha))
