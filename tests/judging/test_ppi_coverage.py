"""PPI's intervals are valid with a biased judge and PPI++ costs nothing with a useless one (seeded simulation).

Each run draws a uniform labelled subsample and the rest of the scored items from one population whose true
mean is known exactly, so coverage is counted, not assumed.
"""

from __future__ import annotations

import random
import statistics

import pytest

from cp_observe._judging._ppi import classical_mean, ppi_mean

#: Per-retrieval AP values and their weights: the population whose mean the intervals must cover.
_VALUES = (0.0, 0.33, 0.5, 0.58, 0.83, 1.0)
_WEIGHTS = (0.15, 0.1, 0.15, 0.1, 0.2, 0.3)
TRUE_MEAN = sum(v * w for v, w in zip(_VALUES, _WEIGHTS, strict=True)) / sum(_WEIGHTS)
RUNS = 2000


def _biased_judge(rng: random.Random, y: float) -> float:
    """A judge that under-scores by about 0.15 and is noisy: its mean alone misses the truth by far."""
    return min(1.0, max(0.0, 0.8 * y - 0.05 + rng.uniform(-0.15, 0.15)))


def _draw(rng: random.Random, n: int, big_n: int) -> tuple[list[float], list[float], list[float]]:
    ys = rng.choices(_VALUES, _WEIGHTS, k=n + big_n)
    fs = [_biased_judge(rng, y) for y in ys]
    return ys[:n], fs[:n], fs[n:]


@pytest.mark.parametrize(("method", "lam"), [("PPI", 1.0), ("PPI++", None)])
def test_the_95_interval_covers_the_true_mean_93_to_97_percent_of_2000_runs(method: str, lam: float | None) -> None:
    """With a judge biased by ~0.15, the corrected 95 % interval covers the true mean in 93-97 % of runs."""
    rng = random.Random(24)
    covered = 0
    judge_only_covered = 0
    for _ in range(RUNS):
        y, f_lab, f_unl = _draw(rng, 80, 400)
        got = ppi_mean(y, f_lab, f_unl, lam=lam)
        covered += got.low <= TRUE_MEAN <= got.high
        judge_mean = statistics.fmean(f_lab + f_unl)
        judge_only_covered += abs(judge_mean - TRUE_MEAN) < 0.05
    assert 0.93 <= covered / RUNS <= 0.97, f"{method} covered {covered} of {RUNS}"
    # The judge alone is off by more than 0.05 almost always: the correction is what makes the coverage.
    assert judge_only_covered / RUNS < 0.05


def test_ppi_plus_plus_is_no_wider_than_labels_alone_when_the_judge_is_useless() -> None:
    """A judge independent of the truth: PPI++'s interval is at most noise wider than the labels' alone.

    Plain PPI is measurably wider there (it adds the judge's variance), which shows the check can fail.
    """
    rng = random.Random(7)
    ppi_pp_widths, classical_widths, ppi_widths = [], [], []
    for _ in range(RUNS // 2):
        y = rng.choices(_VALUES, _WEIGHTS, k=60)
        f_lab = [rng.random() for _ in y]
        f_unl = [rng.random() for _ in range(300)]
        ppi_pp_widths.append(ppi_mean(y, f_lab, f_unl).high - ppi_mean(y, f_lab, f_unl).low)
        ppi_widths.append(ppi_mean(y, f_lab, f_unl, lam=1.0).high - ppi_mean(y, f_lab, f_unl, lam=1.0).low)
        classical = classical_mean(y)
        classical_widths.append(classical.high - classical.low)
    ratio = statistics.fmean(ppi_pp_widths) / statistics.fmean(classical_widths)
    assert ratio <= 1.03, f"PPI++ is {ratio:.3f}x as wide as labels alone"
    assert statistics.fmean(ppi_widths) / statistics.fmean(classical_widths) > 1.1


def test_ppi_plus_plus_is_narrower_than_labels_alone_when_the_judge_tracks_the_truth() -> None:
    """With the biased but correlated judge, PPI++'s interval is clearly narrower than the labels' alone."""
    rng = random.Random(11)
    ratios = []
    for _ in range(200):
        y, f_lab, f_unl = _draw(rng, 80, 400)
        got, classical = ppi_mean(y, f_lab, f_unl), classical_mean(y)
        ratios.append((got.high - got.low) / (classical.high - classical.low))
    assert statistics.fmean(ratios) < 0.6
