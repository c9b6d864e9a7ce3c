"""The string rule that says whether a reranker's model is the judge's own kind (``_judging/_identity.py``)."""

from __future__ import annotations

import pytest

from cp_observe._judging._identity import model_family, same_family


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("openai/gpt-4o-mini", "openai"),
        ("azure/my-gpt4o-deployment", "openai"),
        ("gpt-4o", "openai"),
        ("o3-mini", "openai"),
        ("anthropic/claude-haiku-4-5", "anthropic"),
        ("claude-sonnet-4-5", "anthropic"),
        ("bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0", "anthropic"),
        ("bedrock/us.anthropic.claude-3-5-haiku-20241022-v1:0", "anthropic"),
        ("bedrock/meta.llama3-70b-instruct-v1:0", "meta"),
        ("gemini/gemini-2.5-flash", "google"),
        ("vertex_ai/gemini-2.0-flash", "google"),
        ("hosted_vllm/google/gemma-3-270m-it", "google"),
        ("ollama/llama3.1:8b", "meta"),
        ("hosted_vllm/meta-llama/Llama-3.1-8B-Instruct", "meta"),
        ("cohere/rerank-v3.5", "cohere"),
        ("rerank-english-v3.0", "cohere"),
        ("cohere_chat/command-r", "cohere"),
        ("BAAI/bge-reranker-v2-m3", "baai"),
        ("Qwen/Qwen3-Reranker-4B", "qwen"),
        ("hosted_vllm/Qwen/Qwen2.5-7B-Instruct", "qwen"),
        ("cross-encoder/ms-marco-MiniLM-L-6-v2", "cross-encoder"),
        ("bge-reranker-base", "bge"),
    ],
)
def test_model_family_by_provider_prefix_and_name(model: str, family: str) -> None:
    """Provider prefixes name a vendor (aliases folded), hosts defer to the model name, bare names by leading word."""
    assert model_family(model) == family


@pytest.mark.parametrize(
    ("judge", "reranker", "same"),
    [
        ("openai/gpt-4o-mini", "openai/gpt-4o-mini", True),  # the very model
        ("openai/gpt-4o-mini", "OpenAI/GPT-4o-mini ", True),  # spelled differently
        ("openai/gpt-4o-mini", "gpt-4.1", True),  # same vendor, bare name
        ("openai/gpt-4o-mini", "azure/gpt-4o", True),  # Azure serves OpenAI's models
        ("anthropic/claude-haiku-4-5", "bedrock/anthropic.claude-3-5-sonnet", True),
        ("gemini/gemini-2.5-flash", "vertex_ai/gemini-2.5-pro", True),
        ("openai/gpt-4o-mini", "anthropic/claude-haiku-4-5", False),
        ("openai/gpt-4o-mini", "BAAI/bge-reranker-v2-m3", False),  # a cross-encoder of another family
        ("anthropic/claude-haiku-4-5", "cohere/rerank-v3.5", False),
        ("hosted_vllm/google/gemma-3-270m-it", "Qwen/Qwen3-Reranker-4B", False),
        ("openai/gpt-4o-mini", None, False),  # unknown: nothing said
        (None, "openai/gpt-4o-mini", False),
        ("openai/gpt-4o-mini", "  ", False),
    ],
)
def test_same_family(judge: str | None, reranker: str | None, same: bool) -> None:
    """The same model, or the same family, is flagged; another family, or an unknown model, is not."""
    assert same_family(judge, reranker) is same
