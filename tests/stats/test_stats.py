"""The shared statistics against oracles: the standard library's, hand computations and seeded simulations."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from cp_observe._stats._canary import MARGIN, MIN_COUNT, shortfall, verdict
from cp_observe._stats._moments import Moments, standard_error, welch_se
from cp_observe._stats._normal import Z95, Z_RULES, z_one_sided, z_two_sided, z_value
from cp_observe._stats._proportions import kappa, wilson

TRIALS = 2_000


def test_moments_match_the_standard_library() -> None:
    """Mean and SE from count, sum and squares equal statistics' over the values."""
    values = [0.0, 0.25, 0.5, 1.0, 1.0, 0.83, 0.33]
    moments = Moments.of(values)
    assert moments.mean == pytest.approx(statistics.fmean(values))
    assert moments.stderr == pytest.approx(statistics.stdev(values) / math.sqrt(len(values)))
    assert standard_error(moments.count, moments.total, moments.total_sq) == moments.stderr


def test_moments_at_the_edges() -> None:
    """Empty: mean 0, SE NaN, no interval; one value: SE 0, no interval; sums add and subtract back."""
    assert Moments().mean == 0.0 and math.isnan(Moments().stderr) and Moments().interval() is None
    assert Moments.of([0.7]).stderr == 0.0 and Moments.of([0.7]).interval() is None
    a, b = Moments.of([0.1, 0.9]), Moments.of([0.5, 0.5, 1.0])
    back = a + b - b
    assert (back.count, back.total, back.total_sq) == pytest.approx((a.count, a.total, a.total_sq))


def test_normal_quantiles() -> None:
    """Two-sided 95 % is 1.96, one-sided 99 % is 2.326, z_value agrees with both; the rules' z is 2.33."""
    assert z_two_sided(0.95) == pytest.approx(Z95)
    assert z_value(0.05) == pytest.approx(Z95)
    assert z_one_sided(0.99) == pytest.approx(2.3263, abs=1e-4)
    assert z_value(0.01, two_sided=False) == pytest.approx(z_one_sided(0.99))
    assert round(z_one_sided(0.99), 2) == Z_RULES
    with pytest.raises(ValueError, match="alpha"):
        z_value(1.0)


def test_the_mean_interval_covers_the_true_mean_at_its_level() -> None:
    """A seeded simulation: the 95 % interval of a mean of 200 Beta-like APs covers the true mean ~95 % of the time."""
    rng = random.Random(7)
    covered = 0
    for _ in range(TRIALS):
        moments = Moments.of(rng.betavariate(2, 3) for _ in range(200))
        low, high = moments.interval(Z95) or (math.nan, math.nan)
        covered += low <= 0.4 <= high
    assert 0.93 <= covered / TRIALS <= 0.97


def test_welch_se_and_its_coverage() -> None:
    """Welch's SE is the root of the summed squared SEs; its 95 % interval covers the true difference ~95 %."""
    first, second = [0.2, 0.4, 0.9], [0.1, 0.1, 0.5, 0.7]
    a, b = Moments.of(first), Moments.of(second)
    expected = math.sqrt(statistics.variance(first) / 3 + statistics.variance(second) / 4)
    assert welch_se(a, b) == pytest.approx(expected)
    rng = random.Random(11)
    covered = 0
    for _ in range(TRIALS):
        first = Moments.of(rng.betavariate(2, 3) for _ in range(120))  # mean 0.4
        second = Moments.of(rng.betavariate(3, 2) for _ in range(80))  # mean 0.6
        diff, half = second.mean - first.mean, Z95 * welch_se(first, second)
        covered += diff - half <= 0.2 <= diff + half
    assert 0.93 <= covered / TRIALS <= 0.97


def test_wilson_by_hand_and_by_simulation() -> None:
    """15 of 20 by hand (Wilson 1927); the interval covers p = 0.1 at n = 30 at least ~93 % of the time."""
    share = wilson(15, 20)
    centre = (0.75 + Z95 ** 2 / 40) / (1 + Z95 ** 2 / 20)
    half = Z95 * math.sqrt(0.75 * 0.25 / 20 + Z95 ** 2 / 1600) / (1 + Z95 ** 2 / 20)
    assert (share.low, share.high) == pytest.approx((centre - half, centre + half))
    assert wilson(0, 5).low == 0.0 and wilson(5, 5).high == 1.0 and wilson(0, 0).value is None
    rng = random.Random(3)
    hits = 0
    for _ in range(TRIALS):
        p = wilson(sum(rng.random() < 0.1 for _ in range(30)), 30)
        hits += (p.low or 0.0) <= 0.1 <= (p.high or 1.0)
    assert hits / TRIALS >= 0.93


def test_kappa_against_its_definition() -> None:
    """κ = (p_o - p_e) / (1 - p_e) of a 2x2 table; undefined (None) when p_e = 1; perfect agreement is 1."""
    k, se, low, high = kappa(8, 2, 3, 7)
    observed, expected = 15 / 20, (10 / 20) * (11 / 20) + (10 / 20) * (9 / 20)
    assert k == pytest.approx((observed - expected) / (1 - expected))
    assert se is not None and low is not None and high is not None and low < k < high
    assert kappa(5, 0, 0, 0) == (None, None, None, None)
    assert kappa(4, 0, 0, 6)[0] == pytest.approx(1.0)


def test_the_canary_bound_and_verdict() -> None:
    """The bound is gap - z·Welch SE; a value 0.3 below fires, 0.02 below stays quiet, below MIN_COUNT is not judged."""
    rng = random.Random(5)
    rest = Moments.of(min(1.0, max(0.0, rng.gauss(0.8, 0.1))) for _ in range(300))
    bad = Moments.of(min(1.0, max(0.0, rng.gauss(0.5, 0.1))) for _ in range(300))
    gap, bound = shortfall(bad, rest)
    assert gap == pytest.approx(rest.mean - bad.mean)
    assert bound == pytest.approx(gap - Z_RULES * math.hypot(bad.stderr, rest.stderr))
    assert verdict(bad, rest + bad).fires and verdict(bad, rest + bad).bound > MARGIN
    close = Moments.of(min(1.0, max(0.0, rng.gauss(0.78, 0.1))) for _ in range(300))
    assert not verdict(close, rest + close).fires
    thin = Moments.of([0.0] * (MIN_COUNT - 1))
    assert verdict(thin, rest + thin).against == ""
