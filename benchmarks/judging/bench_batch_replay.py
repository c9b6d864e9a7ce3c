"""``replay --batch`` against a synchronous replay: dollars per evaluation and equal scores, on loopback APIs.

One generated trace file per corpus (the demo's shape: agent + retrieval turns with 5 contexts of ~300
characters; and a long-context corpus: 20 contexts of ~1,600 characters, about 400 tokens each). Each corpus is
replayed twice in this process:

- baseline: the synchronous replay of today, ``openai/gpt-4o-mini`` through the lean path to the loopback judge
  server (``cp_observe.testing.JudgeServer``), its dollars summed from every judgement's own cost;
- ``--batch``: the same replay through ``replay/_batched.py`` against the loopback batch server
  (``tests/batch_support.py``), for each of gpt-4o-mini, gpt-5-mini, claude-haiku-4-5 and
  gemini-2.5-flash, billed at litellm's batch price (``*_cost_per_token_batches``).

Both servers answer with the same verdicts and the same token counts (characters / 4), so the dollars compare
the prices on the same tokens; the synchronous baseline of the other three models is their standard price on
the batch run's tokens (their synchronous path is litellm's, which this run does not start). ``--misaligned`` makes that share
of the batch's replies fail alignment, so their corrective calls (synchronous, standard price) show apart.
Scores: every evaluation's average precision and verdicts of the batch run against the synchronous run's.

    .venv/bin/python benchmarks/judging/bench_batch_replay.py            # 200 turns per corpus
    .venv/bin/python benchmarks/judging/bench_batch_replay.py --quick    # 40 turns
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import block_network, machine_line, markdown_table, offline_env

_WORDS = ("backup", "retention", "account", "restore", "days", "policy", "region", "snapshot", "deleted", "kept")
_MODELS = ("openai/gpt-4o-mini", "openai/gpt-5-mini", "anthropic/claude-haiku-4-5", "gemini/gemini-2.5-flash")


def _attr(key: str, value: object) -> dict[str, object]:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def generate(path: Path, turns: int, contexts: int, chars: int, seed: int) -> None:
    """A Collector-shaped file of ``turns`` agent + retrieval turns."""
    rng = random.Random(seed)
    spans: list[dict[str, object]] = []
    now = time.time_ns()
    for turn in range(turns):
        trace_id = f"{rng.getrandbits(128):032x}"
        agent_id, retrieval_id = f"{rng.getrandbits(64) | 1:016x}", f"{rng.getrandbits(64) | 1:016x}"
        question = f"how long are backups kept for account {turn}"
        answer = " ".join(rng.sample(_WORDS, 3)) + f" after {rng.randrange(90)} days"
        retrieval = [_attr("gen_ai.operation.name", "retrieval"), _attr("openinference.span.kind", "RETRIEVER"),
                     _attr("gen_ai.data_source.id", "bench-kb"), _attr("input.value", question),
                     _attr("context_precision.context.count", contexts)]
        for i in range(contexts):
            words = [rng.choice(_WORDS) if rng.random() < 0.3 else f"w{rng.randrange(10**5)}" for _ in range(chars // 7)]
            retrieval.append(_attr(f"retrieval.documents.{i}.document.content", " ".join(words)[:chars]))
        agent = [_attr("gen_ai.operation.name", "invoke_agent"), _attr("openinference.span.kind", "AGENT"),
                 _attr("gen_ai.agent.name", "bench-agent"), _attr("input.value", question),
                 _attr("output.value", answer)]
        start = now + turn * 10_000
        spans.append({"traceId": trace_id, "spanId": retrieval_id, "parentSpanId": agent_id,
                      "name": "retrieval bench-kb", "kind": 1, "startTimeUnixNano": str(start + 1000),
                      "endTimeUnixNano": str(start + 2000), "attributes": retrieval, "status": {}})
        spans.append({"traceId": trace_id, "spanId": agent_id, "name": "invoke_agent bench-agent", "kind": 1,
                      "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 3000), "attributes": agent,
                      "status": {}})
    resource = {"attributes": [_attr("service.name", "bench-app")]}
    line = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": {"name": "bench"}, "spans": spans}]}]}
    path.write_text(json.dumps(line) + "\n")


def scores(path: Path) -> dict[int, tuple[float, tuple[bool, ...]]]:
    """Scored span id -> (average precision, verdicts) of every evaluation span in a replay's output."""
    from cp_observe import _names as n
    from cp_observe.replay import TraceFile
    from cp_observe.serve import spans_from_request

    out = {}
    for batch in TraceFile(path).batches():
        for span in spans_from_request(batch.request).spans:
            if span.name == n.EVALUATION_SPAN_NAME and span.parent is not None and span.attributes:
                if n.CP_AVERAGE_PRECISION not in span.attributes:
                    out[span.parent.span_id] = (-1.0, ())  # a failed evaluation
                    continue
                out[span.parent.span_id] = (float(span.attributes[n.CP_AVERAGE_PRECISION]),
                                            tuple(bool(v) for v in span.attributes[n.CP_VERDICTS]))
    return out


class _Tally:
    """The real LLM judge, its judgements' dollars summed (the synchronous baseline's bill)."""

    def __init__(self, judge: Any) -> None:
        self.inner = judge
        self.cost = 0.0
        self.calls = 0

    @property
    def model(self) -> str:
        return str(self.inner.model)

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Any:
        judgement = await self.inner.judge(query, reference, contexts)
        self.cost += judgement.cost_usd or 0.0
        self.calls += judgement.usage.calls
        return judgement


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 turns per corpus instead of 200")
    parser.add_argument("--turns", type=int)
    parser.add_argument("--misaligned", type=float, default=0.02, help="share of batch replies that fail alignment")
    parser.add_argument("--seed", type=int, default=20261206)
    args = parser.parse_args()
    offline_env()
    blocked = block_network()
    from cp_observe._judging._llm_judge import LLMJudge
    from cp_observe.replay import ReplayOptions, TraceFile, replay
    from cp_observe.replay._batched import BatchOptions, batch_replay
    from cp_observe.replay._progress import Progress
    from cp_observe.testing import JudgeServer

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: the loopback batch APIs
    from tests.batch_support import BatchServer

    turns = args.turns or (40 if args.quick else 200)
    keys = {"OPENAI_API_KEY": "sk-bench-key", "ANTHROPIC_API_KEY": "sk-ant-bench", "GEMINI_API_KEY": "bench-key"}
    os.environ.update(keys)
    print(machine_line())
    print(f"{turns} turns per corpus, seed {args.seed}, {args.misaligned:.0%} of batch replies misaligned\n")
    rows = []
    with tempfile.TemporaryDirectory(prefix="cp-batch-bench-") as tmp:
        for corpus, contexts, chars in (("demo-shaped (5 x 300 chars)", 5, 300), ("long (20 x 1,600 chars)", 20, 1600)):
            traces = Path(tmp) / f"traces-{contexts}.jsonl"
            generate(traces, turns, contexts, chars, args.seed + contexts)
            sync_out = Path(tmp) / f"sync-{contexts}.jsonl"
            with JudgeServer() as server:
                tally = _Tally(LLMJudge("openai/gpt-4o-mini", api_base=server.url, api_key="sk-bench-key"))
                started = time.monotonic()
                result = replay([TraceFile(traces)], ReplayOptions(judge="openai/gpt-4o-mini", output=sync_out),
                                judge=tally, progress=Progress(enabled=False))
                sync_s = time.monotonic() - started
            scored = result.stats["scored"]
            baseline = scores(sync_out)
            rows.append([corpus, "openai/gpt-4o-mini", "synchronous (today)", scored, f"{tally.cost / scored * 1000:.4f}",
                         "1.00x", "-", "-", f"{sync_s:.1f}"])
            for model in _MODELS:
                rng = random.Random(args.seed)
                misaligned: dict[str, bool] = {}

                def misalign(user: str, table: dict[str, bool] = misaligned, draw: Any = rng) -> bool:
                    if user not in table:
                        table[user] = draw.random() < args.misaligned
                    return table[user]

                out = Path(tmp) / f"batch-{contexts}-{model.replace('/', '_')}.jsonl"
                with BatchServer(misalign=misalign) as server:
                    base = server.url + "/v1" if model.startswith("openai/") else server.url
                    started = time.monotonic()
                    batched, report = batch_replay(
                        [TraceFile(traces)], ReplayOptions(judge=model, judge_api_base=base, output=out),
                        BatchOptions(poll_s=0.05), progress=Progress(enabled=False), stream=io.StringIO())
                    batch_s = time.monotonic() - started
                assert batched is not None and report.batch_usd is not None and report.standard_usd is not None
                n = batched.stats["scored"]
                reference = tally.cost if model == "openai/gpt-4o-mini" else report.standard_usd
                total = report.batch_usd + (report.corrective_usd or 0.0)
                equal = scores(out) == baseline
                rows.append([corpus, model, "--batch", n, f"{total / n * 1000:.4f}",
                             f"{report.batch_usd / reference:.2f}x ({total / reference:.2f}x with corrective)",
                             f"{report.corrective_calls} (${(report.corrective_usd or 0) / n * 1000:.4f}/1k)",
                             "yes" if equal else "NO", f"{batch_s:.1f}"])
                if model != "openai/gpt-4o-mini":
                    rows.append([corpus, model, "synchronous price, same tokens", n,
                                 f"{report.standard_usd / n * 1000:.4f}", "1.00x", "-", "-", "-"])
    print(markdown_table(["corpus", "judge", "mode", "evaluations", "$ per 1,000 evaluations",
                          "batch / synchronous", "corrective calls", "scores equal to the synchronous run",
                          "wall s"], rows))
    print(f"\nnon-loopback connections refused: {blocked.total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
