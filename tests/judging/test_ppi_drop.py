"""The drop detection's PPI++ statistic (ppi_drop_z): what it reduces to, what it sees, and where it abstains."""

from __future__ import annotations

import random

import pytest

from cp_observe._judging._ppi import PpiSums, ppi_drop_z, ppi_mean_from_sums, ppi_sums
from cp_observe._stats._sequential import drop_z

pytestmark = pytest.mark.unit

KW = {"margin": 0.03, "var_floor": 0.01, "min_count": 20, "level_sd": 0.01}


def _items(rng: random.Random, count: int, share: float, mean_y: float, mean_f: float) -> PpiSums:
    """A cascade's sums: f on every item, y on a uniform ``share``; f agrees with y on 70 % of the judged ones."""
    y, f_lab, f_unl = [], [], []
    for _ in range(count):
        f = float(rng.random() < mean_f)
        if rng.random() < share:
            y.append(f if rng.random() < 0.7 else float(rng.random() < mean_y))
            f_lab.append(f)
        else:
            f_unl.append(f)
    return ppi_sums(y, f_lab, f_unl)


def test_a_judge_that_carries_nothing_leaves_the_labels_alone() -> None:
    """With a constant cheap judge the weight is 0, and z is the score series' drop_z on the labels."""
    base = ppi_sums([1.0] * 60 + [0.0] * 80, [0.5] * 140, [0.5] * 500)
    window = ppi_sums([1.0] * 5 + [0.0] * 25, [0.5] * 30, [0.5] * 100)
    found = ppi_drop_z(window, base, **KW)
    assert found is not None and found.lam == 0.0
    expected = drop_z(30, 5.0, 140, 60.0, 60.0, **KW)
    assert expected is not None and found.z == pytest.approx(expected, rel=1e-12)


def test_both_means_are_the_ppi_estimates_with_the_baselines_weight() -> None:
    """The baseline's mean is its PPI++ estimate; the window's is PPI with the baseline's weight."""
    rng = random.Random(3)
    base, window = _items(rng, 3000, 0.2, 0.65, 0.6), _items(rng, 400, 0.2, 0.45, 0.6)
    found = ppi_drop_z(window, base, **KW)
    assert found is not None and 0.0 < found.lam < 1.0
    assert found.baseline_mean == pytest.approx(ppi_mean_from_sums(base).estimate, rel=1e-12)
    assert found.mean == pytest.approx(ppi_mean_from_sums(window, lam=found.lam).estimate, rel=1e-12)
    assert found.drop == pytest.approx(found.baseline_mean - found.mean)
    assert found.labelled == window.n and found.baseline_labelled == base.n


def test_a_drop_the_cheap_judge_does_not_see_is_seen_whole() -> None:
    """The LLM's MAP drops 0.25 while the cheap judge's stays: the PPI++ drop is about 0.25, z large."""
    rng = random.Random(9)
    base = _items(rng, 20_000, 0.2, 0.65, 0.65)
    y = [float(rng.random() < 0.40) for _ in range(400)]
    f_lab = [float(rng.random() < 0.65) for _ in range(400)]
    f_unl = [float(rng.random() < 0.65) for _ in range(1600)]
    found = ppi_drop_z(ppi_sums(y, f_lab, f_unl), base, **KW)
    assert found is not None and found.drop == pytest.approx(0.25, abs=0.08) and found.z > 4.8


def test_under_the_minimum_of_labelled_items_it_abstains() -> None:
    """Fewer than min_count LLM-judged items in the window or in the baseline: None, however many cheap ones."""
    rng = random.Random(1)
    base = _items(rng, 5000, 0.2, 0.65, 0.6)
    thin = ppi_sums([0.0] * 19, [0.0] * 19, [0.0] * 5000)
    assert ppi_drop_z(thin, base, **KW) is None
    assert ppi_drop_z(base, thin, **KW) is None


def test_a_window_with_no_unlabelled_item_is_the_labels_alone() -> None:
    """Every item judged by the LLM in the window: its mean is the labels' mean, not shifted by the weight."""
    rng = random.Random(2)
    base = _items(rng, 4000, 0.2, 0.65, 0.6)
    window = ppi_sums([1.0] * 10 + [0.0] * 20, [1.0] * 30, [])
    found = ppi_drop_z(window, base, **KW)
    assert found is not None and found.lam > 0 and found.mean == pytest.approx(10 / 30)
