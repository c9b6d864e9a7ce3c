"""Judge against person: the 2x2 table of verdicts and labels, and its figures with 95 % intervals.

The person is the reference: a *positive* is a context the person marked relevant. So

- agreement = (TP + TN) / n, TPR (sensitivity) = TP / (TP + FN), TNR (specificity) = TN / (TN + FP);
  each with a Wilson score interval (Wilson 1927), which stays inside [0, 1] and behaves at 0 and n;
- Cohen's κ = (p_o - p_e) / (1 - p_e), with the large-sample standard error of Fleiss, Cohen and Everitt
  (1969, "Large sample standard errors of kappa and weighted kappa", Psychological Bulletin 72(5)) and the
  interval κ ± 1.96·SE, clipped to [-1, 1]. When p_e = 1 (both raters gave one answer throughout) κ is undefined:
  ``None``.

Standard library only: ``cp-observe calibrate`` and the test kit both use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Agreement", "Proportion", "kappa", "wilson"]

_Z = 1.959963984540054  # the 97.5 % point of the standard normal


@dataclass(frozen=True, slots=True)
class Proportion:
    """A share with its 95 % interval (``None`` figures when the denominator is 0)."""

    value: float | None
    low: float | None
    high: float | None
    successes: int
    total: int


def wilson(successes: int, total: int, *, z: float = _Z) -> Proportion:
    """The share ``successes / total`` and its Wilson score interval."""
    if total <= 0:
        return Proportion(None, None, None, successes, total)
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exactly 0 and 1 there; rounding would miss them
    high = 1.0 if successes == total else min(1.0, centre + half)
    return Proportion(p, low, high, successes, total)


def kappa(tp: int, fp: int, fn: int, tn: int, *, z: float = _Z) -> tuple[float | None, float | None, float | None,
                                                                         float | None]:
    """Cohen's κ of the 2x2 table, its standard error (Fleiss, Cohen and Everitt 1969) and the 95 % interval.

    Returns ``(kappa, se, low, high)``; all ``None`` when the table is empty or κ is undefined (p_e = 1).
    """
    n = tp + fp + fn + tn
    if n == 0:
        return None, None, None, None
    # p[i][j]: judge says i, person says j (1 relevant, 0 not).
    p = [[tn / n, fn / n], [fp / n, tp / n]]
    judge = [p[0][0] + p[0][1], p[1][0] + p[1][1]]
    person = [p[0][0] + p[1][0], p[0][1] + p[1][1]]
    observed = p[0][0] + p[1][1]
    expected = judge[0] * person[0] + judge[1] * person[1]
    if expected >= 1.0:
        return None, None, None, None
    k = (observed - expected) / (1 - expected)
    total = sum(p[i][i] * (1 - (judge[i] + person[i]) * (1 - k)) ** 2 for i in (0, 1))
    total += (1 - k) ** 2 * sum(p[i][j] * (person[i] + judge[j]) ** 2 for i in (0, 1) for j in (0, 1) if i != j)
    total -= (k - expected * (1 - k)) ** 2
    se = math.sqrt(max(0.0, total) / (n * (1 - expected) ** 2))
    return k, se, max(-1.0, k - z * se), min(1.0, k + z * se)


@dataclass(frozen=True, slots=True)
class Agreement:
    """The 2x2 table of judge verdicts against people's labels, and its figures."""

    tp: int = 0  # both relevant
    fp: int = 0  # judge relevant, person not
    fn: int = 0  # person relevant, judge not
    tn: int = 0  # both not relevant

    @classmethod
    def of(cls, pairs: list[tuple[bool, bool]]) -> Agreement:
        """The table of ``(judge, person)`` pairs."""
        tp = sum(1 for j, h in pairs if j and h)
        fp = sum(1 for j, h in pairs if j and not h)
        fn = sum(1 for j, h in pairs if not j and h)
        return cls(tp, fp, fn, len(pairs) - tp - fp - fn)

    @property
    def n(self) -> int:
        """Labelled contexts compared."""
        return self.tp + self.fp + self.fn + self.tn

    @property
    def agreement(self) -> Proportion:
        """Share where the judge's verdict equals the person's label."""
        return wilson(self.tp + self.tn, self.n)

    @property
    def tpr(self) -> Proportion:
        """Share of the person's relevant contexts the judge also marked relevant."""
        return wilson(self.tp, self.tp + self.fn)

    @property
    def tnr(self) -> Proportion:
        """Share of the person's irrelevant contexts the judge also marked irrelevant."""
        return wilson(self.tn, self.tn + self.fp)

    def kappa(self) -> tuple[float | None, float | None, float | None, float | None]:
        """Cohen's κ, its standard error and 95 % interval (see ``kappa``)."""
        return kappa(self.tp, self.fp, self.fn, self.tn)

    def as_dict(self) -> dict[str, object]:
        """The figures as JSON-ready values."""
        k, se, low, high = self.kappa()

        def share(p: Proportion) -> dict[str, object]:
            return {"value": p.value, "low": p.low, "high": p.high, "successes": p.successes, "total": p.total}

        return {
            "labels": self.n, "table": {"tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn},
            "agreement": share(self.agreement), "tpr": share(self.tpr), "tnr": share(self.tnr),
            "kappa": {"value": k, "se": se, "low": low, "high": high,
                      "method": "Fleiss-Cohen-Everitt (1969) large-sample SE, kappa ± 1.96·SE"},
        }
