"""Judge against person: the 2x2 table of verdicts and labels, and its figures with 95 % intervals.

The person is the reference: a *positive* is a context the person marked relevant. So

- agreement = (TP + TN) / n, TPR (sensitivity) = TP / (TP + FN), TNR (specificity) = TN / (TN + FP);
  each with a Wilson score interval (Wilson 1927), which stays inside [0, 1] and behaves at 0 and n;
- Cohen's κ = (p_o - p_e) / (1 - p_e), with the large-sample standard error of Fleiss, Cohen and Everitt
  (1969, "Large sample standard errors of kappa and weighted kappa", Psychological Bulletin 72(5)) and the
  interval κ ± 1.96·SE, clipped to [-1, 1]. When p_e = 1 (both raters gave one answer throughout) κ is undefined:
  ``None``.

The Wilson interval and κ are in ``_stats/_proportions.py``. Standard library only: ``cp-observe calibrate`` and
the test kit both use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cp_observe._stats._proportions import Proportion, kappa, wilson

__all__ = ["Agreement"]


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
