"""What the judge was billed reaches the evaluation span, the token histogram, the cost counter and the budget.

A real processor scores a real turn with an ``LLMJudge`` on the lean path against a loopback server answering
with a documented OpenAI usage block (cache reads and writes); a judgement whose replies never parse fails,
and its billed replies are still counted, in the cost counter and against the daily budget.
"""

from __future__ import annotations

import pytest

import cp_observe
from cp_observe import _names as n
from tests.conftest import Otel
from tests.judging.provider_servers import ProviderServer
from tests.turn_support import make_turn

_USAGE = {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940,
          "prompt_tokens_details": {"cached_tokens": 512, "cache_write_tokens": 256}}
# gpt-5-mini as litellm's table prices it (tests/judging/test_bill.py pins these): uncached and written prompt
# tokens at the input price (the table has no cache-write price for it), cached at the cache-read price.
_CALL_USD = (900 - 512) * 2.5e-07 + 512 * 2.5e-08 + 40 * 2e-06
_CONTEXTS = 3  # make_turn's documents


def _judge(server: ProviderServer) -> cp_observe.LLMJudge:
    return cp_observe.LLMJudge("openai/gpt-5-mini", api_base=server.url + "/v1", api_key="sk-loopback-0000",
                               max_retries=0, timeout=5)


def test_cache_tokens_on_the_evaluation_span_and_in_the_token_histogram(otel: Otel) -> None:
    """gen_ai.usage.cache_read/creation.input_tokens on the span; cache_read/cache_creation token types counted."""
    with ProviderServer("openai", usage_fixture=_USAGE) as server:
        processor = otel.processor(_judge(server))
        turn = make_turn()
        turn.ask("capital of France?")
        assert processor.force_flush(30_000)
    (evaluation,) = otel.by_name(n.EVALUATION_SPAN_NAME)
    assert evaluation.attributes[n.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 512
    assert evaluation.attributes[n.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == 256
    tokens = {p.attributes[n.GEN_AI_TOKEN_TYPE]: p.sum for p in otel.metric_points(n.METRIC_TOKEN_USAGE)}
    assert tokens == {"input": 900, "output": 40, n.TOKEN_TYPE_CACHE_READ: 512, n.TOKEN_TYPE_CACHE_CREATION: 256}
    (cost,) = [p.value for p in otel.metric_points(n.METRIC_JUDGE_COST)]
    assert cost == pytest.approx(_CALL_USD, abs=1e-9)


def test_a_failed_judgements_billed_replies_are_counted_and_spend_the_budget(otel: Otel) -> None:
    """Replies that never parse: the evaluation fails, its calls' cost is counted and spent, the budget then binds.

    The budget is a little under one failed judgement's cost: had the failure spent nothing (as an unpriced
    failure would), the second turn would be judged; it is refused instead.
    """
    calls = 2 + _CONTEXTS  # the first call, the corrective retry, one call per context
    failed_usd = calls * _CALL_USD
    garbage = ["not a verdict"] * calls
    with ProviderServer("openai", usage_fixture=_USAGE, texts=garbage) as server:
        processor = otel.processor(_judge(server), daily_budget_usd=failed_usd * 0.9)
        turn = make_turn()
        turn.ask("capital of France?")
        assert processor.force_flush(30_000)
        assert len(server.requests) == calls
        turn.ask("largest city of France?")
        assert processor.force_flush(30_000)
        assert len(server.requests) == calls  # refused by the budget: no further call
    outcomes = {(p.attributes[n.OUTCOME], p.attributes[n.REASON]): p.value
                for p in otel.metric_points(n.METRIC_EVALUATIONS)}
    assert outcomes == {(n.OUTCOME_FAILED, "judge_error"): 1, (n.OUTCOME_SKIPPED, "budget_exhausted"): 1}
    (cost,) = [p.value for p in otel.metric_points(n.METRIC_JUDGE_COST)]
    assert cost == pytest.approx(failed_usd, abs=1e-9)


def test_an_llm_cheap_judges_cost_spends_the_budget(otel: Otel) -> None:
    """The cascade's cheap judge is an LLM: its billed call spends the budget, which then refuses the LLM judge."""
    with ProviderServer("openai", usage_fixture=_USAGE) as cheap_server, \
            ProviderServer("openai", usage_fixture=_USAGE) as llm_server:
        processor = otel.processor(_judge(llm_server), cheap_judge=_judge(cheap_server), llm_share=1.0,
                                   daily_budget_usd=_CALL_USD * 0.9)
        make_turn().ask("capital of France?")
        assert processor.force_flush(30_000)
        assert (len(cheap_server.requests), len(llm_server.requests)) == (1, 0)
    (evaluation,) = otel.by_name(n.EVALUATION_SPAN_NAME)
    assert evaluation.attributes[n.CP_CASCADE_LLM] == "budget_exhausted"
    (cost,) = [p.value for p in otel.metric_points(n.METRIC_JUDGE_COST)]
    assert cost == pytest.approx(_CALL_USD, abs=1e-9)


def test_a_failed_llm_judgement_in_the_cascade_is_counted_in_the_cost(otel: Otel) -> None:
    """The cascade's LLM judgement fails after billed replies: the cheap score stands, the LLM's cost is counted."""
    calls = 2 + _CONTEXTS
    with ProviderServer("openai", usage_fixture=_USAGE, texts=["not a verdict"] * calls) as server:
        processor = otel.processor(_judge(server), cheap_judge="lexical", llm_share=1.0)
        make_turn().ask("capital of France?")
        assert processor.force_flush(30_000)
        assert len(server.requests) == calls
    (evaluation,) = otel.by_name(n.EVALUATION_SPAN_NAME)
    assert evaluation.attributes[n.CP_CASCADE_LLM] == f"{n.OUTCOME_FAILED}:judge_error"
    costs = {p.attributes[n.GEN_AI_REQUEST_MODEL]: p.value for p in otel.metric_points(n.METRIC_JUDGE_COST)}
    assert costs == {"openai/gpt-5-mini": pytest.approx(calls * _CALL_USD, abs=1e-9)}
