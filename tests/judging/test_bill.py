"""A judgement's cost equals the provider's bill: each family's documented usage, served over loopback HTTP.

The usage blocks are written from each provider's documented reply format (OpenAI chat completions, Azure
OpenAI, Anthropic messages, Gemini ``generateContent``), served by a loopback server in that wire format, read
by the judge on its real path (the lean transport for OpenAI, litellm for the others), and the cost compared
with a hand computation from prices pinned here, to 1e-9 USD (litellm's own cost functions are not the
reference: several have had bugs with cached tokens). The pinned prices are checked against litellm's table
first, so a table that changes a price fails here, by name, rather than silently moving a budget.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cp_observe import LLMJudge
from cp_observe._errors import JudgeError
from cp_observe._judging._prices import Rates, cost_of, price_of, tier_of
from cp_observe._judging._usage import read_usage
from cp_observe._types import Usage
from tests.judging.provider_servers import ProviderServer

_QUERY = "Which planet has the tallest volcano?"
_REFERENCE = "Mars has Olympus Mons, the tallest volcano in the solar system."
_CONTEXTS = [
    "Olympus Mons on Mars is the tallest volcano known.",
    "Bananas are rich in potassium.",
    "The solar system has eight planets.",
]
_USD = 1e-9  # the target: every family's cost equals the hand computation to a billionth of a dollar

# Prices in USD per token as litellm's table has them: (provider, name, tier) -> rates.
_PINNED: dict[tuple[str, str, str], Rates] = {
    ("openai", "gpt-5-mini", "standard"): Rates(2.5e-07, 2e-06, 2.5e-08),
    ("openai", "gpt-5-mini", "flex"): Rates(1.25e-07, 1e-06, 1.25e-08),
    ("openai", "gpt-5-mini", "batch"): Rates(1.25e-07, 1e-06, 1.25e-08),
    ("openai", "gpt-5-mini", "priority"): Rates(4.5e-07, 3.6e-06, 4.5e-08),
    ("azure", "gpt-5.6", "standard"): Rates(4e-06, 2e-05, 4e-07, 5e-06),
    ("azure", "gpt-5.6", "priority"): Rates(8e-06, 4e-05, 8e-07, 1e-05),
    ("anthropic", "claude-haiku-4-5", "standard"): Rates(1e-06, 5e-06, 1e-07, 1.25e-06),
    ("anthropic", "claude-haiku-4-5", "batch"): Rates(5e-07, 2.5e-06, 5e-08, 6.25e-07),
    ("gemini", "gemini-2.5-flash", "standard"): Rates(3e-07, 2.5e-06, 3e-08, None, 2.5e-06),
}


@pytest.mark.parametrize(("provider", "name", "tier"), list(_PINNED))
def test_the_pinned_prices_are_litellms(provider: str, name: str, tier: str) -> None:
    """Each price this file computes with is the one in litellm's table, for that tier's keys."""
    price = price_of(provider, name)
    assert price is not None, f"litellm's table has no price for {provider}/{name}"
    assert price.rates(tier) == _PINNED[provider, name, tier]  # type: ignore[arg-type]


def _judge(server: ProviderServer, model: str, **kwargs: Any) -> LLMJudge:
    return LLMJudge(model, api_base=server.url if not model.startswith("openai/") else server.url + "/v1",
                    api_key="sk-loopback-0000", max_retries=0, **kwargs)


def _run(judge: LLMJudge) -> Any:
    return asyncio.run(judge.judge(_QUERY, _REFERENCE, _CONTEXTS))


def test_the_issues_flex_trial_is_charged_the_flex_price() -> None:
    """gpt-5-mini on flex, 1,000 prompt tokens of which 800 cached, 20 completion tokens: 0.000055 USD."""
    usage = {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020,
             "prompt_tokens_details": {"cached_tokens": 800, "audio_tokens": 0},
             "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                           "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
    with ProviderServer("openai", usage_fixture=usage, top_fields={"service_tier": "flex"}) as server:
        judge = _judge(server, "openai/gpt-5-mini")
        judgement = _run(judge)
    assert judge.path == "lean"
    assert judgement.usage == Usage(1, 1000, 20, cache_read_tokens=800)
    hand = 200 * 1.25e-07 + 800 * 1.25e-08 + 20 * 1e-06
    assert hand == pytest.approx(0.000055, abs=1e-15)
    assert judgement.cost_usd == pytest.approx(hand, abs=_USD)


@pytest.mark.parametrize(("tier", "rates"), [
    ("default", _PINNED["openai", "gpt-5-mini", "standard"]),
    (None, _PINNED["openai", "gpt-5-mini", "standard"]),
    ("priority", _PINNED["openai", "gpt-5-mini", "priority"]),
    ("flex", _PINNED["openai", "gpt-5-mini", "flex"]),
])
def test_openai_cached_reads_writes_and_reasoning_on_each_tier(tier: str | None, rates: Rates) -> None:
    """Lean path: cached reads at the cache price, writes at the input price (no write key), reasoning as output."""
    usage = {"prompt_tokens": 3000, "completion_tokens": 700, "total_tokens": 3700,
             "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 1500},
             "completion_tokens_details": {"reasoning_tokens": 640}}
    top = {} if tier is None else {"service_tier": tier}
    with ProviderServer("openai", usage_fixture=usage, top_fields=top) as server:
        judgement = _run(_judge(server, "openai/gpt-5-mini"))
    assert judgement.usage == Usage(1, 3000, 700, 1024, 1500, 640)
    assert rates.cache_read is not None
    hand = (3000 - 1024 - 1500) * rates.input + 1024 * rates.cache_read + 1500 * rates.input + 700 * rates.output
    assert judgement.cost_usd == pytest.approx(hand, abs=_USD)


def test_azure_cache_writes_reads_and_reasoning_on_the_priority_tier() -> None:
    """litellm path, Azure OpenAI: cache writes at the cache-creation price, on the tier the reply names."""
    usage = {"prompt_tokens": 5000, "completion_tokens": 300, "total_tokens": 5300,
             "prompt_tokens_details": {"cached_tokens": 2048, "cache_write_tokens": 1200},
             "completion_tokens_details": {"reasoning_tokens": 256}}
    with ProviderServer("azure", usage_fixture=usage, top_fields={"service_tier": "priority"}) as server:
        judge = _judge(server, "azure/gpt-5.6", api_version="2024-10-21", temperature=1)  # a reasoning model
        judgement = _run(judge)
    assert judge.path == "litellm"
    assert judgement.usage == Usage(1, 5000, 300, 2048, 1200, 256)
    hand = 1752 * 8e-06 + 2048 * 8e-07 + 1200 * 1e-05 + 300 * 4e-05
    assert judgement.cost_usd == pytest.approx(hand, abs=_USD)


@pytest.mark.parametrize("base_model", ["azure/gpt-5.6", "gpt-5.6"])
def test_an_azure_deployment_is_priced_by_its_base_model(base_model: str) -> None:
    """A deployment name the table does not know, priced by litellm's ``base_model`` keyword."""
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100,
             "prompt_tokens_details": {"cached_tokens": 600}}
    with ProviderServer("azure", usage_fixture=usage) as server:
        judge = _judge(server, "azure/our-judge-deployment", api_version="2024-10-21", temperature=1,
                       base_model=base_model)
        judgement = _run(judge)
    assert judgement.cost_usd == pytest.approx(400 * 4e-06 + 600 * 4e-07 + 100 * 2e-05, abs=_USD)
    assert server.requests[0].path.startswith("/openai/deployments/our-judge-deployment/")


@pytest.mark.parametrize(("tier", "rates"), [
    ("standard", _PINNED["anthropic", "claude-haiku-4-5", "standard"]),
    ("batch", _PINNED["anthropic", "claude-haiku-4-5", "batch"]),
])
def test_anthropic_cache_writes_and_reads_through_litellm(tier: str, rates: Rates) -> None:
    """Anthropic's input_tokens excludes cache reads and writes: each is charged at its own price."""
    usage = {"input_tokens": 120, "cache_creation_input_tokens": 2500, "cache_read_input_tokens": 4000,
             "output_tokens": 90, "service_tier": tier}
    with ProviderServer("anthropic", usage_fixture=usage) as server:
        judgement = _run(_judge(server, "anthropic/claude-haiku-4-5"))
    assert judgement.usage == Usage(1, 120 + 2500 + 4000, 90, 4000, 2500, 0)
    assert rates.cache_read is not None and rates.cache_creation is not None
    hand = 120 * rates.input + 2500 * rates.cache_creation + 4000 * rates.cache_read + 90 * rates.output
    assert judgement.cost_usd == pytest.approx(hand, abs=_USD)


def test_gemini_cached_content_and_thoughts_through_litellm() -> None:
    """Gemini's candidatesTokenCount excludes thoughtsTokenCount: the thoughts are billed as reasoning output."""
    usage = {"promptTokenCount": 1800, "cachedContentTokenCount": 1200, "candidatesTokenCount": 60,
             "thoughtsTokenCount": 410, "totalTokenCount": 2270}
    with ProviderServer("gemini", usage_fixture=usage) as server:
        judgement = _run(_judge(server, "gemini/gemini-2.5-flash"))
    assert judgement.usage == Usage(1, 1800, 470, 1200, 0, 410)
    hand = 600 * 3e-07 + 1200 * 3e-08 + 60 * 2.5e-06 + 410 * 2.5e-06
    assert judgement.cost_usd == pytest.approx(hand, abs=_USD)


_ONE_CALL = {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940,
             "prompt_tokens_details": {"cached_tokens": 512}}
_ONE_CALL_USD = 388 * 2.5e-07 + 512 * 2.5e-08 + 40 * 2e-06


def test_unparsable_replies_corrective_and_per_context_calls_are_all_charged() -> None:
    """A reply that does not parse, the corrective retry and the per-context calls are each billed and counted."""
    garbage = ["this is not a verdict", "neither is this"]
    with ProviderServer("openai", usage_fixture=_ONE_CALL, texts=list(garbage)) as server:
        judgement = _run(_judge(server, "openai/gpt-5-mini"))
    calls = 2 + len(_CONTEXTS)  # the first call, its corrective retry, then one call per context
    assert judgement.usage.calls == calls == len(server.requests)
    assert judgement.cost_usd == pytest.approx(calls * _ONE_CALL_USD, abs=_USD)


def test_a_judgement_that_fails_carries_the_cost_of_its_billed_replies() -> None:
    """No usable verdict after every retry: the JudgeError says what the replies it got cost."""
    garbage = ["no verdict here"] * (2 + len(_CONTEXTS))
    with ProviderServer("openai", usage_fixture=_ONE_CALL, texts=garbage) as server:
        with pytest.raises(JudgeError) as raised:
            _run(_judge(server, "openai/gpt-5-mini"))
    assert raised.value.calls == len(server.requests) == 2 + len(_CONTEXTS)
    assert raised.value.cost_usd == pytest.approx(raised.value.calls * _ONE_CALL_USD, abs=_USD)


def test_an_unpriced_models_failure_carries_an_unknown_cost() -> None:
    """A model litellm has no price for: the failure's cost is unknown (None), not zero."""
    garbage = ["no verdict here"] * (2 + len(_CONTEXTS))
    with ProviderServer("openai", usage_fixture=_ONE_CALL, texts=garbage) as server:
        with pytest.raises(JudgeError) as raised:
            _run(_judge(server, "openai/judge-with-no-price"))
    assert raised.value.cost_usd is None


# Documented reply shapes read without litellm (the lean path, and batch result files).
@pytest.mark.parametrize(("reply", "usage", "tier"), [
    ({"service_tier": "flex", "usage": {"prompt_tokens": 1000, "completion_tokens": 20,
                                        "prompt_tokens_details": {"cached_tokens": 800}}},
     Usage(1, 1000, 20, 800), "flex"),
    ({"type": "message", "usage": {"input_tokens": 10, "cache_creation_input_tokens": 20,
                                   "cache_read_input_tokens": 30, "output_tokens": 5, "service_tier": "batch"}},
     Usage(1, 60, 5, 30, 20), "batch"),
    ({"usageMetadata": {"promptTokenCount": 100, "cachedContentTokenCount": 40, "candidatesTokenCount": 7,
                        "thoughtsTokenCount": 13}}, Usage(1, 100, 20, 40, 0, 13), "standard"),
    ({"object": "response", "service_tier": "default",
      "usage": {"input_tokens": 300, "input_tokens_details": {"cached_tokens": 128}, "output_tokens": 50,
                "output_tokens_details": {"reasoning_tokens": 32}}}, Usage(1, 300, 50, 128, 0, 32), "standard"),
    ({"choices": []}, Usage(1), "standard"),
    ({"usage": {"prompt_tokens": "many", "completion_tokens": -3, "prompt_tokens_details": None}}, Usage(1),
     "standard"),
])
def test_each_documented_usage_shape_reads_into_one_usage(reply: dict[str, Any], usage: Usage, tier: str) -> None:
    """OpenAI chat and Responses, Anthropic, Gemini and malformed usage read into the one normalised shape."""
    assert read_usage(reply) == (usage, tier)


def test_tiers_read_from_replies_and_the_cost_function_for_other_callers() -> None:
    """``tier_of`` maps what providers write; ``cost_of`` prices a usage on a tier by model string."""
    assert [tier_of(t) for t in ("default", "auto", "scale", "FLEX", "priority", "batch", None, 3)] == [
        "standard", "standard", "standard", "flex", "priority", "batch", "standard", "standard"]
    trial = Usage(1, 1000, 20, cache_read_tokens=800)
    assert cost_of("openai/gpt-5-mini", trial, "flex") == pytest.approx(0.000055, abs=_USD)
    assert cost_of("openai/gpt-5-mini", trial, "batch") == pytest.approx(0.000055, abs=_USD)
    assert cost_of("openai/gpt-5-mini", trial) == pytest.approx(0.000110, abs=_USD)
    assert cost_of("openai/judge-with-no-price", trial) is None


def test_a_budget_over_an_unpriced_model_is_refused_at_configuration() -> None:
    """daily_budget_usd with a judge (or an LLM cheap judge) litellm has no price for: ConfigurationError naming it."""
    from cp_observe import ContextPrecisionProcessor, LexicalJudge
    from cp_observe._errors import ConfigurationError

    unpriced = LLMJudge("openai/judge-with-no-price", api_key="sk-loopback-0000")
    with pytest.raises(ConfigurationError, match="'openai/judge-with-no-price'"):
        ContextPrecisionProcessor(unpriced, daily_budget_usd=1.0)
    with pytest.raises(ConfigurationError, match="'hosted_vllm/cheap-one'"):
        ContextPrecisionProcessor(LLMJudge("openai/gpt-5-mini"), cheap_judge="hosted_vllm/cheap-one",
                                  daily_budget_usd=1.0)
    # No budget, a budget of 0 (no call at all, whatever the price), a priced model, a judge pricing itself.
    for judge, budget in ((unpriced, None), (unpriced, 0.0), (LLMJudge("openai/gpt-5-mini"), 1.0),
                          (LexicalJudge(), 1.0)):
        ContextPrecisionProcessor(judge, daily_budget_usd=budget).shutdown()
