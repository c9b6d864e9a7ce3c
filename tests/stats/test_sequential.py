"""The drop statistic and the oracle CUSUM: the formulas, the threshold, the minimum, the false-alarm rate."""

from __future__ import annotations

import math
import random

import pytest

from cp_observe._stats._sequential import OracleCusum, drop_z, lorden_threshold


def test_drop_z_is_the_drop_less_the_margin_over_the_baselines_standard_error() -> None:
    """Baseline 0.7 (variance 0.09) over 700, window 0.5 over 100: z = (0.2 - 0.03) / sqrt(0.09 (1/100 + 1/700))."""
    z = drop_z(100, 50.0, 700, 490.0, 700 * (0.09 + 0.49), margin=0.03, var_floor=0.01, min_count=20, level_sd=0.0)
    assert z == pytest.approx(0.17 / math.sqrt(0.09 * (1 / 100 + 1 / 700)))


def test_the_levels_spread_bounds_z_however_many_evaluations() -> None:
    """With level_sd, the spread adds to the standard error: a million evaluations cannot push z past drop / sd."""
    z = drop_z(100, 50.0, 700, 490.0, 700 * (0.09 + 0.49), margin=0.0, var_floor=0.01, min_count=20, level_sd=0.01)
    assert z == pytest.approx(0.2 / math.sqrt(0.09 * (1 / 100 + 1 / 700) + 0.01**2))
    huge = drop_z(1e6, 0.68e6, 7e6, 0.7 * 7e6, 7e6 * (0.09 + 0.49), margin=0.0, var_floor=0.01, min_count=20,
                  level_sd=0.01)
    assert huge is not None and 1.9 < huge < 0.02 / 0.01


def test_drop_z_floors_the_variance_and_keeps_the_minimum() -> None:
    """A constant baseline uses the floor; under the minimum there is no statistic."""
    z = drop_z(25, 0.0, 100, 100.0, 100.0, margin=0.0, var_floor=0.01, min_count=20, level_sd=0.0)
    assert z == pytest.approx(1 / math.sqrt(0.01 * (1 / 25 + 1 / 100)))
    assert drop_z(19, 0.0, 100, 100.0, 100.0, margin=0.0, var_floor=0.01, min_count=20, level_sd=0.0) is None
    assert drop_z(25, 0.0, 19, 19.0, 19.0, margin=0.0, var_floor=0.01, min_count=20, level_sd=0.0) is None


def test_lorden_threshold_is_the_log_of_the_run_length() -> None:
    """h = log(ARL0); a run length of one or less is refused."""
    assert lorden_threshold(math.e**10) == pytest.approx(10)
    with pytest.raises(ValueError, match="exceed 1"):
        lorden_threshold(1)


def test_oracle_cusum_detects_a_drop_and_rarely_alarms_without_one() -> None:
    """Gaussian scores: no alarm in 20,000 healthy ones at ARL0 1e6; a 0.2 drop is found within ~log(1e6)/KL."""
    rng = random.Random(3)
    sigma, drop, h = 0.38, 0.2, lorden_threshold(1e6)
    cusum = OracleCusum(drop=drop, threshold=h)
    assert not any(cusum.update(1, rng.gauss(0.65, sigma), 0.65, sigma) for _ in range(20_000))
    cusum = OracleCusum(drop=drop, threshold=h)
    delays = []
    for _ in range(50):
        n = 0
        while not cusum.update(1, rng.gauss(0.45, sigma), 0.65, sigma):
            n += 1
        delays.append(n + 1)
    kl = drop**2 / (2 * sigma**2)
    assert 0.5 * h / kl < sorted(delays)[25] < 1.5 * h / kl


def test_a_batch_adds_the_same_evidence_as_its_members() -> None:
    """Away from the floor at 0, one batch of k scores moves the statistic as k single updates do."""
    single, batch = OracleCusum(drop=0.2, threshold=1e9), OracleCusum(drop=0.2, threshold=1e9)
    scores = [0.1, 0.3, 0.2, 0.0]
    for x in scores:
        single.update(1, x, 0.65, 0.38)
    batch.update(len(scores), sum(scores), 0.65, 0.38)
    assert batch.statistic == pytest.approx(single.statistic)
