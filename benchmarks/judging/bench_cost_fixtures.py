"""Cost counted exactly: each provider family's documented usage, priced by cp-observe, against a hand computation.

Each fixture is a usage block written from its provider's documented reply format (OpenAI chat completions on
the lean path; Azure OpenAI, Anthropic messages and Gemini ``generateContent`` through litellm), served by a
loopback server in that wire format to a real ``LLMJudge`` judging one context (one call). The columns:

- **hand**: the bill computed here from the prices litellm's table lists for the reply's tier (pinned below,
  and checked against the table when the script starts);
- **cp-observe**: ``Judgement.cost_usd``, and its distance from the hand figure (the target: ≤ 1e-9 USD);
- **before**: what the same reply was charged before usage was read per family: on the lean path uncached,
  cached and completion tokens at the standard price (no tier, no cache writes), on litellm's path
  ``litellm.completion_cost`` of the same response (the baseline, in the same run).

    .venv/bin/python benchmarks/judging/bench_cost_fixtures.py [--quick]

``--quick`` changes nothing (the run is a dozen loopback calls); it is accepted like every script's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _common
import _common as c

_VERDICT = json.dumps({"verdicts": [{"context_index": 0, "verdict": "yes", "reason": "fixture"}]})
_QUERY, _REFERENCE, _CONTEXT = "Which planet has the tallest volcano?", "Mars has Olympus Mons.", "Olympus Mons."


@dataclass(frozen=True)
class Case:
    """One fixture: the family, the model, the reply's usage block and top fields, the hand bill in USD."""

    family: str
    model: str
    kwargs: dict[str, Any]
    reply: dict[str, Any]
    hand: float
    # (provider/name, tier suffix) -> (input, output) prices the hand bill used, checked against the table
    pinned: tuple[str, str, float, float]


def _chat(usage: dict[str, Any], tier: str | None = None) -> dict[str, Any]:
    reply = {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
             "choices": [{"index": 0, "message": {"role": "assistant", "content": _VERDICT},
                          "finish_reason": "stop"}], "usage": usage}
    return reply | ({"service_tier": tier} if tier else {})


def _anthropic(usage: dict[str, Any]) -> dict[str, Any]:
    return {"id": "msg", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": [{"type": "text", "text": _VERDICT}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": usage}


def _gemini(usage: dict[str, Any]) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": _VERDICT}]}, "finishReason": "STOP",
                            "index": 0}], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash"}


_AZURE = {"api_version": "2024-10-21", "temperature": 1}  # gpt-5.6 reasons: litellm refuses temperature 0
CASES = [
    Case("OpenAI, flex (the issue's trial)", "openai/gpt-5-mini", {},
         _chat({"prompt_tokens": 1000, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 800}},
               "flex"),
         200 * 1.25e-07 + 800 * 1.25e-08 + 20 * 1e-06, ("gpt-5-mini", "_flex", 1.25e-07, 1e-06)),
    Case("OpenAI, default: cache reads and writes, reasoning", "openai/gpt-5-mini", {},
         _chat({"prompt_tokens": 3000, "completion_tokens": 700,
                "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 1500},
                "completion_tokens_details": {"reasoning_tokens": 640}}, "default"),
         476 * 2.5e-07 + 1024 * 2.5e-08 + 1500 * 2.5e-07 + 700 * 2e-06, ("gpt-5-mini", "", 2.5e-07, 2e-06)),
    Case("OpenAI, priority", "openai/gpt-5-mini", {},
         _chat({"prompt_tokens": 2000, "completion_tokens": 50, "prompt_tokens_details": {"cached_tokens": 1000}},
               "priority"),
         1000 * 4.5e-07 + 1000 * 4.5e-08 + 50 * 3.6e-06, ("gpt-5-mini", "_priority", 4.5e-07, 3.6e-06)),
    Case("Azure, priority: cache reads and writes, reasoning", "azure/gpt-5.6", _AZURE,
         _chat({"prompt_tokens": 5000, "completion_tokens": 300,
                "prompt_tokens_details": {"cached_tokens": 2048, "cache_write_tokens": 1200},
                "completion_tokens_details": {"reasoning_tokens": 256}}, "priority"),
         1752 * 8e-06 + 2048 * 8e-07 + 1200 * 1e-05 + 300 * 4e-05, ("azure/gpt-5.6", "_priority", 8e-06, 4e-05)),
    Case("Anthropic: cache writes and reads", "anthropic/claude-haiku-4-5", {},
         _anthropic({"input_tokens": 120, "cache_creation_input_tokens": 2500, "cache_read_input_tokens": 4000,
                     "output_tokens": 90, "service_tier": "standard"}),
         120 * 1e-06 + 2500 * 1.25e-06 + 4000 * 1e-07 + 90 * 5e-06, ("claude-haiku-4-5", "", 1e-06, 5e-06)),
    Case("Anthropic, batch: cache writes and reads", "anthropic/claude-haiku-4-5", {},
         _anthropic({"input_tokens": 120, "cache_creation_input_tokens": 2500, "cache_read_input_tokens": 4000,
                     "output_tokens": 90, "service_tier": "batch"}),
         120 * 5e-07 + 2500 * 6.25e-07 + 4000 * 5e-08 + 90 * 2.5e-06, ("claude-haiku-4-5", "_batches", 5e-07, 2.5e-06)),
    Case("Gemini: cached content, thoughts", "gemini/gemini-2.5-flash", {},
         _gemini({"promptTokenCount": 1800, "cachedContentTokenCount": 1200, "candidatesTokenCount": 60,
                  "thoughtsTokenCount": 410, "totalTokenCount": 2270}),
         600 * 3e-07 + 1200 * 3e-08 + 470 * 2.5e-06, ("gemini/gemini-2.5-flash", "", 3e-07, 2.5e-06)),
]


@contextmanager
def serving(reply: dict[str, Any]) -> Iterator[str]:
    """A loopback server answering every POST with ``reply``; yields its base URL."""
    body = json.dumps(reply).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _before(case: Case, url: str) -> float | None:
    """The charge before usage was read per family: the lean arithmetic of old, or litellm's completion_cost."""
    from cp_observe._judging._litellm import load_litellm

    if case.model.startswith("openai/"):
        usage = case.reply["usage"]
        cached = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        standard = _table()[case.model.split("/", 1)[1]]
        return ((usage["prompt_tokens"] - cached) * standard["input_cost_per_token"]
                + cached * standard["cache_read_input_token_cost"]
                + usage["completion_tokens"] * standard["output_cost_per_token"])
    litellm = load_litellm()
    response = litellm.completion(model=case.model, messages=[{"role": "user", "content": "x"}], api_base=url,
                                  api_key="sk-loopback-0000", max_retries=0, **case.kwargs)
    try:
        return float(litellm.completion_cost(completion_response=response))
    except Exception:  # noqa: BLE001 - litellm raises when it cannot price a response: shown as unknown
        return None


def _table() -> dict[str, Any]:
    from cp_observe._judging._litellm import load_litellm

    table: dict[str, Any] = load_litellm().model_cost
    return table


def _check_pins() -> list[str]:
    table = _table()
    wrong = []
    for case in CASES:
        key, suffix, price_in, price_out = case.pinned
        entry = table.get(key, {})
        if (entry.get("input_cost_per_token" + suffix), entry.get("output_cost_per_token" + suffix)) != (
                price_in, price_out):
            wrong.append(f"{key}{suffix}")
    return wrong


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.9f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="accepted; the run is already short")
    parser.parse_args()
    c.offline_env()
    blocked = c.block_network()
    from cp_observe import LLMJudge

    wrong = _check_pins()
    if wrong:
        print(f"litellm's table no longer has the pinned prices of: {', '.join(wrong)}")
        return 1
    rows, worst = [], 0.0
    for case in CASES:
        with serving(case.reply) as url:
            base = url + "/v1" if case.model.startswith("openai/") else url
            judge = LLMJudge(case.model, api_base=base, api_key="sk-loopback-0000", max_retries=0, **case.kwargs)
            judgement = asyncio.run(judge.judge(_QUERY, _REFERENCE, [_CONTEXT]))
            before = _before(case, url)
        ours = judgement.cost_usd
        error = abs(ours - case.hand) if ours is not None else float("inf")
        worst = max(worst, error)
        before_error = "—" if before is None else f"{abs(before - case.hand):.2e}"
        rows.append((case.family, judge.path, _usd(case.hand), _usd(ours), f"{error:.2e}", _usd(before),
                     before_error))
    print(c.machine_line())
    print()
    print(c.markdown_table(("fixture", "path", "hand (USD)", "cp-observe (USD)", "|cp-observe − hand|",
                            "before (USD)", "|before − hand|"), rows))
    print()
    print(f"worst |cp-observe − hand|: {worst:.2e} USD (target ≤ 1e-9): {'met' if worst <= 1e-9 else 'MISSED'}")
    print(f"non-loopback connections refused: {blocked.total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
