"""One evaluation: ask a judge, check the verdicts line up, compute score and reason.

The scorer API and the span processor both go through ``evaluate``; there is one scoring path.
"""

from __future__ import annotations

from collections.abc import Sequence

from cp_observe._errors import JudgeError
from cp_observe._judging._map import exact_average_precision, round_half_up
from cp_observe._judging._reason import build_reason
from cp_observe._judging._verdicts import coerce_verdicts
from cp_observe._types import Judge, Judgement, Reference, ScoreResult, Usage, Verdict

__all__ = ["evaluate", "judge_aligned", "judge_model_name", "score_verdicts"]


def score_verdicts(
    verdicts: Sequence[Verdict],
    *,
    scale: float,
    judge_model: str,
    reference: Reference,
    judgement: Judgement | None = None,
) -> ScoreResult:
    """Turn aligned verdicts into a ``ScoreResult`` (exact AP, half-up rounding, reason from the verdicts)."""
    from fractions import Fraction  # loaded by exact_average_precision already; not at import (see _map)

    ap = exact_average_precision(v.relevant for v in verdicts)
    score = round_half_up(ap * Fraction(repr(float(scale))))
    reason = build_reason(verdicts, score, scale)
    if judgement is not None and judgement.reason:
        reason = judgement.reason
    return ScoreResult(
        score=score,
        reason=reason,
        verdicts=tuple(verdicts),
        average_precision=float(ap),
        judge_model=judge_model,
        reference=reference,
        usage=judgement.usage if judgement else Usage(),
        cost_usd=judgement.cost_usd if judgement else None,
        truncated=judgement.truncated if judgement else (),
        scale=float(scale),
    )


async def evaluate(
    judge: Judge,
    *,
    query: str,
    reference_text: str,
    reference: Reference,
    contexts: Sequence[str],
    scale: float = 1.0,
) -> ScoreResult:
    """Judge ``contexts`` against the reference text and score them.

    No context means a score of 0 without calling the judge, as the definition says.

    Raises:
        JudgeError: the judge failed, or returned verdicts that do not line up one-to-one with the contexts.
    """
    model = judge_model_name(judge)
    if not contexts:
        return score_verdicts((), scale=scale, judge_model=model, reference=reference)
    judgement, verdicts = await judge_aligned(judge, query, reference_text, contexts)
    return score_verdicts(verdicts, scale=scale, judge_model=judgement.model or model, reference=reference,
                          judgement=judgement)


async def judge_aligned(
    judge: Judge, query: str, reference_text: str, contexts: Sequence[str]
) -> tuple[Judgement, tuple[Verdict, ...]]:
    """One judge call over ``contexts`` (not empty): the judgement and its verdicts, one per context index.

    Raises:
        JudgeError: the judge failed, or its verdicts do not line up one-to-one with the contexts.
    """
    model = judge_model_name(judge)
    raw = await judge.judge(query, reference_text, list(contexts))
    judgement = raw if isinstance(raw, Judgement) else Judgement(verdicts=tuple(raw), model=model)
    verdicts = coerce_verdicts(judgement.verdicts, len(contexts))
    if verdicts is None:
        raise JudgeError(
            f"judge {model} returned {len(judgement.verdicts)} verdicts for {len(contexts)} contexts, "
            "not one per context index; refusing to score misaligned verdicts",
            calls=judgement.usage.calls,
        )
    return judgement, tuple(verdicts)


def judge_model_name(judge: Judge) -> str:
    """The judge's ``model`` name, or its class name when it has none (a user judge is still a judge)."""
    try:
        model = judge.model
    except Exception:  # noqa: BLE001 - a user judge without a usable name still gets scored
        return type(judge).__name__
    return model if isinstance(model, str) else type(judge).__name__
