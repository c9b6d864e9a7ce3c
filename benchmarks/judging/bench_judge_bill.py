"""The judge's bill: dollars per 1,000 evaluations by mode, from token counts and litellm's price table.

Two corpora:

- **demo**: the demo's 28 questions, each with the demo retriever's top 5 (BM25 over the Northwind help centre,
  two thirds English, one third Japanese) and the demo's extractive answer; a context is ``yes`` when it is one
  of the documents the question names as its answer (the share of ``no`` this gives is printed).
- **long**: 20 contexts of about 400 tokens each per evaluation (synthetic help-centre prose), with a stated
  share of ``no`` verdicts (``--no-share``, 0.7 by default).

For each evaluation the messages are built exactly as the judge builds them (``build_prompt``, ``cp-2`` for
today's call, ``cp-4`` for every new mode unless the mode names ``cp-3``), and the reply is the verdict JSON a
judge writes as its prompt asks: for ``cp-2`` and ``cp-3`` with spaces after colons and commas (as their example
shape is written) and one short reason sentence per verdict (9–11 words); for ``cp-4`` on one line without
spaces outside strings and reasons of five or six words (its cap is six: the reply is modelled at the cap, not
below it). Reasons are written as asked: an empty one on a ``yes`` with reasons only for ``no``, none at all
with ``none``. One row models ``cp-4`` answered with ``cp-3``'s spacing (a judge that ignores the one-line
ask), so the saving of each half is visible. Tokens:

- OpenAI's models: exact, with tiktoken's ``o200k_base`` read from the files litellm bundles (no network), per
  message 3 tokens of framing and 3 for the reply's start (OpenAI's counting rule), and the structured-output
  schema counted as its JSON (an estimate: OpenAI does not say how it bills the schema).
- claude-haiku-4-5 and gemini-2.5-flash: estimates. Claude's tokens are counted with the Claude tokenizer
  litellm bundles (``anthropic_tokenizer.json``, an older Claude tokenizer: Anthropic publishes none for its
  current models); Gemini's with ``o200k_base``. The error is not measured here; the spread between the two
  tokenizers on the same prompts, printed with the tables, is the stated uncertainty of both estimates.

Reasoning tokens (gpt-5-mini bills them as output) are not measured, since there is no real model here: the
new modes send ``reasoning_effort=minimal`` and are charged ``--reasoning-tokens`` per call (0 by default: the
minimal effort writes few or none); today's call is charged none as well, which is the baseline least favourable
to the new modes. The live target's line prints how many reasoning tokens per evaluation the target still
allows.

Prices come from litellm's table the way ``cp_observe/_judging/_prices.py`` reads it (the bundled file, not
importing litellm): ``input_cost_per_token``/``output_cost_per_token``, their ``_flex`` and ``_batches`` forms,
``cache_read_input_token_cost`` (and its tier forms) and ``cache_creation_input_token_cost``. A mode a model
has no price for is ``n/a``.

Modes: per-context calls (as RAGAS and MLflow judge: one call per context, today's prompt); today's call (one
call for all contexts, ``cp-2``, reasons for all, standard tier); ``cp-3`` alone; ``cp-4`` alone; batch; flex; a
cached prefix (the system message grown to the model's caching minimum, 1,024 tokens for OpenAI and Gemini and
litellm's ``prompt_cache_min_tokens`` for Claude, with ``--hit-rate`` of calls reading it from the cache and the
rest writing it); reasons only for ``no``; no reasons; and their combinations. The break-even hit rate of the
cached prefix is printed per model.

    .venv/bin/python benchmarks/judging/bench_judge_bill.py [--no-share 0.7] [--hit-rate 0.9] [--reasoning-tokens 0]
"""

# ruff: noqa: RUF001, RUF002, RUF003 - the tables print × and en dashes, as benchmarks/README.md writes them

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _common
import _common as c

from cp_observe._judging._prices import table_entry
from cp_observe._judging._prompt import build_prompt, verdicts_schema

MODELS = ("gpt-4o-mini", "gpt-5-mini", "claude-haiku-4-5", "gemini/gemini-2.5-flash")
_OPENAI = frozenset({"gpt-4o-mini", "gpt-5-mini"})
_REASONING = frozenset({"gpt-5-mini"})
_OPENAI_CACHE_MIN = 1024  # OpenAI's automatic prefix caching starts at 1,024 identical tokens; Gemini's implicit too
LIVE_TARGET = 0.45
_YES_REASONS = (
    "The context gives the price the answer states.",
    "It states the retention period the reference relies on.",
    "This document describes exactly the steps the answer lists.",
    "The context contains the policy the answer quotes.",
)
_NO_REASONS = (
    "The context is about invoices, not the question asked.",
    "It covers a different plan and says nothing about refunds.",
    "This passage discusses API limits, which the answer does not use.",
    "The document is about workplace policy and is unrelated.",
)
# cp-4 asks for at most six words: the same reasons said at the cap (five or six words each).
_YES_REASONS_SHORT = (
    "Gives the price the answer states.",
    "States the retention period relied on.",
    "Describes exactly the steps listed.",
    "Contains the policy the answer quotes.",
)
_NO_REASONS_SHORT = (
    "About invoices, not the question asked.",
    "A different plan; nothing on refunds.",
    "API limits, which the answer ignores.",
    "Workplace policy, unrelated to the question.",
)
_WORDS = ("backup", "account", "workspace", "billing", "export", "retention", "administrator", "invoice", "policy",
          "subscription", "storage", "restore", "member", "permission", "audit", "region", "encryption", "team")


@dataclass(frozen=True)
class Target:
    """One evaluation: question, reference, contexts and their verdicts."""

    query: str
    reference: str
    contexts: tuple[str, ...]
    relevant: tuple[bool, ...]


@dataclass(frozen=True)
class Call:
    """One judge call's tokens: the prompt, its fixed system message (the cacheable prefix) and the reply."""

    prompt: int
    system: int
    output: int


class Counter:
    """Counts tokens of chat messages for one model family."""

    def __init__(self, encode: Callable[[str], int]) -> None:
        self._encode = encode

    def text(self, value: str) -> int:
        return self._encode(value)

    def messages(self, messages: Sequence[dict[str, str]], schema: dict[str, Any] | None) -> int:
        framing = sum(3 + self._encode(m["content"]) for m in messages) + 3
        return framing + (self._encode(json.dumps(schema)) if schema is not None else 0)


def counters() -> dict[str, Counter]:
    """``openai`` (exact, o200k_base) and ``claude`` (litellm's bundled Claude tokenizer) counters, offline."""
    spec = importlib.util.find_spec("litellm")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    folder = Path(locations[0]) / "litellm_core_utils" / "tokenizers"
    os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)  # the encodings litellm ships: no download
    import tiktoken

    o200k = tiktoken.get_encoding("o200k_base")
    found = {"openai": Counter(lambda s: len(o200k.encode(s, disallowed_special=())))}
    try:
        from tokenizers import Tokenizer

        claude = Tokenizer.from_file(str(folder / "anthropic_tokenizer.json"))
        found["claude"] = Counter(lambda s: len(claude.encode(s).ids))
    except Exception:  # noqa: BLE001 - without the tokenizers package, Claude is estimated with o200k_base too
        found["claude"] = found["openai"]
    return found


def demo_targets() -> list[Target]:
    """The demo's questions with the demo retriever's top 5 and the demo's answer."""
    from cp_observe.demo._corpus import CORPUS, QUESTIONS
    from cp_observe.demo._rag import BM25Retriever, ExtractiveAnswerer

    retriever, answerer = BM25Retriever(CORPUS, k=5), ExtractiveAnswerer()
    targets = []
    for question in QUESTIONS:
        hits = retriever.search(question.text)
        if not hits:
            continue
        answer = answerer.answer(question.text, hits)
        targets.append(Target(question.text, answer, tuple(h.page_content for h in hits),
                              tuple(h.id in question.answer_ids for h in hits)))
    return targets


def long_targets(count: int, no_share: float, tokens: Counter, seed: int) -> list[Target]:
    """``count`` evaluations of 20 contexts of about 400 tokens, ``no_share`` of them not relevant."""
    rng = random.Random(seed)
    targets = []
    for i in range(count):
        contexts = []
        for _ in range(20):
            words: list[str] = []
            text = ""
            while tokens.text(text) < 400:
                words.extend(rng.choice(_WORDS) for _ in range(12))
                text = " ".join(words).capitalize() + "."
            contexts.append(text)
        relevant = tuple(rng.random() >= no_share for _ in range(20))
        query = f"How long are backups kept after account {i} is deleted, and who can restore them?"
        reference = "Backups are kept for thirty days after deletion; an administrator can restore them."
        targets.append(Target(query, reference, tuple(contexts), relevant))
    return targets


def reply(relevant: Sequence[bool], reasons: str, start: int = 0, *, version: str = "cp-3",
          spaced: bool | None = None) -> str:
    """The verdict JSON a judge writes for these verdicts as ``version`` asks: reasons, their length, spacing.

    ``spaced`` overrides the spacing the prompt asks for (``cp-4``: none outside strings).
    """
    short = version == "cp-4"
    entries = []
    for i, yes in enumerate(relevant):
        entry: dict[str, Any] = {"context_index": start + i, "verdict": "yes" if yes else "no"}
        if reasons == "all" or (reasons == "no" and not yes):
            pool = (_YES_REASONS_SHORT if yes else _NO_REASONS_SHORT) if short else (
                _YES_REASONS if yes else _NO_REASONS)
            entry["reason"] = pool[(start + i) % len(pool)]
        elif reasons == "no":
            entry["reason"] = ""
        entries.append(entry)
    with_spaces = not short if spaced is None else spaced
    return json.dumps({"verdicts": entries}, separators=None if with_spaces else (",", ":"), ensure_ascii=False)


def calls(target: Target, counter: Counter, *, version: str, reasons: str, per_context: bool,
          spaced: bool | None = None) -> list[Call]:
    """The calls one evaluation makes, with their tokens."""
    schema = verdicts_schema(reasons)
    if per_context:
        out = []
        for text, yes in zip(target.contexts, target.relevant, strict=True):
            prompt = build_prompt(target.query, target.reference, [text], version=version, reasons=reasons)
            out.append(Call(counter.messages(prompt.messages, schema), counter.text(prompt.messages[0]["content"]),
                            counter.text(reply([yes], reasons, version=version, spaced=spaced))))
        return out
    prompt = build_prompt(target.query, target.reference, list(target.contexts), version=version, reasons=reasons)
    return [Call(counter.messages(prompt.messages, schema), counter.text(prompt.messages[0]["content"]),
                 counter.text(reply(target.relevant, reasons, version=version, spaced=spaced)))]


@dataclass(frozen=True)
class Mode:
    """One way of judging: prompt, reasons, price tier, a cached prefix, one call or one per context."""

    name: str
    version: str = "cp-4"
    reasons: str = "all"
    spaced: bool | None = None  # the reply's spacing when not the one the prompt asks for
    tier: str = ""  # "", "flex" or "batches": the suffix of litellm's price keys
    cached: bool = False
    per_context: bool = False
    today: bool = False


MODES = (
    Mode("per-context calls (today's prompt)", version="cp-2", per_context=True, today=True),
    Mode("today: one call, cp-2, reasons for all", version="cp-2", today=True),
    Mode("cp-3 prompt alone", version="cp-3"),
    Mode("cp-4 prompt alone"),
    Mode("batch", tier="batches"),
    Mode("flex", tier="flex"),
    Mode("cached prefix", cached=True),
    Mode("reasons only for no", reasons="no"),
    Mode("no reasons", reasons="none"),
    Mode("flex + reasons only for no, cp-3", version="cp-3", reasons="no", tier="flex"),
    Mode("flex + reasons only for no, cp-4 answered with spaces", reasons="no", tier="flex", spaced=True),
    Mode("flex + reasons only for no (live target)", reasons="no", tier="flex"),
    Mode("batch + reasons only for no", reasons="no", tier="batches"),
    Mode("flex + no reasons", reasons="none", tier="flex"),
    Mode("batch + no reasons", reasons="none", tier="batches"),
    Mode("flex + reasons only for no + cached prefix", reasons="no", tier="flex", cached=True),
    Mode("batch + reasons only for no + cached prefix", reasons="no", tier="batches", cached=True),
)


def _price(entry: dict[str, Any], key: str, tier: str) -> float | None:
    value = entry.get(f"{key}_{tier}" if tier else key)
    return float(value) if isinstance(value, (int, float)) else None


def cache_minimum(model: str, entry: dict[str, Any]) -> int:
    """The fewest prefix tokens the provider caches: litellm's ``prompt_cache_min_tokens``, else 1,024."""
    value = entry.get("prompt_cache_min_tokens")
    return int(value) if isinstance(value, int) else _OPENAI_CACHE_MIN


def dollars(model: str, entry: dict[str, Any], mode: Mode, made: Sequence[Call], *, hit_rate: float,
            reasoning_tokens: int) -> float | None:
    """What these calls cost in ``mode``; ``None`` when the table has no price for it."""
    input_price = _price(entry, "input_cost_per_token", mode.tier)
    output_price = _price(entry, "output_cost_per_token", mode.tier)
    if input_price is None or output_price is None:
        return None
    reasoning = reasoning_tokens if model in _REASONING and not mode.today else 0
    total = 0.0
    for call in made:
        total += (call.output + reasoning) * output_price
        if not mode.cached:
            total += call.prompt * input_price
            continue
        read = _price(entry, "cache_read_input_token_cost", mode.tier)
        if read is None:
            return None
        write = _price(entry, "cache_creation_input_token_cost", mode.tier) or input_price
        prefix = max(cache_minimum(model, entry), call.system)  # the system message grown to the minimum
        total += (call.prompt - call.system) * input_price + prefix * (hit_rate * read + (1 - hit_rate) * write)
    return total


def break_even_hit_rate(model: str, entry: dict[str, Any], made: Sequence[Call]) -> float | None:
    """The hit rate at which the grown, cached prefix costs what the short uncached system message does."""
    input_price = _price(entry, "input_cost_per_token", "")
    read = _price(entry, "cache_read_input_token_cost", "")
    if input_price is None or read is None:
        return None
    write = _price(entry, "cache_creation_input_token_cost", "") or input_price
    system = sum(call.system for call in made) / len(made)
    prefix = max(cache_minimum(model, entry), system)
    # prefix * (h * read + (1 - h) * write) = system * input  ->  h
    if write == read:
        return None
    h = (prefix * write - system * input_price) / (prefix * (write - read))
    return h if 0 <= h <= 1 else (None if h > 1 else 0.0)


def table(name: str, targets: Sequence[Target], counts: dict[str, Counter], *, hit_rate: float,
          reasoning_tokens: int) -> tuple[str, dict[tuple[str, str], float | None]]:
    """The bill of one corpus: modes × models, dollars per 1,000 evaluations and the ratio to today's call."""
    results: dict[tuple[str, str], float | None] = {}
    tokens: dict[tuple[str, str], tuple[float, float]] = {}
    notes = []
    for model in MODELS:
        entry = table_entry(model) or {}
        counter = counts["openai"] if model in _OPENAI or model.startswith("gemini") else counts["claude"]
        for mode in MODES:
            spent = 0.0
            known = True
            prompt_tokens = output_tokens = 0.0
            for target in targets:
                made = calls(target, counter, version=mode.version, reasons=mode.reasons, per_context=mode.per_context,
                             spaced=mode.spaced)
                prompt_tokens += sum(call.prompt for call in made)
                output_tokens += sum(call.output for call in made)
                cost = dollars(model, entry, mode, made, hit_rate=hit_rate, reasoning_tokens=reasoning_tokens)
                if cost is None:
                    known = False
                    break
                spent += cost
            results[(model, mode.name)] = spent / len(targets) * 1000 if known else None
            tokens[(model, mode.name)] = (prompt_tokens / len(targets), output_tokens / len(targets))
        today_calls = [calls(t, counter, version="cp-2", reasons="all", per_context=False)[0] for t in targets]
        even = break_even_hit_rate(model, entry, today_calls)
        notes.append(f"{model}: cached prefix of {cache_minimum(model, entry):,} tokens breaks even at a hit rate of "
                     + (f"{even:.2f}" if even is not None else "never (no cache price, or it never pays)"))
    rows = []
    for mode in MODES:
        row: list[object] = [mode.name]
        for model in MODELS:
            value, today = results[(model, mode.name)], results[(model, MODES[1].name)]
            prompt_tokens, output_tokens = tokens[(model, mode.name)]
            if value is None or today is None:
                row.append("n/a")
            else:
                row.append(f"${value:.3f} ({value / today:.2f}×; {prompt_tokens:,.0f} in / {output_tokens:,.0f} out)")
        rows.append(row)
    headers = ["mode", *MODELS]
    text = f"### {name}\n\n" + c.markdown_table(headers, rows) + "\n\n" + "\n".join(f"- {n}" for n in notes)
    return text, results


def main(argv: Sequence[str] | None = None) -> int:
    """Print the bill tables and whether the live target holds."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-share", type=float, default=0.7, help="share of 'no' verdicts in the long corpus")
    parser.add_argument("--hit-rate", type=float, default=0.9, help="share of calls reading a cached prefix")
    parser.add_argument("--reasoning-tokens", type=int, default=0,
                        help="reasoning tokens per gpt-5-mini call at minimal effort in the new modes")
    parser.add_argument("--long", type=int, default=20, help="evaluations in the long-context corpus")
    parser.add_argument("--seed", type=int, default=3939)
    parser.add_argument("--quick", action="store_true", help="5 long-context evaluations")
    args = parser.parse_args(argv)
    c.offline_env()
    blocked = c.block_network()
    counts = counters()
    demo = demo_targets()
    long = long_targets(5 if args.quick else args.long, args.no_share, counts["openai"], args.seed)
    demo_no = 1 - sum(sum(t.relevant) for t in demo) / sum(len(t.relevant) for t in demo)
    long_no = 1 - sum(sum(t.relevant) for t in long) / sum(len(t.relevant) for t in long)
    print("# The judge's bill: dollars per 1,000 evaluations\n")
    print(c.machine_line())
    print(f"\nseed {args.seed}; cached-prefix hit rate {args.hit_rate}; gpt-5-mini reasoning tokens per call in the "
          f"new modes {args.reasoning_tokens} (today's call: 0)")
    print(f"demo corpus: {len(demo)} evaluations, {sum(len(t.contexts) for t in demo) / len(demo):.1f} contexts each, "
          f"share of no {demo_no:.2f}; long corpus: {len(long)} evaluations of 20 contexts, share of no {long_no:.2f}")
    spread = []
    for target in demo[:10] + long[:3]:
        prompt = build_prompt(target.query, target.reference, list(target.contexts))
        text = "\n".join(m["content"] for m in prompt.messages)
        spread.append(counts["claude"].text(text) / max(counts["openai"].text(text), 1))
    print(f"tokenizer spread (Claude's bundled tokenizer ÷ o200k_base on the same prompts): "
          f"{min(spread):.2f}–{max(spread):.2f}: the stated uncertainty of the Claude and Gemini estimates\n")
    for name, targets in (("Demo corpus (top 5, demo questions)", demo), ("Long contexts (20 × ~400 tokens)", long)):
        text, results = table(name, targets, counts, hit_rate=args.hit_rate, reasoning_tokens=args.reasoning_tokens)
        print(text + "\n")
        today = results[("gpt-5-mini", MODES[1].name)]
        entry = table_entry("gpt-5-mini") or {}
        out_flex = float(entry.get("output_cost_per_token_flex") or 0)
        for mode in ("flex + reasons only for no, cp-3", "flex + reasons only for no, cp-4 answered with spaces",
                     "flex + reasons only for no (live target)", "flex + no reasons"):
            live = results[("gpt-5-mini", mode)]
            if not today or live is None:
                continue
            ratio = live / today
            room = (LIVE_TARGET * today - live) / 1000 / out_flex if out_flex else 0.0
            met = ratio <= LIVE_TARGET
            print(f"- live target on gpt-5-mini (minimal effort, no fallback), {mode}: {ratio:.3f}× today's dollars "
                  f"({'met' if met else 'missed'}: ≤ {LIVE_TARGET}×)"
                  + (f"; it holds with up to {room:.0f} reasoning tokens per evaluation" if met else ""))
        print()
    print(f"non-loopback connections refused: {blocked.total}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
