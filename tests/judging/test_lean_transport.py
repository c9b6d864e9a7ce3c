"""The lean transport and litellm's path put equal requests on the wire and read equal judgements.

Both paths of the same ``LLMJudge`` configuration call the same loopback ``JudgeServer``; the test compares
what the server recorded (method, path, parsed body, headers) and what the judge returned (verdicts, usage,
cost). Headers left out of the comparison: ``user-agent`` (the client's name), ``content-length`` (JSON
whitespace: the bodies are compared parsed) and, for ``openai/``, the openai SDK's own ``x-stainless-*``
telemetry headers, which name the SDK's version and platform and which a client that is not the SDK does
not claim.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from cp_observe import LLMJudge
from cp_observe._types import Judgement
from cp_observe.testing import JudgeServer, raw, status

CONTEXTS = [
    "Paris is the capital of France.",
    "Bananas are a good source of potassium.",
    "France is in western Europe; its capital is Paris.",
]
QUERY = "What is the capital of France?"
ANSWER = "The capital of France is Paris."
_IGNORED = frozenset({"user-agent", "content-length"})


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    """A loopback judge server answering like a judge by default."""
    with JudgeServer() as running:
        yield running


def _judge(server: JudgeServer, model: str, transport: str, **kwargs: Any) -> LLMJudge:
    options: dict[str, Any] = {"api_base": server.url, "timeout": 5.0, "cache_size": 0, "backoff_base": 0.01,
                               "backoff_max": 0.02, "transport": transport}
    options.update(kwargs)
    return LLMJudge(model, **options)


def _wire(server: JudgeServer) -> list[tuple[str, str, Any, dict[str, str]]]:
    return [
        (r.method, r.path, r.body,
         {k: v for k, v in r.headers.items() if k not in _IGNORED and not k.startswith("x-stainless-")})
        for r in server.requests
    ]


def _both(server: JudgeServer, model: str, script: tuple[Any, ...] = (), **kwargs: Any) -> list[Any]:
    """Run one judgement through each path; return (wire, judgement) per path."""
    seen = []
    for transport in ("auto", "litellm"):
        server.clear()
        server.script(*script)
        judge = _judge(server, model, transport, **kwargs)
        judgement = asyncio.run(judge.judge(QUERY, ANSWER, CONTEXTS))
        seen.append((judge.path, _wire(server), judgement))
    return seen


def _same_judgement(a: Judgement, b: Judgement) -> None:
    assert a.verdicts == b.verdicts
    assert a.usage == b.usage
    assert a.truncated == b.truncated
    if a.cost_usd is None or b.cost_usd is None:
        assert a.cost_usd is b.cost_usd is None
    else:
        assert a.cost_usd == pytest.approx(b.cost_usd, rel=1e-12, abs=0)


CASES = [
    ("openai/gpt-4o-mini", {"api_key": "sk-test-key-0000"}),  # priced: cost from the table
    ("openai/judge-test", {"api_key": "sk-test-key-0000"}),  # unpriced: cost unknown on both paths
    ("hosted_vllm/judge-test", {}),  # no key: both send litellm's placeholder
    ("hosted_vllm/judge-test", {"api_key": "vllm-key-1234", "max_tokens": 400, "seed": 7}),
    # a reasoning model on the flex tier: no temperature, the lowest effort, service_tier and prompt_cache_key
    ("openai/gpt-5-mini", {"api_key": "sk-test-key-0000", "service_tier": "flex"}),
    ("openai/gpt-4o-mini", {"api_key": "sk-test-key-0000", "reasons": "none"}),  # the schema without reasons
]


@pytest.mark.parametrize(("model", "kwargs"), CASES, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CASES)])
def test_equal_requests_and_judgements(server: JudgeServer, model: str, kwargs: dict[str, Any]) -> None:
    """A well-behaved judge: one call on each path, equal on the wire and in what was read back."""
    (lean_path, lean_wire, lean), (fallback_path, fallback_wire, fallback) = _both(server, model, **kwargs)
    assert (lean_path, fallback_path) == ("lean", "litellm")
    assert len(lean_wire) == 1
    assert lean_wire == fallback_wire
    _same_judgement(lean, fallback)
    if model == "openai/gpt-4o-mini":
        assert lean.cost_usd is not None and lean.cost_usd > 0


def test_equal_through_structured_output_fallback_and_corrective_retry(server: JudgeServer) -> None:
    """A refused json_schema, then a misaligned reply: the same sequence of requests on both paths."""
    server.refuse_json_schema = True
    script = (raw('{"verdicts": [{"context_index": 0, "verdict": "yes", "reason": "r"}]}'),)
    (_, lean_wire, lean), (_, fallback_wire, fallback) = _both(server, "openai/gpt-4o-mini", script,
                                                                api_key="sk-test-key-0000")
    assert len(lean_wire) >= 3  # refused json_schema, the misaligned json_object reply, the corrective retry
    assert [w[2]["response_format"] for w in lean_wire] == [w[2]["response_format"] for w in fallback_wire]
    assert lean_wire == fallback_wire
    _same_judgement(lean, fallback)


def test_equal_retries_after_429(server: JudgeServer) -> None:
    """A 429 with Retry-After is retried after the wait on both paths."""
    script = (status(429, headers={"Retry-After": "0.2"}),)
    (_, lean_wire, lean), (_, fallback_wire, fallback) = _both(server, "openai/gpt-4o-mini", script,
                                                                api_key="sk-test-key-0000")
    assert len(lean_wire) == 2
    assert lean_wire == fallback_wire
    _same_judgement(lean, fallback)


@pytest.mark.parametrize(("model", "kwargs", "path"), [
    ("openai/judge-test", {"api_key": "k"}, "lean"),
    ("hosted_vllm/judge-test", {}, "lean"),
    ("anthropic/claude-3-5-haiku-latest", {"api_key": "k"}, "litellm"),  # another wire format
    ("gpt-4o-mini", {"api_key": "k"}, "litellm"),  # a bare name: litellm infers the provider
    ("openai/judge-test", {"api_key": "k", "transport": "litellm"}, "litellm"),  # forced
    ("openai/judge-test", {"api_key": "k", "logprobs": True}, "litellm"),  # a keyword outside the pass-through
])
def test_which_path_a_model_takes(model: str, kwargs: dict[str, Any], path: str) -> None:
    """The lean path covers openai/ and hosted_vllm/; anything else, or a forced judge, takes litellm."""
    assert LLMJudge(model, api_base="http://127.0.0.1:9/v1", **kwargs).path == path


def test_openai_without_a_key_takes_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key anywhere: litellm's path reports the missing key as it always did."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert LLMJudge("openai/judge-test", api_base="http://127.0.0.1:9/v1").path == "litellm"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-0000")
    assert LLMJudge("openai/judge-test", api_base="http://127.0.0.1:9/v1").path == "lean"


def test_transport_is_checked() -> None:
    """An unknown transport is a clear error."""
    with pytest.raises(ValueError, match="transport must be one of"):
        LLMJudge("openai/judge-test", transport="fast")  # type: ignore[arg-type]


_NO_LITELLM = """
import asyncio, sys
from cp_observe import LLMJudge
from cp_observe.testing import JudgeServer
with JudgeServer() as server:
    judge = LLMJudge("openai/gpt-4o-mini", api_base=server.url, api_key="sk-test-key-0000", cache_size=0)
    judgement = asyncio.run(judge.judge("q?", "a", ["c one", "c two"]))
assert judgement.cost_usd and judgement.cost_usd > 0, judgement
loaded = sorted(m for m in sys.modules if m == "litellm" or m.startswith("litellm."))
print("litellm modules:", loaded)
sys.exit(1 if loaded else 0)
"""


def test_a_lean_judgement_never_imports_litellm() -> None:
    """Judging, prices included, through the lean path imports no litellm module at all."""
    done = subprocess.run([sys.executable, "-c", _NO_LITELLM], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_judge_transport_setting_reaches_the_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    """``judge_transport`` (and ``CP_OBSERVE_JUDGE_TRANSPORT``) picks the path of the judge built from settings."""
    from cp_observe._config._settings import Settings
    from cp_observe._errors import ConfigurationError
    from cp_observe._wiring._providers import judge_from_settings

    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-0000")
    built = judge_from_settings(Settings(judge="openai/judge-test", judge_api_base="http://127.0.0.1:9/v1"))
    assert isinstance(built, LLMJudge) and built.path == "lean"
    monkeypatch.setenv("CP_OBSERVE_JUDGE_TRANSPORT", "litellm")
    forced = judge_from_settings(Settings.resolve({"judge": "openai/judge-test", "judge_api_base": "http://127.0.0.1:9/v1"}))
    assert isinstance(forced, LLMJudge) and forced.path == "litellm"
    with pytest.raises(ConfigurationError, match="judge_transport"):
        Settings(judge_transport="fast")


def test_an_endpoint_without_v1_is_posted_to_as_litellm_does(server: JudgeServer) -> None:
    """``api_base`` without ``/v1``: both paths post to ``<api_base>/chat/completions``."""
    base = server.url.rsplit("/v1", 1)[0]
    for model in ("hosted_vllm/judge-test", "openai/judge-test"):
        (_, lean_wire, lean), (_, fallback_wire, fallback) = _both(server, model, api_base=base,
                                                                    api_key="sk-test-key-0000")
        assert [w[1] for w in lean_wire] == ["/chat/completions"]
        assert lean_wire == fallback_wire
        _same_judgement(lean, fallback)


def test_serve_takes_the_judge_transport_flag() -> None:
    """``cp-observe serve --judge-transport litellm`` reaches the settings the judge is built from."""
    from cp_observe.serve._cli import main as _unused  # noqa: F401 - the flags are built from SERVE_FIELDS
    from cp_observe.serve._settings import SERVE_FIELDS

    assert "judge_transport" in SERVE_FIELDS
    done = subprocess.run([sys.executable, "-m", "cp_observe.serve", "--help"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and "--judge-transport" in done.stdout


@pytest.mark.parametrize("cached", [0, 1536])
def test_the_cost_equals_litellms_with_and_without_cached_prompt_tokens(cached: int) -> None:
    """The lean path's cost for a usage block equals litellm's ``completion_cost`` for the same usage."""
    from cp_observe._judging._lean import _reply
    from cp_observe._judging._litellm import load_litellm
    from cp_observe._judging._prices import price_of

    usage = {"prompt_tokens": 2000, "completion_tokens": 100, "total_tokens": 2100,
             "prompt_tokens_details": {"cached_tokens": cached}}
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini", "usage": usage,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}]}
    lean = _reply(json.dumps(body).encode(), price_of("openai", "gpt-4o-mini"))
    litellm = load_litellm()
    expected = litellm.completion_cost(completion_response=litellm.ModelResponse(**body),
                                       custom_llm_provider="openai")
    assert lean.cost_usd == pytest.approx(expected, rel=1e-12, abs=0)
