"""What a judge call sends beside the messages, on the wire of a loopback judge: reasoning models, flex, cache key.

Every judgement here goes over real HTTP to ``cp_observe.testing.JudgeServer``, on both the lean path and
litellm's; the model strings are real ones so that litellm's own table decides what a reasoning model is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from cp_observe import JudgeTransportError, LLMJudge
from cp_observe._judging._params import cache_key, request_params
from cp_observe._judging._prices import table_entry
from cp_observe.testing import JudgeServer, delay, status

CONTEXTS = ["Paris is the capital of France.", "Bananas are a good source of potassium."]
QUERY = "What is the capital of France?"
ANSWER = "The capital of France is Paris."
_CAPACITY_429 = {"error": {"message": "Resource unavailable: flex capacity is exhausted, try again later.",
                           "type": "server_error", "param": None, "code": "resource_unavailable"}}
_NO_FLEX_400 = {"error": {"message": "Invalid service_tier: flex is not available for this model.",
                          "type": "invalid_request_error", "param": "service_tier", "code": None}}
_TEMPERATURE_400 = {"error": {"message": "Unsupported value: 'temperature' does not support 0 with this model. "
                              "Only the default (1) value is supported.", "type": "invalid_request_error",
                              "param": "temperature", "code": "unsupported_value"}}


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    """A loopback judge server answering like a judge by default."""
    with JudgeServer() as running:
        yield running


def _judge(server: JudgeServer, model: str, transport: str = "auto", **kwargs: Any) -> LLMJudge:
    options: dict[str, Any] = {"api_base": server.url, "api_key": "sk-test-key-0000", "timeout": 5.0,
                               "cache_size": 0, "backoff_base": 0.01, "backoff_max": 0.02, "transport": transport}
    options.update(kwargs)
    return LLMJudge(model, **options)


def _bodies(server: JudgeServer) -> list[dict[str, Any]]:
    return [r.body for r in server.requests]


@pytest.mark.parametrize("transport", ["auto", "litellm"])
def test_a_reasoning_model_gets_no_temperature_and_the_lowest_effort(server: JudgeServer, transport: str) -> None:
    """gpt-5-mini rejects temperature 0: it is not sent, and reasoning_effort is 'minimal' (its table says so)."""
    judgement = asyncio.run(_judge(server, "openai/gpt-5-mini", transport).judge(QUERY, ANSWER, CONTEXTS))
    (body,) = _bodies(server)
    assert "temperature" not in body
    assert body["reasoning_effort"] == "minimal"
    assert body["prompt_cache_key"] == "cp-observe:cp-3:gpt-5-mini"
    assert [v.relevant for v in judgement.verdicts] == [True, False]


def test_a_chat_model_keeps_temperature_zero(server: JudgeServer) -> None:
    """gpt-4o-mini does not reason: temperature 0, no reasoning_effort."""
    asyncio.run(_judge(server, "openai/gpt-4o-mini").judge(QUERY, ANSWER, CONTEXTS))
    (body,) = _bodies(server)
    assert body["temperature"] == 0
    assert "reasoning_effort" not in body


@pytest.mark.parametrize(("model", "effort", "expected"), [
    ("gpt-5-mini", "auto", {"reasoning_effort": "minimal"}),
    ("o4-mini", "auto", {"reasoning_effort": "low"}),  # no 'minimal' in its table entry
    ("gpt-4o-mini", "auto", {"temperature": 0}),
    ("gpt-5-mini", "low", {"reasoning_effort": "low"}),
    ("anthropic/claude-haiku-4-5", "auto", {"temperature": 0}),  # reasons only when asked; takes temperature
    ("anthropic/claude-haiku-4-5", "low", {"temperature": 0, "reasoning_effort": "low"}),
    ("hosted_vllm/some-model", "auto", {"temperature": 0}),  # unknown to the table
    ("gemini/gemini-2.5-flash", "auto", {"temperature": 0, "reasoning_effort": "minimal"}),  # thinks unless told
])
def test_request_params_from_the_table(model: str, effort: str, expected: dict[str, Any]) -> None:
    """Temperature and effort are decided from litellm's table; the cache key only on OpenAI's wire."""
    params = request_params(model, table_entry(model), prompt_label="cp-3", reasoning_effort=effort)
    params.pop("prompt_cache_key", None)
    assert params == expected


def test_the_cache_key_is_stable_per_prompt_and_model() -> None:
    """The same key for every call of one prompt version on one model, another for another version."""
    assert cache_key("cp-3", "openai/gpt-5-mini") == cache_key("cp-3", "gpt-5-mini")
    assert cache_key("cp-3", "gpt-5-mini") != cache_key("cp-2", "gpt-5-mini")
    assert "prompt_cache_key" not in request_params("hosted_vllm/m", None, prompt_label="cp-3")


@pytest.mark.parametrize("transport", ["auto", "litellm"])
def test_a_rejected_parameter_is_dropped_for_good(server: JudgeServer, transport: str) -> None:
    """A model unknown to the table answers 400 to temperature: sent once more without it, and never again."""
    server.script(status(400, body=_TEMPERATURE_400))
    judge = _judge(server, "openai/judge-test", transport)
    asyncio.run(judge.judge(QUERY, ANSWER, CONTEXTS))
    asyncio.run(judge.judge("another question", ANSWER, CONTEXTS))
    bodies = _bodies(server)
    assert len(bodies) == 3
    assert bodies[0]["temperature"] == 0
    assert all("temperature" not in body for body in bodies[1:])


@pytest.mark.parametrize("transport", ["auto", "litellm"])
@pytest.mark.parametrize("refusal", [_CAPACITY_429, _NO_FLEX_400], ids=["capacity-429", "no-flex-400"])
def test_a_flex_refusal_falls_back_to_standard_for_that_request(
    server: JudgeServer, transport: str, refusal: dict[str, Any]
) -> None:
    """Flex out of capacity (or not offered): the same request at the standard tier, counted; the next one flex."""
    code = 429 if refusal is _CAPACITY_429 else 400
    server.script(status(code, body=refusal))
    judge = _judge(server, "openai/gpt-5-mini", transport, service_tier="flex", max_retries=0)
    first = asyncio.run(judge.judge(QUERY, ANSWER, CONTEXTS))
    asyncio.run(judge.judge("another question", ANSWER, CONTEXTS))
    bodies = _bodies(server)
    assert [b.get("service_tier") for b in bodies] == ["flex", None, "flex"]
    assert bodies[0]["messages"] == bodies[1]["messages"]
    assert judge.tier_fallbacks == 1
    assert first.cost_usd is not None and first.cost_usd > 0


@pytest.mark.parametrize("transport", ["auto", "litellm"])
def test_a_rate_limit_on_flex_is_retried_at_flex(server: JudgeServer, transport: str) -> None:
    """A rate-limit 429 is not a capacity refusal: retried as today, still on the flex tier, not counted."""
    server.script(status(429, headers={"Retry-After": "0.05"}))
    judge = _judge(server, "openai/gpt-5-mini", transport, service_tier="flex")
    asyncio.run(judge.judge(QUERY, ANSWER, CONTEXTS))
    assert [b.get("service_tier") for b in _bodies(server)] == ["flex", "flex"]
    assert judge.tier_fallbacks == 0


def test_a_rate_limit_on_flex_still_fails_as_a_transport_error(server: JudgeServer) -> None:
    """Rate limits past the retries raise JudgeTransportError (which the circuit counts), as without flex."""
    server.script(*[status(429)] * 3)
    judge = _judge(server, "openai/gpt-5-mini", service_tier="flex", max_retries=2)
    with pytest.raises(JudgeTransportError):
        asyncio.run(judge.judge(QUERY, ANSWER, CONTEXTS))
    assert judge.tier_fallbacks == 0


@pytest.mark.parametrize("transport", ["auto", "litellm"])
def test_flex_calls_get_their_own_timeout(server: JudgeServer, transport: str) -> None:
    """A slow flex answer within flex_timeout is read, where the standard timeout would have cut it."""
    server.script(delay(1.5))
    judge = _judge(server, "openai/gpt-5-mini", transport, timeout=0.5, flex_timeout=10.0, service_tier="flex",
                   max_retries=0)
    judgement = asyncio.run(judge.judge(QUERY, ANSWER, CONTEXTS))
    assert len(judgement.verdicts) == 2
    server.clear()
    server.script(delay(1.5))
    standard = _judge(server, "openai/gpt-5-mini", transport, timeout=0.5, max_retries=0)
    with pytest.raises(JudgeTransportError):
        asyncio.run(standard.judge(QUERY, ANSWER, CONTEXTS))


def test_bad_values_are_clear_errors() -> None:
    """Unknown tier, effort, reasons or prompt version: ValueError naming the argument."""
    for kwargs, word in (({"service_tier": "slow"}, "service_tier"), ({"reasoning_effort": "tiny"}, "reasoning_effort"),
                         ({"reasons": "some"}, "reasons"), ({"prompt_version": "cp-9"}, "prompt_version"),
                         ({"prompt_version": "cp-2", "reasons": "no"}, "cp-2"), ({"flex_timeout": 0}, "flex_timeout")):
        with pytest.raises(ValueError, match=word):
            LLMJudge("openai/gpt-5-mini", **kwargs)


def test_the_settings_reach_the_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    """judge_service_tier, judge_reasons, judge_reasoning_effort, judge_prompt_version from the environment."""
    from cp_observe._config._settings import Settings
    from cp_observe._wiring._providers import judge_from_settings

    monkeypatch.setenv("CP_OBSERVE_JUDGE_SERVICE_TIER", "flex")
    monkeypatch.setenv("CP_OBSERVE_JUDGE_REASONS", "no")
    monkeypatch.setenv("CP_OBSERVE_JUDGE_REASONING_EFFORT", "low")
    monkeypatch.setenv("CP_OBSERVE_JUDGE_FLEX_TIMEOUT_S", "600")
    judge = judge_from_settings(Settings.resolve({"judge": "openai/gpt-5-mini"}))
    assert isinstance(judge, LLMJudge)
    assert (judge.service_tier, judge.reasons, judge.reasoning_effort, judge.flex_timeout) == ("flex", "no", "low", 600)
    assert judge.prompt_version == "cp-3+reasons-no"


def test_flex_keeps_the_rate_by_littles_law() -> None:
    """At 30x the latency, 30x the calls in flight (never more than queue_size), and time for the fallback."""
    from cp_observe._judging._params import FLEX_LATENCY_RATIO, flex_bounds

    assert flex_bounds(4, 1000, 300.0, call_timeout_s=30.0, flex_timeout_s=900.0, max_retries=3) == (
        4 * FLEX_LATENCY_RATIO, 900.0 + 30.0 * 4)
    assert flex_bounds(4, 50, 3000.0, call_timeout_s=30.0, flex_timeout_s=900.0, max_retries=0) == (50, 3000.0)
    assert flex_bounds(8, 4, 300.0, call_timeout_s=30.0, flex_timeout_s=60.0, max_retries=0)[0] == 8


def test_a_flex_processor_gets_the_flex_bounds() -> None:
    """processor_from_settings with judge_service_tier='flex': the evaluator's concurrency and timeout follow."""
    from cp_observe._config._settings import Settings
    from cp_observe._wiring._providers import judge_from_settings, processor_from_settings

    for tier, concurrency, timeout in ((None, 4, 300.0), ("flex", 120, 1020.0)):
        settings = Settings(judge="openai/gpt-5-mini", judge_api_key="sk-test-key-0000", judge_service_tier=tier)
        processor = processor_from_settings(judge_from_settings(settings), settings)
        try:
            assert (processor.options.concurrency, processor.options.evaluation_timeout_s) == (concurrency, timeout)
            assert processor.options.queue_size == 1000
        finally:
            processor.shutdown()


@pytest.mark.parametrize("transport", ["auto", "litellm"])
def test_the_request_body_is_what_a_call_sends(server: JudgeServer, transport: str) -> None:
    """request_body (for batch requests) equals the body of the synchronous call, but for model and tier."""
    judge = _judge(server, "openai/gpt-5-mini", transport, service_tier="flex", reasons="no")
    asyncio.run(judge.judge(QUERY, ANSWER, CONTEXTS))
    (sent,) = _bodies(server)
    expected = {k: v for k, v in sent.items() if k not in {"model", "service_tier"}}
    assert judge.request_body(QUERY, ANSWER, CONTEXTS) == expected



def test_flex_refusals_are_counted_each_and_logged_once(server: JudgeServer, caplog: pytest.LogCaptureFixture) -> None:
    """Two capacity refusals: two fallbacks counted, one WARNING line."""
    caplog.set_level("WARNING", logger="cp_observe")
    server.script(status(429, body=_CAPACITY_429))
    judge = _judge(server, "openai/gpt-5-mini", service_tier="flex")
    asyncio.run(judge.judge(QUERY, ANSWER, CONTEXTS))
    server.script(status(429, body=_CAPACITY_429))
    asyncio.run(judge.judge("another question", ANSWER, CONTEXTS))
    assert judge.tier_fallbacks == 2
    assert sum("flex tier refused" in r.getMessage() for r in caplog.records) == 1
