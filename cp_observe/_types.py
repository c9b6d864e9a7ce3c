"""The value types shared by judges, the scorer and the processor."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

__all__ = ["CascadeResult", "Judge", "Judgement", "RerankLift", "ScoreResult", "Usage", "Verdict"]

Reference = Literal["output", "query"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judge's decision on one retrieved context.

    Attributes:
        index: the context's rank position, from 0.
        relevant: whether the context was useful for producing the reference text.
        reason: the judge's one-line justification (may be empty).
    """

    index: int
    relevant: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and calls spent on one judgement, as the provider reported them.

    ``prompt_tokens`` counts every prompt token, the cache reads and writes among them; ``completion_tokens``
    counts every completion token, the reasoning tokens among them (each provider's usage is read into this
    shape, whatever its own counts include).

    Attributes:
        calls: model calls made, failed and unparsable ones included.
        prompt_tokens: prompt (input) tokens.
        completion_tokens: completion (output) tokens.
        cache_read_tokens: prompt tokens read from the provider's prompt cache.
        cache_creation_tokens: prompt tokens written to the provider's prompt cache.
        reasoning_tokens: completion tokens the model spent reasoning (not in the reply's text).
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.calls + other.calls,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_creation_tokens + other.cache_creation_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


@dataclass(frozen=True, slots=True)
class Judgement:
    """What a judge returns: one verdict per context, in rank order, plus what it cost.

    Attributes:
        verdicts: exactly one ``Verdict`` per context, ``verdicts[i].index == i``.
        model: the judge's model name.
        usage: calls and tokens spent (cache hits cost nothing).
        cost_usd: those tokens at the prices of litellm's table for the tier each reply ran on, or ``None``
            when the table has no price for the model.
        truncated: indices of contexts that were cut to the prompt budget before judging.
        cached: how many verdicts came from the verdict cache.
        reason: an LLM-written overall reason, when the judge was asked for one.
    """

    verdicts: tuple[Verdict, ...]
    model: str
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    truncated: tuple[int, ...] = ()
    cached: int = 0
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class RerankLift:
    """What a reranker did to the retrieval it reordered, from the one judgement of both orders' documents.

    Attributes:
        average_precision_before: AP of the reranker's input order (what was retrieved).
        lift: AP of the output order (the score's AP) minus ``average_precision_before``.
        dropped_relevant: relevant input documents the reranker did not return.
        verdicts_before: the verdicts in input order.
    """

    average_precision_before: float
    lift: float
    dropped_relevant: int
    verdicts_before: tuple[bool, ...] = ()


@dataclass(frozen=True, slots=True)
class ScoreResult:
    """The result of scoring one retrieval.

    Attributes:
        score: ``AP * scale`` rounded half up to two decimals.
        reason: a human-readable explanation built from the verdicts (or written by the LLM on request).
        verdicts: one ``Verdict`` per context, in rank order.
        average_precision: the unrounded AP, before scaling.
        judge_model: the judge's model name.
        reference: ``"output"`` when judged against the answer, ``"query"`` when against the query alone.
        usage: judge calls and tokens.
        cost_usd: judge cost in US dollars, ``None`` when unknown.
        truncated: indices of contexts cut to the prompt budget.
        scale: the scale the score was computed with.
        rerank: for a reranker's output (``context_precision.stage=rerank``), what it did to its input; else ``None``.
    """

    score: float
    reason: str
    verdicts: tuple[Verdict, ...]
    average_precision: float
    judge_model: str
    reference: Reference
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    truncated: tuple[int, ...] = ()
    scale: float = 1.0
    rerank: RerankLift | None = None


@dataclass(frozen=True, slots=True)
class CascadeResult:
    """Both judgements of one retrieval in the cheap-plus-LLM cascade (``_processing/_cascade.py``).

    Attributes:
        cheap: the cheap judge's result (every cascade evaluation has one).
        llm: the LLM judge's, or None when it did not judge.
        llm_status: ``judged``, ``not_drawn``, a gate's skip reason, or ``failed:<reason>``.
        cheap_seconds: how long the cheap judgement took.
        llm_seconds: how long the LLM judgement took (0 when it was not asked).
        llm_failed_cost_usd: what a failed LLM judgement's billed replies cost (0 when it did not fail,
            ``None`` when unknown).
    """

    cheap: ScoreResult
    llm: ScoreResult | None
    llm_status: str
    cheap_seconds: float = 0.0
    llm_seconds: float = 0.0
    llm_failed_cost_usd: float | None = 0.0

    @property
    def reported(self) -> ScoreResult:
        """The score the evaluation reports: the LLM's where it judged, else the cheap judge's."""
        return self.llm if self.llm is not None else self.cheap


@runtime_checkable
class Judge(Protocol):
    """Decides, for each retrieved context, whether it was useful for producing the reference text.

    ``reference`` is the agent's answer, or the query itself when there is no answer. A judge returns a
    ``Judgement`` (or a plain sequence of ``Verdict``) with exactly one verdict per context; cp-observe
    validates the alignment and never scores misaligned verdicts.
    """

    @property
    def model(self) -> str:
        """The name reported as ``context_precision.judge.model``."""
        ...

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Judgement | Sequence[Verdict]:
        """Return one verdict per context, in rank order."""
        ...
