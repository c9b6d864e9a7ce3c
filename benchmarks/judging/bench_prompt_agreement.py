"""Prompt versions and reasons settings against each other, judged by the real-model tier.

A new prompt version leaves the calibration of the old one behind, and a verdict is written after the reasons
before it, so a shorter reason (``cp-4``) or none (reasons for ``no`` only, or none) can move verdicts. This
judges the same retrievals with each setting and compares the verdicts with the default's, ``cp-3`` with reasons
for every verdict:

- ``cp-3`` / ``cp-4`` with reasons ``all``, ``no`` and ``none``, ``cp-2`` with ``all``, and ``cp-3``/``all`` run
  a second time (the noise floor: any disagreement between the two runs of one setting is not the prompt's).
- Two corpora, both from the demo: **demo** is each demo question with the demo retriever's top 5 (BM25 over the
  Northwind help centre) and the demo's extractive answer; **degraded** is the same questions and answers with the
  demo's ``DegradedRetriever`` (seed 0: random documents, the right one kept last half of the time), so most
  contexts are irrelevant. A context's label is ``yes`` when it is one of the documents the question names as
  its answer (a strict label: a second document that also helps is labelled ``no``).

The judge is the slow tier's: Gemma 3 270M (Q4_K_M) served by llama-cpp-python's OpenAI-compatible server on
loopback (``tests/integration/real_model_support.LlamaServer``, one thread, ``--seed 0``), called through
``LLMJudge`` over real HTTP with ``temperature`` 0 (the judge's own, greedy decoding) and ``seed`` 0 in every
request, in the tier's ``schema`` mode: ``json_object`` with llama-cpp-python's ``schema`` extension carrying the
setting's own schema (``verdicts_schema(reasons)``), so the grammar fixes the reply's shape but not the count,
the indices or the spacing. Every request goes through the tier's recording proxy, which keeps what the model
replied and the ``completion_tokens`` the server reported.

Per corpus and setting: the evaluations judged and failed (a ``JudgeError`` after the corrective call; left out
of the paired figures), the share whose first reply needed a second call (misaligned or unparsable: the judge
then sends its corrective call, and judges what is still missing one context per call) and the mean calls, the
share of context verdicts equal to the reference's with Cohen's kappa, the share ``yes``, the accuracy against
the labels, mean output tokens per evaluation as the server reports them (every call of it), the share of first
replies on one line and the share that are compact JSON (the reply equals its own re-serialisation without
spaces: what ``cp-4`` asks for) with the mean whitespace characters outside strings, and the mean seconds per
evaluation. The schema's grammar allows one optional space between tokens and no newline, so "one line" is the
grammar's doing here and the spaces are the model's. Needs the real-model tier (``scripts/install-real-model.sh``),
so it runs in ``.venv``; from the repository root:

    nice -n 5 .venv/bin/python benchmarks/judging/bench_prompt_agreement.py [--limit N] [--out results.jsonl]
    .venv/bin/python benchmarks/judging/bench_prompt_agreement.py --from results.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import machine_line, markdown_table

from cp_observe import JudgeError, LLMJudge
from cp_observe._judging._prompt import verdicts_schema
from cp_observe._stats._proportions import kappa

#: (label, prompt version, reasons); the first is the reference every other row is compared with.
SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("cp-3/all", "cp-3", "all"),
    ("cp-3/all again", "cp-3", "all"),
    ("cp-3/no", "cp-3", "no"),
    ("cp-3/none", "cp-3", "none"),
    ("cp-4/all", "cp-4", "all"),
    ("cp-4/no", "cp-4", "no"),
    ("cp-4/none", "cp-4", "none"),
    ("cp-2/all", "cp-2", "all"),
)
REFERENCE = SETTINGS[0][0]
SEED = 0
#: Above the slow tier's 160: five contexts with a sentence of reasons each need about 180 tokens, and a reply
#: cut at the cap would count against the wordier settings for the cap's sake.
MAX_TOKENS = 400
CALL_TIMEOUT_S = 180.0


@dataclass(frozen=True, slots=True)
class Target:
    """One retrieval to judge and its labels."""

    corpus: str
    question: str
    reference: str
    contexts: tuple[str, ...]
    labels: tuple[bool, ...]


def targets(limit: int | None) -> list[Target]:
    """``limit`` demo questions (all by default) with the demo retriever's top 5 and the degraded retriever's 5."""
    from cp_observe.demo._corpus import CORPUS, QUESTIONS
    from cp_observe.demo._rag import BM25Retriever, DegradedRetriever, ExtractiveAnswerer

    # An even spread over the list (which runs billing, API, security, product, workplace, then Japanese).
    count = min(limit or len(QUESTIONS), len(QUESTIONS))
    questions = [QUESTIONS[i * len(QUESTIONS) // count] for i in range(count)]
    bm25, degraded, answerer = BM25Retriever(CORPUS, k=5), DegradedRetriever(CORPUS, k=5, seed=0), ExtractiveAnswerer()
    found: list[Target] = []
    # Interleaved, so a run cut short (its --out file) still has both corpora.
    for question in questions:
        for corpus, retriever in (("demo", bm25), ("degraded", degraded)):
            hits = retriever.search(question.text)
            best = bm25.search(question.text)
            if not hits or not best:
                continue
            # The answer is the demo's (from the good retrieval): a degraded retrieval is judged against it.
            answer = answerer.answer(question.text, best) or question.text
            found.append(Target(corpus, question.text, answer, tuple(h.page_content for h in hits),
                                tuple(h.id in question.answer_ids for h in hits)))
    return found


def make_judge(base_url: str, version: str, reasons: str) -> LLMJudge:
    """The tier's judge in ``schema`` mode for one setting, with no verdict cache (every context is asked)."""
    return LLMJudge(
        "openai/gemma-3-270m", api_base=base_url, api_key="sk-local", timeout=CALL_TIMEOUT_S, max_retries=1,
        structured_output="none", prompt_version=version, reasons=reasons, cache_size=0,
        response_format={"type": "json_object", "schema": verdicts_schema(reasons)}, max_tokens=MAX_TOKENS,
        seed=SEED,
    )


def compact(content: str) -> bool:
    """Whether the reply is JSON with no whitespace outside strings (its own re-serialisation without spaces)."""
    text = content.strip()
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return text == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def loose_spaces(content: str) -> int:
    """Whitespace characters outside JSON strings: what a compact reply leaves out."""
    count, in_string, escaped = 0, False, False
    for char in content.strip():
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char.isspace():
            count += 1
    return count


async def judge_all(base_url: str, proxy: Any, found: list[Target], out: Path | None) -> list[dict[str, Any]]:
    """Judge every target with every setting, one call at a time; one record per (target, setting)."""
    judges = {label: make_judge(base_url, version, reasons) for label, version, reasons in SETTINGS}
    records: list[dict[str, Any]] = []
    for number, target in enumerate(found, 1):
        line = []
        for label, _, _ in SETTINGS:
            before = len(proxy.exchanges)
            took = time.monotonic()
            try:
                judged = await judges[label].judge(target.question, target.reference, list(target.contexts))
            except JudgeError as exc:
                verdicts, error = None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
            else:
                verdicts, error = [v.relevant for v in judged.verdicts], None
            seconds = time.monotonic() - took
            calls = proxy.exchanges[before:]
            record = {
                "corpus": target.corpus, "question": target.question, "setting": label,
                "labels": list(target.labels), "verdicts": verdicts, "error": error, "seconds": round(seconds, 2),
                "calls": len(calls), "tokens": [e.completion_tokens for e in calls],
                "replies": [e.content for e in calls],
            }  # fmt: skip
            records.append(record)
            line.append(f"{label}={''.join('Y' if v else 'n' for v in verdicts) if verdicts else 'FAIL'}")
            if out is not None:
                with out.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        print(f"  {number}/{len(found)} {target.corpus} labels "
              f"{''.join('Y' if v else 'n' for v in target.labels)}: {' '.join(line)}", file=sys.stderr, flush=True)
    return records


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "—"


def rows(records: list[dict[str, Any]]) -> list[list[object]]:
    """One row per corpus and setting (see the module docstring for the columns)."""
    by_key = {(r["corpus"], r["question"], r["setting"]): r for r in records}
    out: list[list[object]] = []
    for corpus in dict.fromkeys(r["corpus"] for r in records):
        questions = list(dict.fromkeys(r["question"] for r in records if r["corpus"] == corpus))
        for label, _, _ in SETTINGS:
            mine = [by_key[(corpus, q, label)] for q in questions if (corpus, q, label) in by_key]
            if not mine:
                continue
            judged = [r for r in mine if r["verdicts"] is not None]
            flat = [v for r in judged for v in r["verdicts"]]
            labelled = [(v, y) for r in judged for v, y in zip(r["verdicts"], r["labels"], strict=True)]
            pairs = []
            for r in judged:
                ref = by_key.get((corpus, r["question"], REFERENCE))
                if ref is not None and ref["verdicts"] is not None:
                    pairs.extend(zip(r["verdicts"], ref["verdicts"], strict=True))
            tp = sum(a and b for a, b in pairs)
            fp = sum(a and not b for a, b in pairs)
            fn = sum(b and not a for a, b in pairs)
            tn = sum(not a and not b for a, b in pairs)
            k = kappa(tp, fp, fn, tn)[0]
            first = [r["replies"][0] for r in mine if r["replies"]]
            tokens = [sum(t or 0 for t in r["tokens"]) for r in mine]
            out.append([
                corpus, label, f"{len(judged)}/{len(mine)}", _share(sum(r["calls"] > 1 for r in mine), len(mine)),
                f"{statistics.fmean(r['calls'] for r in mine):.1f}",
                _share(tp + tn, len(pairs)), "n/a" if k is None else f"{k:.2f}", _share(sum(flat), len(flat)),
                _share(sum(v == y for v, y in labelled), len(labelled)),
                f"{statistics.fmean(tokens):.0f}" if tokens else "—",
                _share(sum("\n" not in c.strip() for c in first), len(first)),
                _share(sum(compact(c) for c in first), len(first)),
                f"{statistics.fmean(loose_spaces(c) for c in first):.1f}" if first else "—",
                f"{statistics.fmean(r['seconds'] for r in mine):.1f}",
            ])  # fmt: skip
    return out


HEADERS = [
    "corpus", "setting", "judged", "needed a 2nd call", "calls / evaluation", f"verdicts equal to {REFERENCE}",
    f"kappa vs {REFERENCE}", "share yes", "accuracy vs labels", "output tokens / evaluation", "first reply one line",
    "first reply compact JSON", "spaces outside strings, first reply", "s / evaluation",
]  # fmt: skip


def print_table(records: list[dict[str, Any]]) -> None:
    """The table, one row per corpus and setting, and the labels' share of yes per corpus."""
    print()
    for corpus in dict.fromkeys(r["corpus"] for r in records):
        mine = [r for r in records if r["corpus"] == corpus and r["setting"] == REFERENCE]
        labels = [v for r in mine for v in r["labels"]]
        print(f"{corpus}: {len(mine)} evaluations, {len(labels)} contexts, "
              f"labelled yes {_share(sum(labels), len(labels))}")
    print(f"Prompt settings judged by Gemma 3 270M (Q4_K_M, llama-cpp-python, temperature 0, seed {SEED}, "
          f"max_tokens {MAX_TOKENS}); agreement over the contexts both settings judged:")
    print(markdown_table(HEADERS, rows(records)))


def main() -> int:
    from tests.integration.real_model_support import LlamaServer, RecordingProxy, missing_modules, model_path

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="N demo questions spread over the list (each corpus)")
    parser.add_argument("--out", type=Path, default=None, help="append each judgement to this JSON-lines file")
    parser.add_argument("--from", dest="source", type=Path, default=None,
                        help="print the table of an earlier run's --out file, without the model")
    args = parser.parse_args()
    if args.source is not None:
        lines = args.source.read_text(encoding="utf-8").splitlines()
        print_table([json.loads(line) for line in lines if line.strip()])
        return 0
    if missing := missing_modules():
        print(f"the real-model tier is not installed (scripts/install-real-model.sh); missing: {missing}",
              file=sys.stderr)
        return 2
    print(machine_line())
    found = targets(args.limit)
    with tempfile.TemporaryDirectory(prefix="bench-prompt-agreement-") as workdir:
        server = LlamaServer(model_path(), Path(workdir))
        server.start()
        print(f"llama_cpp.server (Gemma 3 270M Q4_K_M, 1 thread) ready in {server.startup_s:.1f}s")
        started = time.monotonic()
        try:
            with RecordingProxy(server.url) as proxy:
                records = asyncio.run(judge_all(proxy.url, proxy, found, args.out))
        finally:
            server.stop()
    print(f"{len(records)} judgements in {(time.monotonic() - started) / 60:.1f} min")
    print_table(records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
