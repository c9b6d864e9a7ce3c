"""Turning a model string into a judge (kept free of pydantic so the processor imports cheaply)."""

from __future__ import annotations

from cp_observe._types import Judge

__all__ = ["resolve_judge"]


def resolve_judge(model: str | Judge) -> Judge:
    """Turn a model string into a judge: ``"lexical"`` is offline, anything else goes through litellm."""
    if isinstance(model, str):
        if not model.strip():
            raise ValueError("model must be a litellm model string, 'lexical', or a Judge")
        if model.strip().lower() == "lexical":
            from cp_observe._lexical import LexicalJudge

            return LexicalJudge()
        from cp_observe._llm_judge import LLMJudge

        return LLMJudge(model.strip())
    if isinstance(model, Judge):
        return model
    raise ValueError(f"model must be a litellm model string or a Judge, got {type(model).__name__}")
