"""A reranked retrieval, judged once: the union of its input and output documents, and both orders' AP.

A reranker takes the documents a retriever found (its input, in retrieval order) and returns some of them in a
new order (its output). The judge sees each distinct document once: the input's first ``limit`` documents in
their order, then the output's first ``limit`` documents the input lacks (a reranker that adds documents). The
verdicts are then read back by position into both orders:

- the score is the AP of the output order (``context_precision.stage=rerank``);
- ``average_precision_before`` is the AP of the input order (what the retrieval stage alone would score);
- ``lift`` is the output's AP minus the input's (exact fractions, then a float);
- ``dropped_relevant`` counts the relevant input documents that are not in the output at all.

Documents are matched by their text (after the same redaction): a document returned twice is judged once and
its verdict counts at each of its positions. Because the union is the input order, a retrieval span and the
reranker over its documents ask a caching judge the very same per-context questions: ``LLMJudge`` answers the
second from its verdict cache (or from the first call still in flight), so the pair costs one judge call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cp_observe._judging._evaluate import judge_aligned, judge_model_name, score_verdicts
from cp_observe._judging._map import exact_average_precision
from cp_observe._types import Judge, Reference, RerankLift, ScoreResult, Verdict

if TYPE_CHECKING:
    from fractions import Fraction

__all__ = ["RerankUnion", "evaluate_rerank", "rerank_union"]


@dataclass(frozen=True, slots=True)
class RerankUnion:
    """What the judge sees for one reranked retrieval, and where each order's documents are in it.

    Attributes:
        contexts: each distinct document once: the input order's, then the output's the input lacks.
        after: for each output document (the first ``limit``), its position in ``contexts``.
        before: for each input document (the first ``limit``), its position in ``contexts``.
        cut: positions in ``contexts`` of input documents the output does not contain.
    """

    contexts: tuple[str, ...]
    after: tuple[int, ...]
    before: tuple[int, ...]
    cut: frozenset[int]


def rerank_union(before: Sequence[str], after: Sequence[str], limit: int) -> RerankUnion:
    """The union of a reranker's input (``before``) and output (``after``), each cut to ``limit`` documents."""
    position: dict[str, int] = {}
    contexts: list[str] = []

    def place(text: str) -> int:
        found = position.get(text)
        if found is None:
            found = position[text] = len(contexts)
            contexts.append(text)
        return found

    before_at = tuple(place(text) for text in before[:limit])
    after_at = tuple(place(text) for text in after[:limit])
    returned = set(after)
    cut = frozenset(p for p, text in zip(before_at, before[:limit], strict=True) if text not in returned)
    return RerankUnion(tuple(contexts), after_at, before_at, cut)


def lift_of(verdicts: Sequence[Verdict], union: RerankUnion, score_ap: Fraction) -> RerankLift:
    """Both orders' AP from the union's verdicts (``score_ap`` is the output order's exact AP)."""
    before = tuple(verdicts[p].relevant for p in union.before)
    ap_before = exact_average_precision(before)
    dropped = sum(1 for p in union.cut if verdicts[p].relevant)
    return RerankLift(
        average_precision_before=float(ap_before),
        lift=float(score_ap - ap_before),
        dropped_relevant=dropped,
        verdicts_before=before,
    )


async def evaluate_rerank(
    judge: Judge,
    *,
    query: str,
    reference_text: str,
    reference: Reference,
    before: Sequence[str],
    after: Sequence[str],
    limit: int,
    scale: float = 1.0,
) -> ScoreResult:
    """Judge the union of ``before`` and ``after`` in one call; score ``after``, with the lift over ``before``.

    Raises:
        JudgeError: the judge failed, or returned verdicts that do not line up with the union's documents.
    """
    union = rerank_union(before, after, limit)
    model = judge_model_name(judge)
    if not union.contexts:
        result = score_verdicts((), scale=scale, judge_model=model, reference=reference)
        return replace(result, rerank=RerankLift(0.0, 0.0, 0))
    judgement, verdicts = await judge_aligned(judge, query, reference_text, union.contexts)
    ordered = tuple(Verdict(i, verdicts[p].relevant, verdicts[p].reason) for i, p in enumerate(union.after))
    truncated = set(judgement.truncated)
    judgement = replace(judgement, truncated=tuple(i for i, p in enumerate(union.after) if p in truncated))
    result = score_verdicts(ordered, scale=scale, judge_model=judgement.model or model, reference=reference,
                            judgement=judgement)
    score_ap = exact_average_precision(v.relevant for v in ordered)
    return replace(result, rerank=lift_of(verdicts, union, score_ap))
