"""Turning a model string into a judge (kept free of pydantic so the processor imports cheaply)."""

from __future__ import annotations

from typing import Any

from cp_observe._types import Judge

__all__ = ["resolve_judge"]


def resolve_judge(model: str | Judge, **llm_options: Any) -> Judge:
    """Turn a model string into a judge: ``"lexical"`` is offline, anything else goes through litellm.

    The one home of this rule, for ``configure()``, ``serve``, the processor and the scorer. ``llm_options``
    (``api_base``, ``api_key``, ``timeout``, ``max_retries``, ``transport``) go to ``LLMJudge`` and are ignored
    otherwise.
    """
    if isinstance(model, str):
        if not model.strip():
            raise ValueError("model must be a litellm model string, 'lexical', or a Judge")
        if model.strip().lower() == "lexical":
            from cp_observe._judging._lexical import LexicalJudge

            return LexicalJudge()
        from cp_observe._judging._llm_judge import LLMJudge

        return LLMJudge(model.strip(), **llm_options)
    if isinstance(model, Judge):
        return model
    raise ValueError(f"model must be a litellm model string or a Judge, got {type(model).__name__}")
