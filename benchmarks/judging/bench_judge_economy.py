"""Judge economy: calls and tokens per evaluation for three strategies, and what the verdict cache saves.

Strategies, on the same inputs and the same loopback ``JudgeServer``:

- **one call** (cp_observe): ``LLMJudge`` asks for every context's verdict in a single call.
- **per context** (as several peers do): one call per context, made here with litellm directly, with
  cp_observe's own prompt built for that one context, so only the strategy differs, not the wording.
- **verdicts + LLM reason** (as the reference scorer does): the one-call verdicts, then a second call that
  asks the model to explain the score from the verdicts, made here with litellm directly.
- and cp_observe's opt-in ``LLMJudge(llm_reason=True)``, which follows that two-call strategy.

Calls and prompt tokens are counted from the requests the server recorded (its usage rule: ⌈characters of
the messages ÷ 4⌉); completion tokens are the usage the server reported back. Completion sizes are what the
loopback server writes (a verdict JSON), not what a real model would write; prompt sizes are real.

The cache section replays a Zipf-distributed stream of repeated questions (s = 1.1 over a pool of distinct
turns) through one ``LLMJudge`` with its default verdict cache and through one without.

    .venv/bin/python benchmarks/judging/bench_judge_economy.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _common and _peers
import _common as c

from cp_observe import LLMJudge
from cp_observe._judging._litellm import load_litellm
from cp_observe._judging._prompt import VERDICTS_SCHEMA, build_prompt
from cp_observe.testing import JudgeServer

MODEL = "openai/judge-test"
_RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "context_precision_verdicts", "schema": VERDICTS_SCHEMA, "strict": True},
}


@dataclass(frozen=True)
class Turn:
    """One evaluation input: a question, the answer given, and the retrieved contexts in rank order."""

    query: str
    answer: str
    contexts: tuple[str, ...]


def make_turns(count: int, contexts: int, offset: int = 0) -> list[Turn]:
    """``count`` distinct turns with ``contexts`` contexts of 500 characters each."""
    turns = []
    for i in range(offset, offset + count):
        texts = tuple(c._context(1000 * (i + 1) + j) for j in range(contexts))
        query = f"{c.QUERY} (customer {i})"
        answer = f"For customer {i}: " + texts[0][:160] + " " + texts[-1][:120]
        turns.append(Turn(query, answer, texts))
    return turns


@dataclass
class Tally:
    """Calls and tokens spent by one strategy over some evaluations."""

    evaluations: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def per_evaluation(self) -> tuple[float, float, float]:
        n = max(self.evaluations, 1)
        return self.calls / n, self.prompt_tokens / n, self.completion_tokens / n


def _prompt_tokens(body: Any) -> int:
    """The server's usage rule for the prompt: ⌈characters of the message contents ÷ 4⌉."""
    chars = 0
    for message in (body or {}).get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            chars += len(content)
    return -(-chars // 4)


class Counter:
    """Counts, from the server's records, the chat calls and prompt tokens of what runs inside ``measure``."""

    def __init__(self, server: JudgeServer) -> None:
        self.server = server

    async def measure(self, evaluate: Callable[[], Awaitable[int]], evaluations: int) -> Tally:
        """Run ``evaluate`` (which returns the completion tokens the server reported) and count its calls."""
        self.server.clear()
        completion = await evaluate()
        requests = [r for r in self.server.requests if r.path.endswith("/chat/completions")]
        return Tally(evaluations, len(requests), sum(_prompt_tokens(r.body) for r in requests), completion)


async def _complete(url: str, messages: list[dict[str, str]], structured: bool = True) -> Any:
    litellm = load_litellm()
    extra = {"response_format": _RESPONSE_FORMAT} if structured else {}
    return await litellm.acompletion(model=MODEL, api_base=url, api_key="sk-test", messages=messages,
                                     temperature=0, max_retries=0, **extra)


def _completion_tokens(response: Any) -> int:
    return int(getattr(getattr(response, "usage", None), "completion_tokens", 0) or 0)


# --- the strategies ---------------------------------------------------------------------------------------------


async def one_call(url: str, turns: Sequence[Turn]) -> int:
    """cp_observe's LLMJudge, cache off: one call for all contexts."""
    judge = LLMJudge(MODEL, api_base=url, api_key="sk-test", cache_size=0, max_retries=0)
    total = 0
    for t in turns:
        judgement = await judge.judge(t.query, t.answer, list(t.contexts))
        total += judgement.usage.completion_tokens
    return total


async def llm_reason(url: str, turns: Sequence[Turn]) -> int:
    """cp_observe's LLMJudge(llm_reason=True): the verdict call plus a reason call."""
    judge = LLMJudge(MODEL, api_base=url, api_key="sk-test", cache_size=0, max_retries=0, llm_reason=True)
    total = 0
    for t in turns:
        judgement = await judge.judge(t.query, t.answer, list(t.contexts))
        total += judgement.usage.completion_tokens
    return total


async def per_context(url: str, turns: Sequence[Turn]) -> int:
    """One call per context, each with cp_observe's prompt built for that single context."""
    total = 0
    for t in turns:
        for text in t.contexts:
            response = await _complete(url, build_prompt(t.query, t.answer, [text]).messages)
            total += _completion_tokens(response)
    return total


def _reason_messages(turn: Turn, verdicts: list[dict[str, Any]]) -> list[dict[str, str]]:
    relevant = [bool(str(v.get("verdict", "")).strip().lower().startswith("y")) for v in verdicts]
    hits, precision_sum = 0, 0.0
    for k, flag in enumerate(relevant, start=1):
        if flag:
            hits += 1
            precision_sum += hits / k
    score = precision_sum / hits if hits else 0.0
    lines = "\n".join(
        f"{i + 1}. verdict: {v.get('verdict')}; reason: {v.get('reason')}" for i, v in enumerate(verdicts)
    )
    system = ("You explain context precision scores. Given the question, the answer, the score and the "
              "verdict for each retrieved piece in rank order, explain the score in at most two sentences.")
    user = f"Question: {turn.query}\nAnswer: {turn.answer}\nScore: {score:.2f}\nVerdicts:\n{lines}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


async def verdicts_plus_reason(url: str, turns: Sequence[Turn]) -> int:
    """The reference scorer's shape: one verdict call for all contexts, then one call to write the reason."""
    total = 0
    for t in turns:
        first = await _complete(url, build_prompt(t.query, t.answer, list(t.contexts)).messages)
        total += _completion_tokens(first)
        try:
            verdicts = json.loads(first.choices[0].message.content)["verdicts"]
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            verdicts = []
        second = await _complete(url, _reason_messages(t, verdicts), structured=False)
        total += _completion_tokens(second)
    return total


STRATEGIES: tuple[tuple[str, Callable[[str, Sequence[Turn]], Awaitable[int]]], ...] = (
    ("one call (cp_observe LLMJudge)", one_call),
    ("per context (one call each)", per_context),
    ("verdicts + LLM reason (reference)", verdicts_plus_reason),
    ("cp_observe LLMJudge(llm_reason=True)", llm_reason),
)


# --- the cache --------------------------------------------------------------------------------------------------


def zipf_stream(pool: int, length: int, s: float, seed: int) -> list[int]:
    """``length`` indices into ``pool`` items, item k drawn with weight 1 / (k + 1) ** s."""
    weights = [1.0 / (k + 1) ** s for k in range(pool)]
    return random.Random(seed).choices(range(pool), weights=weights, k=length)


async def cache_run(url: str, counter: Counter, turns: Sequence[Turn], stream: Sequence[int],
                    cache_size: int) -> tuple[Tally, float]:
    """Judge every turn of the stream through one LLMJudge; returns the tally and the cache hit rate."""
    judge = LLMJudge(MODEL, api_base=url, api_key="sk-test", cache_size=cache_size, max_retries=0)

    async def go() -> int:
        total = 0
        for index in stream:
            t = turns[index]
            total += (await judge.judge(t.query, t.answer, list(t.contexts))).usage.completion_tokens
        return total

    tally = await counter.measure(go, len(stream))
    lookups = judge.cache.hits + judge.cache.misses
    return tally, judge.cache.hits / lookups if lookups else 0.0


# --- main -------------------------------------------------------------------------------------------------------


async def run(quick: bool) -> str:
    evaluations = 3 if quick else 10
    sizes = (1, 5, 20)
    out: list[str] = []
    with JudgeServer() as server:
        counter = Counter(server)
        rows = []
        for k in sizes:
            turns = make_turns(evaluations, k, offset=100 * k)
            base: Tally | None = None
            for label, strategy in STRATEGIES:
                tally = await counter.measure(lambda s=strategy, t=turns: s(server.url, t), len(turns))
                base = base or tally
                calls, prompt, completion = tally.per_evaluation()
                _, base_prompt, base_completion = base.per_evaluation()
                ratio = (prompt + completion) / (base_prompt + base_completion)
                rows.append([k, label, f"{calls:.1f}", f"{prompt:.0f}", f"{completion:.0f}",
                             f"{prompt + completion:.0f}", f"{ratio:.2f}x"])
        out.append(f"## Judge economy: per evaluation, mean over {evaluations} evaluations per row\n")
        out.append(c.markdown_table(["contexts", "strategy", "calls", "prompt tokens", "completion tokens",
                                     "total tokens", "x one call"], rows))

        pool, length = (40, 150) if quick else (200, 1000)
        turns = make_turns(pool, 5, offset=10_000)
        stream = zipf_stream(pool, length, 1.1, seed=11)
        cache_rows = []
        for label, size in (("no cache (cache_size=0)", 0), ("verdict cache (default 10,000)", 10_000)):
            tally, hit_rate = await cache_run(server.url, counter, turns, stream, size)
            calls, prompt, completion = tally.per_evaluation()
            cache_rows.append([label, tally.evaluations, tally.calls, f"{calls:.2f}", f"{prompt:.0f}",
                               f"{completion:.0f}", f"{hit_rate * 100:.0f} %"])
        out.append(f"\n## Verdict cache on a Zipf stream (s = 1.1, {length} evaluations over {pool} distinct turns "
                   f"of 5 contexts; {len(set(stream))} distinct turns drawn)\n")
        out.append(c.markdown_table(["judge", "evaluations", "calls", "calls / evaluation", "prompt tokens / eval",
                                     "completion tokens / eval", "context hit rate"], cache_rows))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer evaluations and a shorter stream")
    args = parser.parse_args(argv)
    c.offline_env()
    blocked = c.block_network()
    print(asyncio.run(run(args.quick)))
    print(f"\nMachine: {c.machine_line()}")
    print(f"Non-loopback network attempts refused during the run: {blocked.total} {blocked.attempts or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
