"""Average precision over ranked binary verdicts, and the reference scorer's rounding.

The definition (Mastra's context precision scorer, made exact):

    AP = (sum over relevant positions k of precision@k) / R
    precision@k = (relevant items in positions 1..k) / k
    R = number of relevant items among the retrieved ones; AP = 0 when R = 0 or there is no item.

The score is ``AP * scale`` rounded to two decimals *half up*. The reference rounds with
``Math.round(x * 100 + Number.EPSILON) / 100``: the epsilon is there to push binary artefacts such as
``1.005 * 100 == 100.49999999999999`` up. We compute AP as an exact fraction and round that exactly, which
is what the reference intends and agrees with it wherever its float arithmetic is exact (1/8 -> 0.13,
where Python's ``round`` gives 0.12).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fractions import Fraction

__all__ = ["average_precision", "context_precision_score", "exact_average_precision", "round_half_up"]


def exact_average_precision(verdicts: Iterable[bool]) -> Fraction:
    """Return AP as an exact fraction; 0 when there is no verdict or no relevant one."""
    from fractions import Fraction  # here, not at import: fractions loads decimal, milliseconds of start-up

    relevant = 0
    total = Fraction(0)
    for k, verdict in enumerate(verdicts, start=1):
        if verdict:
            relevant += 1
            total += Fraction(relevant, k)
    return total / relevant if relevant else Fraction(0)


def average_precision(verdicts: Iterable[bool]) -> float:
    """Return the average precision of ranked binary verdicts (exact, then converted to float).

    Args:
        verdicts: one boolean per retrieved context, in rank order; ``True`` means relevant.

    Returns:
        ``sum(precision@k for relevant k) / number_relevant``; 0.0 for no verdicts or no relevant one.
    """
    return float(exact_average_precision(_as_bools(verdicts)))


def round_half_up(value: Fraction | float, digits: int = 2) -> float:
    """Round ``value`` to ``digits`` decimals with ties going up, computed exactly."""
    from fractions import Fraction

    exact = value if isinstance(value, Fraction) else Fraction(repr(float(value)))
    factor = 10**digits
    return float(math.floor(exact * factor + Fraction(1, 2)) / factor)


def context_precision_score(verdicts: Iterable[bool], scale: float = 1.0) -> float:
    """Return ``AP * scale`` rounded half up to two decimals, as the reference scorer reports it.

    Args:
        verdicts: one boolean per retrieved context, in rank order.
        scale: the score's upper bound (default 1). Must be finite and not negative; 0 gives 0.

    Raises:
        ValueError: when ``scale`` is negative, NaN or infinite.
    """
    from fractions import Fraction

    checked_scale = validate_scale(scale)
    # repr() gives the shortest decimal that round-trips, so a scale of 0.1 means 1/10, not its binary twin.
    return round_half_up(exact_average_precision(_as_bools(verdicts)) * Fraction(repr(checked_scale)))


def validate_scale(scale: float) -> float:
    """Return ``scale`` as a float, or raise ``ValueError`` when it cannot scale a score."""
    from fractions import Fraction

    if isinstance(scale, bool) or not isinstance(scale, (int, float, Fraction)):
        raise ValueError(f"scale must be a number, got {type(scale).__name__}")
    value = float(scale)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"scale must be a finite number >= 0, got {scale!r}")
    return value


def _as_bools(verdicts: Iterable[bool]) -> list[bool]:
    if isinstance(verdicts, (str, bytes)):
        raise TypeError("verdicts must be a sequence of booleans, not a string")
    out = []
    for verdict in verdicts:
        if not isinstance(verdict, (bool, int)) or verdict not in (0, 1):
            raise TypeError(f"each verdict must be a bool, got {verdict!r}")
        out.append(bool(verdict))
    return out
