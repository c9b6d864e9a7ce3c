"""PPI and PPI++ for a mean match the reference implementation, ppi-python, on shared inputs.

The reference runs in its own venv (``.venv-ppi``, ``scripts/install-ppi.sh``) as a subprocess: it pulls numpy
and scipy, which the library never needs. The tests skip, saying why, when that venv is absent, and fail
instead under ``CP_OBSERVE_REQUIRE_PPI=1`` (CI installs it).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cp_observe._judging._ppi import classical_mean, ppi_mean, ppi_mean_from_sums, ppi_sums

REPO = Path(__file__).resolve().parents[2]
PPI_PYTHON = REPO / ".venv-ppi" / "bin" / "python"
INSTALL_HINT = "ppi-python is not installed: run scripts/install-ppi.sh (creates .venv-ppi)"
_REQUIRED = os.environ.get("CP_OBSERVE_REQUIRE_PPI") == "1"

# Reads a list of cases from stdin; prints, for each, the reference's estimates, intervals and PPI++ weight.
_REFERENCE = r"""
import json, sys
import numpy as np
from ppi_py import classical_mean_ci, ppi_mean_ci, ppi_mean_pointestimate
from ppi_py.ppi import _calc_lam_glm

out = []
for case in json.load(sys.stdin):
    y = np.array(case["y"], dtype=float)
    f = np.array(case["f_labelled"], dtype=float)
    fu = np.array(case["f_unlabelled"], dtype=float)
    alpha = case["alpha"]
    row = {}
    for name, lam in (("ppi", 1.0), ("ppi_pp", None), ("fixed", case["lam"])):
        est = float(np.asarray(ppi_mean_pointestimate(y, f, fu, lam=lam)).reshape(-1)[0])
        low, high = ppi_mean_ci(y, f, fu, alpha=alpha, lam=lam)
        row[name] = [est, float(np.asarray(low).reshape(-1)[0]), float(np.asarray(high).reshape(-1)[0])]
    pointest = ppi_mean_pointestimate(y, f, fu, lam=1)
    grads = (y - pointest).reshape(-1, 1)
    grads_hat = (f - pointest).reshape(-1, 1)
    grads_hat_unlabeled = (fu - pointest).reshape(-1, 1)
    row["lam"] = float(_calc_lam_glm(grads, grads_hat, grads_hat_unlabeled, np.eye(1), clip=True))
    low, high = classical_mean_ci(y, alpha=alpha)
    row["classical"] = [float(y.mean()), float(low), float(high)]
    out.append(row)
json.dump(out, sys.stdout)
"""


def _reference(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not PPI_PYTHON.exists():
        if _REQUIRED:
            pytest.fail(f"CP_OBSERVE_REQUIRE_PPI=1 but {INSTALL_HINT}")
        pytest.skip(INSTALL_HINT)
    done = subprocess.run(
        [str(PPI_PYTHON), "-c", _REFERENCE],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: list[dict[str, Any]] = json.loads(done.stdout)
    return result


def _case(seed: int, n: int, big_n: int, *, correlation: float, bias: float, binary: bool) -> dict[str, Any]:
    """Gold scores in [0, 1] and a judge that tracks them with ``correlation`` and is off by ``bias``."""
    rng = random.Random(seed)

    def item() -> tuple[float, float]:
        truth = rng.random()
        y = float(rng.random() < truth) if binary else truth
        noise = rng.random()
        f = min(1.0, max(0.0, correlation * truth + (1 - correlation) * noise + bias))
        return y, round(f, 2)

    labelled = [item() for _ in range(n)]
    unlabelled = [item()[1] for _ in range(big_n)]
    return {
        "y": [y for y, _ in labelled],
        "f_labelled": [f for _, f in labelled],
        "f_unlabelled": unlabelled,
        "alpha": rng.choice([0.05, 0.1, 0.01]),
        "lam": rng.choice([0.0, 0.3, 0.7]),
    }


CASES = [
    _case(1, 30, 300, correlation=0.9, bias=-0.1, binary=False),
    _case(2, 50, 2000, correlation=0.5, bias=0.2, binary=False),
    _case(3, 20, 100, correlation=0.0, bias=0.0, binary=False),
    _case(4, 200, 5000, correlation=0.8, bias=0.05, binary=True),
    _case(5, 5, 12, correlation=0.95, bias=0.0, binary=False),
    # A judge anti-correlated with the truth: PPI++'s weight clips to 0.
    {
        "y": [0.0, 0.2, 0.5, 0.9, 1.0],
        "f_labelled": [1.0, 0.9, 0.5, 0.1, 0.0],
        "f_unlabelled": [0.3, 0.6, 0.2, 0.8],
        "alpha": 0.05,
        "lam": 0.5,
    },
    # A judge that tracks the truth with a third of its spread: the weight clips to 1.
    {
        "y": [0.0, 0.3, 0.7, 1.0],
        "f_labelled": [0.3, 0.4, 0.5, 0.6],
        "f_unlabelled": [0.3, 0.6, 0.35, 0.55, 0.4, 0.5, 0.45, 0.3, 0.6, 0.45],
        "alpha": 0.1,
        "lam": 0.9,
    },
]


@pytest.fixture(scope="module")
def reference() -> list[dict[str, Any]]:
    """The reference's answers to CASES, computed once."""
    return _reference(CASES)


@pytest.mark.parametrize("index", range(len(CASES)))
def test_ppi_plain_and_fixed_weight_match_the_reference(index: int, reference: list[dict[str, Any]]) -> None:
    """Plain PPI (lam 1) and a fixed weight give the reference's estimate and two-sided interval."""
    case, expected = CASES[index], reference[index]
    for name, lam in (("ppi", 1.0), ("fixed", case["lam"])):
        got = ppi_mean(case["y"], case["f_labelled"], case["f_unlabelled"], lam=lam, alpha=case["alpha"])
        assert [got.estimate, got.low, got.high] == pytest.approx(expected[name], abs=1e-9), name
        assert got.lam == lam


@pytest.mark.parametrize("index", range(len(CASES)))
def test_ppi_plus_plus_weight_and_interval_match_the_reference(index: int, reference: list[dict[str, Any]]) -> None:
    """PPI++'s tuned weight, estimate and interval are the reference's, from the items and from their sums."""
    case, expected = CASES[index], reference[index]
    got = ppi_mean(case["y"], case["f_labelled"], case["f_unlabelled"], alpha=case["alpha"])
    assert got.lam == pytest.approx(expected["lam"], abs=1e-9)
    assert [got.estimate, got.low, got.high] == pytest.approx(expected["ppi_pp"], abs=1e-9)
    sums = ppi_sums(case["y"], case["f_labelled"], case["f_unlabelled"])
    from_sums = ppi_mean_from_sums(sums, alpha=case["alpha"])
    assert from_sums.lam == pytest.approx(expected["lam"], abs=1e-9)
    assert [from_sums.estimate, from_sums.low, from_sums.high] == pytest.approx(expected["ppi_pp"], abs=1e-9)
    assert (from_sums.labelled, from_sums.unlabelled) == (len(case["y"]), len(case["f_unlabelled"]))


@pytest.mark.parametrize("index", range(len(CASES)))
def test_classical_mean_matches_the_reference(index: int, reference: list[dict[str, Any]]) -> None:
    """The labels-alone interval is the reference's ``classical_mean_ci``."""
    case, expected = CASES[index], reference[index]
    got = classical_mean(case["y"], alpha=case["alpha"])
    assert [got.estimate, got.low, got.high] == pytest.approx(expected["classical"], abs=1e-9)


def test_the_clipping_cases_clip() -> None:
    """The anti-correlated judge gets weight 0 and the narrow one weight 1 (the cases test both ends)."""
    anti, over = CASES[-2], CASES[-1]
    assert ppi_mean(anti["y"], anti["f_labelled"], anti["f_unlabelled"]).lam == 0.0
    assert ppi_mean(over["y"], over["f_labelled"], over["f_unlabelled"]).lam == 1.0
