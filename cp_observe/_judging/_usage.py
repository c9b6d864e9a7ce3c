"""One reply's usage, read from any provider's reply into ``Usage`` and the tier it ran on, without litellm.

Each provider counts differently; ``Usage`` has one shape (`_types.py`): ``prompt_tokens`` includes the cache
reads and writes, ``completion_tokens`` includes the reasoning tokens. The shapes read, each as its provider
documents it:

- OpenAI chat completions (also Azure OpenAI and OpenAI-compatible servers, and litellm's ``ModelResponse``,
  which normalises every provider to it): ``usage.prompt_tokens`` (cached included),
  ``prompt_tokens_details.cached_tokens`` and ``.cache_write_tokens``,
  ``completion_tokens_details.reasoning_tokens`` (included in ``completion_tokens``), and the top-level
  ``service_tier``. litellm also keeps Anthropic's ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens`` on its usage, and Anthropic's ``service_tier`` inside it; both are read.
- OpenAI Responses: ``input_tokens`` (cached included), ``input_tokens_details.cached_tokens``,
  ``output_tokens``, ``output_tokens_details.reasoning_tokens``.
- Anthropic messages: ``input_tokens`` *excludes* ``cache_creation_input_tokens`` and
  ``cache_read_input_tokens``, so the prompt is their sum; ``usage.service_tier``.
- Gemini ``generateContent``: ``usageMetadata.promptTokenCount`` (``cachedContentTokenCount`` included),
  ``candidatesTokenCount`` *excludes* ``thoughtsTokenCount``, so the completion is their sum.

A reply is a parsed JSON mapping (the lean path, batch result files) or litellm's response object: fields are
read by key from a mapping and by attribute otherwise. A missing or malformed count reads as 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cp_observe._judging._prices import Tier, tier_of
from cp_observe._types import Usage

__all__ = ["read_usage"]


def read_usage(reply: Any) -> tuple[Usage, Tier]:
    """The usage of one call (``calls=1``) and the tier it is billed on, from the provider's reply."""
    metadata = _field(reply, "usageMetadata")
    if metadata is not None:
        return _gemini(metadata), "standard"
    usage = _field(reply, "usage")
    tier = tier_of(_field(reply, "service_tier") or _field(usage, "service_tier"))
    if usage is None:
        return Usage(calls=1), tier
    if _field(usage, "prompt_tokens") is None and _field(usage, "input_tokens") is not None:
        if _field(usage, "input_tokens_details") is not None or _field(usage, "output_tokens_details") is not None:
            return _responses(usage), tier
        return _anthropic(usage), tier
    return _chat(usage), tier


def _chat(usage: Any) -> Usage:
    prompt_details = _field(usage, "prompt_tokens_details")
    completion_details = _field(usage, "completion_tokens_details")
    read = _count(prompt_details, "cached_tokens") or _count(usage, "cache_read_input_tokens")
    write = _count(prompt_details, "cache_write_tokens") or _count(usage, "cache_creation_input_tokens")
    return Usage(1, _count(usage, "prompt_tokens"), _count(usage, "completion_tokens"), read, write,
                 _count(completion_details, "reasoning_tokens"))


def _responses(usage: Any) -> Usage:
    return Usage(1, _count(usage, "input_tokens"), _count(usage, "output_tokens"),
                 _count(_field(usage, "input_tokens_details"), "cached_tokens"), 0,
                 _count(_field(usage, "output_tokens_details"), "reasoning_tokens"))


def _anthropic(usage: Any) -> Usage:
    read = _count(usage, "cache_read_input_tokens")
    write = _count(usage, "cache_creation_input_tokens")
    return Usage(1, _count(usage, "input_tokens") + read + write, _count(usage, "output_tokens"), read, write, 0)


def _gemini(metadata: Any) -> Usage:
    thoughts = _count(metadata, "thoughtsTokenCount")
    return Usage(1, _count(metadata, "promptTokenCount"), _count(metadata, "candidatesTokenCount") + thoughts,
                 _count(metadata, "cachedContentTokenCount"), 0, thoughts)


def _field(value: Any, name: str) -> Any:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _count(value: Any, name: str) -> int:
    number = _field(value, name)
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        return 0
    return max(int(number), 0)
