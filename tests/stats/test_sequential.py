"""The drop statistic: the formula, the level's spread, the variance floor and the minimum."""

from __future__ import annotations

import math

import pytest

from cp_observe._stats._sequential import drop_z


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
