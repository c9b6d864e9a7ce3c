"""Prediction-powered inference (PPI, PPI++) for a mean, without numpy.

A judge's scores ``f`` on many items, and gold scores ``y`` on a uniform random few of them, give an estimate
of the mean of ``y`` that is corrected for the judge's bias, with a valid interval (Angelopoulos et al., Science
2023). PPI++ (Angelopoulos, Duchi and Zrnic, 2023) weights the judge by ``lam`` tuned from the data, so the
interval is never wider than the labels' alone by more than noise. The gold score may be a person's label
(calibration) or an LLM judge's score beside a cheap judge's (the cascade); the arithmetic is the same.

The formulas are those of the reference package ``ppi-python`` (``ppi_py.ppi_mean_pointestimate``,
``ppi_mean_ci``, ``classical_mean_ci`` and the PPI++ weight of ``_calc_lam_glm`` for the mean), written out for
one dimension; ``tests/judging/test_ppi_reference.py`` checks them against it. With ``n`` labelled items and
``N`` unlabelled ones::

    estimate = lam * mean(f_unlabelled) + mean(y - lam * f_labelled)
    se^2     = lam^2 * var(f_unlabelled) / N + var(y - lam * f_labelled) / n        (var with 1/n, as numpy's std)
    lam      = cov(y, f_labelled) / ((1 + n / N) * var(f_labelled + f_unlabelled))  (the last with 1/(n+N-1)),
               clipped to [0, 1]

and a normal interval ``estimate -/+ z(1 - alpha/2) * se``. Where the reference divides by zero, this module
defines the outcome: no unlabelled item means the labels alone (``lam`` 0); a judge whose scores do not vary
carries no information (``lam`` 0); no labelled item is an error (nothing corrects the judge).

The assumption the interval rests on: the labelled items are a uniform random subsample of the scored ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cp_observe._stats._normal import z_value

__all__ = [
    "MeanEstimate",
    "PpiDrop",
    "PpiSums",
    "classical_mean",
    "ppi_drop_z",
    "ppi_mean",
    "ppi_mean_from_sums",
    "ppi_sums",
]


@dataclass(frozen=True)
class MeanEstimate:
    """An estimate of a mean with its standard error and two-sided ``1 - alpha`` normal interval.

    Attributes:
        estimate: the point estimate.
        standard_error: its standard error.
        low: the interval's lower end.
        high: the interval's upper end.
        lam: the judge's weight used (1.0 = plain PPI; 0.0 = labels alone).
        labelled: ``n``, the items with a gold score.
        unlabelled: ``N``, the items with a judge's score only.
    """

    estimate: float
    standard_error: float
    low: float
    high: float
    lam: float
    labelled: int
    unlabelled: int


@dataclass(frozen=True)
class PpiSums:
    """The sums a metric pipeline can export, add up over time and turn into a PPI++ estimate.

    Attributes:
        count: items with a judge's score ``f`` (all of them, the labelled ones included).
        sum_f: sum of ``f`` over all items.
        sum_f2: sum of ``f^2`` over all items.
        n: items that also have a gold score ``y`` (the uniform subsample).
        sum_y: sum of ``y`` over the subsample.
        sum_y2: sum of ``y^2`` over the subsample.
        sum_f_sub: sum of ``f`` over the subsample.
        sum_f2_sub: sum of ``f^2`` over the subsample.
        sum_fy: sum of ``f * y`` over the subsample.
    """

    count: int
    sum_f: float
    sum_f2: float
    n: int
    sum_y: float
    sum_y2: float
    sum_f_sub: float
    sum_f2_sub: float
    sum_fy: float


def ppi_sums(y: Sequence[float], f_labelled: Sequence[float], f_unlabelled: Sequence[float]) -> PpiSums:
    """The sums of these items, as a pipeline would export them (``count`` and ``sum_f`` include the labelled)."""
    if len(y) != len(f_labelled):
        raise ValueError(f"y has {len(y)} items but f_labelled has {len(f_labelled)}: they must pair up")
    return PpiSums(
        count=len(f_labelled) + len(f_unlabelled),
        sum_f=math.fsum(f_labelled) + math.fsum(f_unlabelled),
        sum_f2=math.fsum(v * v for v in f_labelled) + math.fsum(v * v for v in f_unlabelled),
        n=len(y),
        sum_y=math.fsum(y),
        sum_y2=math.fsum(v * v for v in y),
        sum_f_sub=math.fsum(f_labelled),
        sum_f2_sub=math.fsum(v * v for v in f_labelled),
        sum_fy=math.fsum(a * b for a, b in zip(f_labelled, y, strict=True)),
    )


def ppi_mean(
    y: Sequence[float],
    f_labelled: Sequence[float],
    f_unlabelled: Sequence[float],
    *,
    lam: float | None = None,
    alpha: float = 0.05,
) -> MeanEstimate:
    """The PPI estimate of the mean of ``y``, with its interval; ``lam`` None tunes it (PPI++, clipped to [0, 1]).

    Args:
        y: gold scores of the labelled items.
        f_labelled: the judge's scores of the same items, in the same order.
        f_unlabelled: the judge's scores of the items without a gold score.
        lam: the judge's weight; 1.0 is plain PPI, 0.0 the labels alone, None the PPI++ tuned weight.
        alpha: the interval is two-sided ``1 - alpha``.

    Raises:
        ValueError: no labelled item, ``y`` and ``f_labelled`` of different lengths, or ``alpha`` out of (0, 1).
    """
    return ppi_mean_from_sums(ppi_sums(y, f_labelled, f_unlabelled), lam=lam, alpha=alpha)


def ppi_mean_from_sums(s: PpiSums, *, lam: float | None = None, alpha: float = 0.05) -> MeanEstimate:
    """The PPI (or, with ``lam`` None, PPI++) estimate from exported sums; equals ``ppi_mean`` on the same items.

    The unlabelled items are all the items less the subsample: ``N = count - n``.

    Raises:
        ValueError: no labelled item, more labelled items than items, or ``alpha`` out of (0, 1).
    """
    z = z_value(alpha)
    n = s.n
    big_n = s.count - s.n
    if n < 1:
        raise ValueError("a PPI estimate needs at least one labelled item: nothing corrects the judge without one")
    if big_n < 0:
        raise ValueError(f"{n} labelled items but only {s.count} items in all: the labelled are a subsample")
    mean_y = s.sum_y / n
    mean_f_sub = s.sum_f_sub / n
    var_y = _clamp(s.sum_y2 / n - mean_y * mean_y)
    var_f_sub = _clamp(s.sum_f2_sub / n - mean_f_sub * mean_f_sub)
    cov_fy = s.sum_fy / n - mean_y * mean_f_sub
    if big_n == 0:
        weight = 0.0  # nothing unlabelled to carry: the labels alone (the reference divides by zero here)
        mean_f_unl = var_f_unl = 0.0
    else:
        mean_f_unl = (s.sum_f - s.sum_f_sub) / big_n
        var_f_unl = _clamp((s.sum_f2 - s.sum_f2_sub) / big_n - mean_f_unl * mean_f_unl)
        weight = _tuned_lam(s, cov_fy) if lam is None else float(lam)
    estimate = weight * mean_f_unl + (mean_y - weight * mean_f_sub)
    rectifier_var = _clamp(var_y + weight * weight * var_f_sub - 2.0 * weight * cov_fy)
    imputed_var = weight * weight * var_f_unl
    se = math.sqrt(rectifier_var / n + (imputed_var / big_n if big_n else 0.0))
    return MeanEstimate(estimate, se, estimate - z * se, estimate + z * se, weight, n, big_n)


def classical_mean(y: Sequence[float], *, alpha: float = 0.05) -> MeanEstimate:
    """The mean of the labels alone with its normal interval (the reference's ``classical_mean_ci``).

    Raises:
        ValueError: no item, or ``alpha`` out of (0, 1).
    """
    z = z_value(alpha)
    n = len(y)
    if n < 1:
        raise ValueError("a mean needs at least one item")
    mean = math.fsum(y) / n
    var = _clamp(math.fsum((v - mean) ** 2 for v in y) / n)
    se = math.sqrt(var / n)
    return MeanEstimate(mean, se, mean - z * se, mean + z * se, 0.0, n, 0)


@dataclass(frozen=True)
class PpiDrop:
    """A window's PPI++ MAP against a pooled baseline's: what the drop detection computes where the cascade runs.

    Attributes:
        z: (baseline - window - margin) / standard_error.
        drop: baseline mean - window mean.
        standard_error: the drop's standard error.
        baseline_mean: the baseline's PPI++ MAP.
        mean: the window's PPI++ MAP (with the baseline's weight).
        lam: the baseline's PPI++ weight, used on both sides.
        labelled: the window's LLM-judged items ``n``.
        baseline_labelled: the baseline's.
    """

    z: float
    drop: float
    standard_error: float
    baseline_mean: float
    mean: float
    lam: float
    labelled: float
    baseline_labelled: float


def ppi_drop_z(
    window: PpiSums, baseline: PpiSums, *, margin: float, var_floor: float, min_count: float, level_sd: float
) -> PpiDrop | None:
    """The drop of a window's PPI++ MAP below a pooled baseline's, in standard errors less a margin.

    No code of the live path calls it: it is the reference, in Python, for the arithmetic the drop-detection rules
    compute in PromQL where the cascade runs (``deploy/prometheus/detection_rules.py`` writes them; the deploy
    README and the cascade how-to cite it), and the rules' promtool scenarios and the alert benchmark are checked
    against it. So it ships with the wheel, beside the PPI++ weight it shares.

    The weight and the variances are the baseline's (seven days of evidence against the window's minutes; the
    same under no change), so one noisy window cannot tune its own weight towards a false alarm::

        lam     = the baseline's PPI++ weight (as ppi_mean_from_sums; 0 with no unlabelled item)
        mean    = mean(y) + lam * (mean(f_unlabelled) - mean(f_sub))     for the window and for the baseline
                  (a side with no unlabelled item takes mean(f_sub) there: the labels alone)
        se^2    = max(var(y - lam f_sub), var_floor) (1/n + 1/n_b) + lam^2 var(f_unlabelled)_b (1/N + 1/N_b)
                  + level_sd^2        (N and N_b at least 1; level_sd as drop_z's in cp_observe/_stats)
        z       = (baseline mean - mean - margin) / se

    None when either side has fewer than ``min_count`` labelled items.
    """
    if window.n < min_count or baseline.n < min_count:
        return None
    b = baseline
    n_b, big_n_b = b.n, b.count - b.n
    mean_y = b.sum_y / n_b
    mean_f_sub = b.sum_f_sub / n_b
    var_y = _clamp(b.sum_y2 / n_b - mean_y * mean_y)
    var_f_sub = _clamp(b.sum_f2_sub / n_b - mean_f_sub * mean_f_sub)
    cov_fy = b.sum_fy / n_b - mean_y * mean_f_sub
    if big_n_b > 0:
        lam = _tuned_lam(b, cov_fy)
        mean_f_unl = (b.sum_f - b.sum_f_sub) / big_n_b
        var_f_unl = _clamp((b.sum_f2 - b.sum_f2_sub) / big_n_b - mean_f_unl * mean_f_unl)
    else:
        lam, mean_f_unl, var_f_unl = 0.0, mean_f_sub, 0.0
    residual = max(var_y + lam * lam * var_f_sub - 2.0 * lam * cov_fy, var_floor)
    base = mean_y + lam * (mean_f_unl - mean_f_sub)
    n, big_n = window.n, window.count - window.n
    w_f_sub = window.sum_f_sub / n
    w_f_unl = (window.sum_f - window.sum_f_sub) / big_n if big_n > 0 else w_f_sub
    mean = window.sum_y / n + lam * (w_f_unl - w_f_sub)
    se = math.sqrt(residual * (1 / n + 1 / n_b) + lam * lam * var_f_unl * (1 / max(big_n, 1) + 1 / max(big_n_b, 1))
                   + level_sd * level_sd)
    drop = base - mean
    return PpiDrop((drop - margin) / se, drop, se, base, mean, lam, n, n_b)


def _tuned_lam(s: PpiSums, cov_fy: float) -> float:
    """PPI++'s weight for the mean: ``cov(y, f) / ((1 + n/N) var(f))``, clipped to [0, 1]; 0 for a constant judge."""
    n, big_n, count = s.n, s.count - s.n, s.count
    if count < 2:
        return 0.0
    var_f_all = _clamp((s.sum_f2 - s.sum_f * s.sum_f / count) / (count - 1))
    denominator = (1.0 + n / big_n) * var_f_all
    if denominator <= 0.0:
        return 0.0  # the judge's scores do not vary: they carry nothing (the reference divides by zero here)
    return min(1.0, max(0.0, cov_fy / denominator))


def _clamp(variance: float) -> float:
    """A variance from sums can come out a rounding error below zero."""
    return variance if variance > 0.0 else 0.0
