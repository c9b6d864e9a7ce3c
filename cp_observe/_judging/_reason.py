"""The score's explanation, built from the verdicts: exact, free, and free of captured content."""

from __future__ import annotations

from collections.abc import Sequence

from cp_observe._types import Verdict

__all__ = ["build_reason"]


def build_reason(verdicts: Sequence[Verdict], score: float, scale: float = 1.0) -> str:
    """Explain a context precision score in terms of which ranks were relevant.

    Positions are 1-based, as a person reads a ranking. The text names no context content, so it can be
    exported even when content capture is off.
    """
    n = len(verdicts)
    if n == 0:
        return f"The score is {score:g} because no context was retrieved."
    relevant = [v.index + 1 for v in verdicts if v.relevant]
    if not relevant:
        return f"The score is {score:g} because none of the {n} retrieved contexts was relevant."
    precisions = ", ".join(f"precision@{k} = {i / k:.2f}" for i, k in enumerate(relevant, start=1))
    irrelevant = [v.index + 1 for v in verdicts if not v.relevant]
    text = (
        f"The score is {score:g} (out of {scale:g}) because {len(relevant)} of {n} contexts were relevant, "
        f"at {_positions(relevant)} ({precisions})"
    )
    if irrelevant:
        text += f"; {_positions(irrelevant)} {'was' if len(irrelevant) == 1 else 'were'} not relevant"
        if irrelevant[0] < relevant[-1]:
            text += ", and irrelevant contexts ranked above relevant ones lower the score"
    return text + "."


def _positions(ranks: Sequence[int]) -> str:
    words = [str(r) for r in ranks]
    if len(words) == 1:
        return f"position {words[0]}"
    return "positions " + ", ".join(words[:-1]) + f" and {words[-1]}"
