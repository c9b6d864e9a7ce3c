"""The dry run's judge: it builds the prompt the LLM judge would send, counts its tokens and prices them.

It stands in for the real judge inside the real processor, so the dry run counts exactly what a replay
would judge (same sampling, same turn assembly, same skips) and calls no model. Every verdict is "not
relevant"; its evaluation spans go nowhere.

Tokens are estimated, not counted by the model's tokenizer (that would need the tokenizer files, which
may not be on the machine): one token per four bytes of ASCII text and one per other character, which
errs high for CJK text. The completion is estimated at ``COMPLETION_TOKENS_PER_CONTEXT`` per context plus
a fixed overhead. Prices come from litellm's bundled cost map (no network); unknown prices give ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from cp_observe._judging._prompt import build_prompt
from cp_observe._types import Judgement, Usage, Verdict

__all__ = ["COMPLETION_TOKENS_PER_CONTEXT", "DryRunJudge", "estimate_tokens", "token_prices"]

COMPLETION_TOKENS_PER_CONTEXT = 30
_COMPLETION_OVERHEAD = 10


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: ASCII bytes / 4, plus one token per non-ASCII character."""
    ascii_chars = sum(1 for ch in text if ord(ch) < 128)
    return math.ceil(ascii_chars / 4) + (len(text) - ascii_chars)


def token_prices(model: str) -> tuple[float, float] | None:
    """(input, output) US dollars per token from litellm's bundled cost map; ``(0, 0)`` for ``lexical``."""
    if model.strip().lower() == "lexical":
        return (0.0, 0.0)
    from cp_observe._judging._litellm import load_litellm

    litellm = load_litellm()
    entry: Any = litellm.model_cost.get(model) or litellm.model_cost.get(model.split("/", 1)[-1])
    if not isinstance(entry, dict):
        return None
    prompt, completion = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
    if prompt is None or completion is None:
        return None
    return (float(prompt), float(completion))


class DryRunJudge:
    """Counts and prices what the judge named ``model`` would be sent; judges nothing."""

    def __init__(self, model: str, prices: tuple[float, float] | None) -> None:
        self._model = model
        self.prices = prices
        # Written on the evaluator thread only; read once the processor has been flushed.
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cost_usd: float | None = 0.0 if prices is not None else None

    @property
    def model(self) -> str:
        """The real judge's name (so the evaluation labels are those a replay would have)."""
        return self._model

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Judgement:
        """Every context "not relevant", with the estimated usage and cost of the real call."""
        if self._model.strip().lower() == "lexical":
            prompt_tokens = completion_tokens = 0
        else:
            messages = build_prompt(query, reference, contexts).messages
            prompt_tokens = sum(estimate_tokens(m["content"]) + 4 for m in messages)
            completion_tokens = COMPLETION_TOKENS_PER_CONTEXT * len(contexts) + _COMPLETION_OVERHEAD
        cost = None
        if self.prices is not None:
            cost = prompt_tokens * self.prices[0] + completion_tokens * self.prices[1]
        self.calls += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        if cost is not None and self.cost_usd is not None:
            self.cost_usd += cost
        verdicts = tuple(Verdict(i, False, "dry run") for i in range(len(contexts)))
        return Judgement(verdicts=verdicts, model=self._model, usage=Usage(1, prompt_tokens, completion_tokens),
                         cost_usd=cost)
