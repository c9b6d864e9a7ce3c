"""What a judge call sends beside the messages: the parameters a model accepts, decided once per judge.

- ``temperature: 0`` (the same verdict for the same input), except for the reasoning models of OpenAI's
  wire format (``openai``, ``azure``; gpt-5, o-series): they reject any temperature but 1 while they reason.
  Which models reason comes from litellm's table (``supports_reasoning``), read without importing litellm.
- ``reasoning_effort`` for those models: ``"auto"`` takes the lowest effort the table says the model takes
  above none (``minimal`` where ``supports_minimal_reasoning_effort``, else ``low``), since reasoning tokens
  are billed as output. Gemini's thinking models (``gemini/``, ``vertex_ai/``) think unless told otherwise and
  bill it as output too: ``"auto"`` sends them ``minimal``, which litellm turns into the model's smallest
  thinking budget. Claude thinks only when asked, so ``"auto"`` sends it nothing. Any other value is sent as
  given, to any model the table marks as reasoning.
- ``service_tier`` when one is set (``"flex"``: batch prices for a synchronous call that may queue).
- ``prompt_cache_key`` (the prompt's label and the model) for OpenAI's wire, so calls of one prompt version
  land on the same prefix cache.

A model the table does not know gets ``temperature: 0`` and no effort; if it answers 400 naming a parameter,
``LLMJudge`` drops that parameter for the rest of its life (``rejected_parameter``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "CACHE_KEY_PROVIDERS",
    "EFFORTS",
    "FLEX_LATENCY_RATIO",
    "TIERS",
    "cache_key",
    "flex_bounds",
    "rejected_parameter",
    "request_params",
]

#: Values of the reasoning-effort setting: ``auto`` (the lowest above none) or a level sent as given.
EFFORTS: Final = ("auto", "none", "minimal", "low", "medium", "high")
#: Values of the service-tier setting (``None``: not sent, the provider's default).
TIERS: Final = ("auto", "default", "flex", "priority")
#: Providers whose API takes ``prompt_cache_key`` and the reasoning-model rule above.
CACHE_KEY_PROVIDERS: Final = ("openai", "azure")
#: Providers whose reasoning models think unless told not to (Gemini's), and take litellm's ``minimal``.
_THINKS_BY_DEFAULT: Final = ("gemini", "vertex_ai")
#: Parameters the judge adds on its own, and so may drop when a model rejects them.
_OWN: Final = ("temperature", "reasoning_effort", "prompt_cache_key")
#: A flex call's median latency over a standard call's (about 120 s against 4 s): the assumption the flex sizing
#: and ``benchmarks/judging/bench_flex_alert_delay.py`` share; providers publish no flex latency distribution.
FLEX_LATENCY_RATIO: Final = 30
_REJECTION_WORDS: Final = ("unsupported", "not supported", "unrecognized", "unknown", "does not support",
                           "doesn't support", "not allowed", "extra inputs are not permitted", "invalid")


def request_params(
    model: str,
    entry: Mapping[str, Any] | None,
    *,
    prompt_label: str,
    reasoning_effort: str = "auto",
    service_tier: str | None = None,
) -> dict[str, Any]:
    """The parameters of every call of a judge of ``model``, given its litellm table ``entry`` (or ``None``).

    A pure function: the lean path, litellm's path and a batch request of the same judge send the same ones.
    """
    provider = _provider(model, entry)
    reasons = bool(entry and entry.get("supports_reasoning"))
    openai_wire = provider in CACHE_KEY_PROVIDERS
    params: dict[str, Any] = {}
    if not (reasons and openai_wire):
        params["temperature"] = 0
    if reasons and reasoning_effort == "auto" and openai_wire:
        params["reasoning_effort"] = "minimal" if entry and entry.get("supports_minimal_reasoning_effort") else "low"
    elif reasons and reasoning_effort == "auto" and provider.startswith(_THINKS_BY_DEFAULT):
        params["reasoning_effort"] = "minimal"
    elif reasons and reasoning_effort != "auto":
        params["reasoning_effort"] = reasoning_effort
    if service_tier is not None:
        params["service_tier"] = service_tier
    if openai_wire:
        params["prompt_cache_key"] = cache_key(prompt_label, model)
    return params


def cache_key(prompt_label: str, model: str) -> str:
    """The stable ``prompt_cache_key``: the same for every call of one prompt version on one model."""
    return f"cp-observe:{prompt_label}:{model.rpartition('/')[2]}"[:64]


def rejected_parameter(exc: BaseException, sent: Mapping[str, Any]) -> str | None:
    """The parameter of ours a 400 (or litellm's ``UnsupportedParamsError``) says the model rejects, or None."""
    status = getattr(exc, "status_code", None)
    if status not in (400, 422) and type(exc).__name__ not in {"BadRequestError", "UnsupportedParamsError"}:
        return None
    text = str(exc).lower()
    if not any(word in text for word in _REJECTION_WORDS):
        return None
    return next((name for name in _OWN if name in sent and name in text), None)


def _provider(model: str, entry: Mapping[str, Any] | None) -> str:
    provider, slash, _ = model.partition("/")
    if slash:
        return provider
    found = entry.get("litellm_provider") if entry else None
    return found if isinstance(found, str) else ""


def flex_bounds(
    concurrency: int, queue_size: int, evaluation_timeout_s: float, *, call_timeout_s: float, flex_timeout_s: float,
    max_retries: int,
) -> tuple[int, float]:
    """Calls in flight and the evaluation timeout that keep the same evaluations per minute on the flex tier.

    Little's law: calls in flight = rate x latency, so the rate ``concurrency`` sustains at the standard tier's
    latency takes ``FLEX_LATENCY_RATIO`` times as many at flex latency. ``queue_size`` bounds targets waiting and
    in flight together, so in flight never exceeds it and memory stays what ``queue_size`` allows. One
    evaluation may wait the whole flex timeout and then its standard-tier fallback with its retries, so its
    timeout is at least that.
    """
    flex_concurrency = max(concurrency, min(queue_size, concurrency * FLEX_LATENCY_RATIO))
    needed = flex_timeout_s + call_timeout_s * (max_retries + 1)
    return flex_concurrency, max(evaluation_timeout_s, needed)
