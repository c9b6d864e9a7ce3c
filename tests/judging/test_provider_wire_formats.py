"""A judgement through litellm in each provider family's own wire format, against a loopback server, offline.

Each test runs the judge in a fresh interpreter (so litellm is imported there, with no ``LITELLM_*`` variable
set: cp-observe's own defaults apply) that refuses, through an audit hook, every DNS lookup and connection to
anything but loopback, and records them. The verdicts and the cost must come back right, and nothing may
have tried to leave the machine: litellm's Anthropic beta-headers fetch from GitHub, its cost map and its other
fetches stay off unless the user turns them on (the last test turns them on, to show the hook sees them).
Vertex AI and Bedrock are not here: both sign requests with cloud credentials fetched or derived through
their SDKs, which a loopback server cannot stand in for without faking those SDKs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from cp_observe.testing import word_overlap_policy
from tests.judging.provider_servers import PROVIDERS, ProviderServer

_QUERY = "Which planet has the tallest volcano?"
_REFERENCE = "Mars has Olympus Mons, the tallest volcano in the solar system."
_CONTEXTS = [
    "Olympus Mons on Mars is the tallest volcano known.",
    "Bananas are rich in potassium.",
    "The solar system has eight planets.",
]

# provider -> (model, judge keyword arguments, the price per prompt and per completion token in litellm's table)
_CASES: dict[str, tuple[str, dict[str, Any], tuple[float, float]]] = {
    "anthropic": ("anthropic/claude-haiku-4-5", {}, (1e-06, 5e-06)),
    "gemini": ("gemini/gemini-2.5-flash", {}, (3e-07, 2.5e-06)),
    "azure": ("azure/gpt-4o-mini", {"api_version": "2024-10-21"}, (1.5e-07, 6e-07)),
    # litellm's Cohere chat takes no response_format, so this judge asks for JSON in the prompt only.
    "cohere": ("cohere/command-r7b-12-2024", {"structured_output": "none"}, (3.75e-08, 1.5e-07)),
}

_RUN = r"""
import asyncio, ipaddress, json, sys
attempts = []

def _loopback(host):
    if host in (None, "localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False

def _hook(event, args):
    if event == "socket.getaddrinfo" and not _loopback(args[0]):
        attempts.append(f"getaddrinfo {args[0]}")
        raise OSError(f"off-loopback lookup refused: {args[0]}")
    if event == "socket.connect" and isinstance(args[1], tuple) and not _loopback(args[1][0]):
        attempts.append(f"connect {args[1][0]}")
        raise OSError(f"off-loopback connection refused: {args[1][0]}")

sys.addaudithook(_hook)
case = json.loads(sys.argv[1])
from cp_observe import LLMJudge

judge = LLMJudge(case["model"], api_base=case["api_base"], api_key="sk-loopback-0000", max_retries=0, **case["kwargs"])
judgement = asyncio.run(judge.judge(case["query"], case["reference"], case["contexts"]))
import os
print(json.dumps({
    "verdicts": [v.relevant for v in judgement.verdicts],
    "cost": judgement.cost_usd,
    "attempts": attempts,
    "env": {k: v for k, v in os.environ.items() if k.startswith("LITELLM_")},
}))
"""


def _judge_in_child(server: ProviderServer, model: str, kwargs: dict[str, Any], env: dict[str, str]) -> Any:
    case = {"model": model, "api_base": server.url, "kwargs": kwargs, "query": _QUERY, "reference": _REFERENCE,
            "contexts": _CONTEXTS}
    done = subprocess.run([sys.executable, "-c", _RUN, json.dumps(case)], capture_output=True, text=True, env=env,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LITELLM_")}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_judgement_in_each_wire_format_stays_on_loopback(provider: str) -> None:
    """Verdicts and cost come back right through litellm, and no lookup or connection leaves loopback."""
    model, kwargs, (per_prompt, per_completion) = _CASES[provider]
    with ProviderServer(provider) as server:
        out = _judge_in_child(server, model, kwargs, _clean_env())
    assert out["attempts"] == []
    assert out["verdicts"] == word_overlap_policy(_QUERY, _REFERENCE, _CONTEXTS) == [True, False, True]
    assert len(server.usage) == 1  # one call for all contexts
    prompt, completion = server.usage[0]
    assert out["cost"] == pytest.approx(prompt * per_prompt + completion * per_completion, rel=1e-6)
    assert out["env"]["LITELLM_OFFLINE_MODE"] == "true"
    assert out["env"]["LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS"] == "True"
    assert out["env"]["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_the_user_can_turn_litellm_fetches_back_on_and_the_hook_sees_them() -> None:
    """With the switches set off by the user, they stay off, and litellm's GitHub fetch is caught (refused)."""
    env = {**_clean_env(), "LITELLM_OFFLINE_MODE": "false", "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "false"}
    model, kwargs, _ = _CASES["anthropic"]
    with ProviderServer("anthropic") as server:
        out = _judge_in_child(server, model, kwargs, env)
    assert out["env"]["LITELLM_OFFLINE_MODE"] == "false"
    assert any("githubusercontent" in attempt for attempt in out["attempts"]), out["attempts"]
    assert out["verdicts"] == [True, False, True]  # litellm fell back to its bundled headers


def test_a_user_asking_for_the_remote_cost_map_keeps_it() -> None:
    """LITELLM_LOCAL_MODEL_COST_MAP=False leaves the offline switch unset (it would force the local map)."""
    code = ("import os; from cp_observe._judging._litellm import keep_litellm_offline; keep_litellm_offline(); "
            "print(os.environ.get('LITELLM_OFFLINE_MODE'), os.environ['LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS'])")
    env = {**_clean_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "False"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split() == ["None", "True"]
