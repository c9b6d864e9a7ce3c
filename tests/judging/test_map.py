"""The MAP core against the definition, the reference scorer's cases and invariants."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cp_observe import average_precision, context_precision_score

REFERENCE_CASES = Path(__file__).resolve().parents[3] / "shared" / "reference" / "mastra_cases.json"
# The reference scorer's own cases, copied so the tests do not depend on a folder outside the repo.
MASTRA_CASES = [
    ([True, True], 1, 1.0),
    ([True, False, True, False], 1, 0.83),
    ([False, False, False], 1, 0.0),
    ([True, True], 10, 10.0),
    ([True], 0, 0.0),
    ([], 1, 0.0),
]

verdict_lists = st.lists(st.booleans(), max_size=40)


@pytest.mark.parametrize(("verdicts", "scale", "expected"), MASTRA_CASES)
def test_reference_cases(verdicts: list[bool], scale: float, expected: float) -> None:
    """Every case of the reference implementation's test suite gives the same score."""
    assert context_precision_score(verdicts, scale) == expected


def test_reference_cases_file_agrees_when_present() -> None:
    """The copied cases match shared/reference/mastra_cases.json when that file is beside the checkout."""
    if not REFERENCE_CASES.exists():
        pytest.skip(f"no reference cases at {REFERENCE_CASES} (shared/reference beside the checkout)")
    cases = json.loads(REFERENCE_CASES.read_text())
    assert [(c["verdicts"], c["scale"], c["expected_score"]) for c in cases] == MASTRA_CASES


@pytest.mark.parametrize(
    ("verdicts", "ap", "score"),
    [
        ([True, False, True, False], (1 + 2 / 3) / 2, 0.83),
        ([False, True], 0.5, 0.5),
        ([False, False, True], 1 / 3, 0.33),
        ([False] * 7 + [True], 1 / 8, 0.13),  # half up, where Python's round() gives 0.12
        ([False, False, False, False, False, False, False, True, True], (1 / 8 + 2 / 9) / 2, 0.17),
        ([True, False, False, True], (1 + 2 / 4) / 2, 0.75),
    ],
)
def test_worked_examples(verdicts: list[bool], ap: float, score: float) -> None:
    """The design notes' worked examples: exact AP and the half-up rounded score."""
    assert average_precision(verdicts) == pytest.approx(ap, abs=1e-15)
    assert context_precision_score(verdicts) == score


def test_half_up_on_scaled_ties() -> None:
    """Ties after scaling round up: AP 1/8 with scale 0.1 is 0.0125 -> 0.01, scale 2 -> 0.25."""
    eighth = [False] * 7 + [True]
    assert context_precision_score(eighth, 2) == 0.25
    assert context_precision_score(eighth, 0.1) == 0.01
    assert context_precision_score([False, False, False, True], 0.1) == 0.03  # 0.025 -> 0.03


@pytest.mark.parametrize("scale", [-1, float("nan"), float("inf"), "1", True])
def test_bad_scale_is_refused(scale: object) -> None:
    """A scale that cannot scale a score raises ValueError."""
    with pytest.raises(ValueError, match="scale"):
        context_precision_score([True], scale)  # type: ignore[arg-type]


def test_non_boolean_verdicts_are_refused() -> None:
    """Strings or other values are not silently read as verdicts."""
    with pytest.raises(TypeError):
        average_precision("yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        average_precision(["yes", "no"])  # type: ignore[list-item]


def _reference_ap(verdicts: list[bool]) -> Fraction:
    relevant = [k for k, v in enumerate(verdicts, 1) if v]
    if not relevant:
        return Fraction(0)
    return sum((Fraction(i, k) for i, k in enumerate(relevant, 1)), Fraction(0)) / len(relevant)


@given(verdict_lists)
def test_ap_matches_an_independent_formulation(verdicts: list[bool]) -> None:
    """AP equals the mean over relevant ranks of (relevant so far / rank), computed independently."""
    assert average_precision(verdicts) == float(_reference_ap(verdicts))


@given(verdict_lists, st.floats(min_value=0, max_value=100, allow_nan=False))
def test_bounds(verdicts: list[bool], scale: float) -> None:
    """0 <= AP <= 1 and 0 <= score <= scale (allowing the last rounding step)."""
    ap = average_precision(verdicts)
    assert 0.0 <= ap <= 1.0
    assert 0.0 <= context_precision_score(verdicts, scale) <= scale + 0.005


@given(st.integers(min_value=1, max_value=40), st.floats(min_value=0, max_value=100, allow_nan=False))
def test_all_relevant_is_scale(n: int, scale: float) -> None:
    """When every context is relevant the score is the scale (rounded)."""
    assert average_precision([True] * n) == 1.0
    assert context_precision_score([True] * n, scale) == math.floor(Fraction(repr(scale)) * 100 + Fraction(1, 2)) / 100


@given(st.integers(min_value=0, max_value=40))
def test_none_relevant_is_zero(n: int) -> None:
    """No relevant context gives 0 whatever the length."""
    assert average_precision([False] * n) == 0.0


@given(verdict_lists.filter(lambda v: any(v) and not all(v)), st.data())
def test_moving_a_relevant_item_up_never_lowers_ap(verdicts: list[bool], data: st.DataObject) -> None:
    """Swapping a relevant item with an irrelevant one ranked above it cannot lower AP."""
    relevant = [i for i, v in enumerate(verdicts) if v]
    i = data.draw(st.sampled_from(relevant))
    above = [j for j in range(i) if not verdicts[j]]
    if not above:
        return
    j = data.draw(st.sampled_from(above))
    moved = list(verdicts)
    moved[i], moved[j] = moved[j], moved[i]
    assert average_precision(moved) > average_precision(verdicts)


@given(verdict_lists)
def test_trailing_irrelevant_items_do_not_change_ap(verdicts: list[bool]) -> None:
    """Irrelevant items appended after the last one change nothing (AP looks only at relevant ranks)."""
    assert average_precision([*verdicts, False, False]) == average_precision(verdicts)


@given(verdict_lists)
def test_score_is_rounded_ap(verdicts: list[bool]) -> None:
    """The score is AP rounded half up to 2 decimals, never further than 0.005 from it."""
    score = context_precision_score(verdicts)
    assert abs(score - average_precision(verdicts)) <= 0.005 + 1e-12
    assert score == round(score, 2)
