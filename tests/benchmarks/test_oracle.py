"""The benchmarks' oracle CUSUM (benchmarks/_oracle.py): the threshold, the false-alarm rate, batches."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

ORACLE = Path(__file__).resolve().parents[2] / "benchmarks" / "_oracle.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_oracle", ORACLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_oracle", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


_oracle = _load()
OracleCusum, lorden_threshold = _oracle.OracleCusum, _oracle.lorden_threshold


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
