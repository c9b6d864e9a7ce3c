"""The offline LexicalJudge and its tokenizer: agreement with hand labels, alignment, determinism, robustness.

Agreement with the hand labels in ``tests/data/lexical_{en,ja}.jsonl`` (per context; retrievals at even
line positions form the dev half that the rule and its defaults were chosen on, odd positions are held out):

    ========  ===================  ===================
    language  dev                held-out
    ========  ===================  ===================
    English   91/101 = 0.901       86/96 = 0.896
    Japanese  93/103 = 0.903       81/99 = 0.818
    ========  ===================  ===================

How honest the held-out numbers are: the first 32 English and 34 Japanese retrievals were written and
labelled before any code. Their held-out half was scored four times, in aggregate, while the rule took
shape: 0.81 / 0.79 (English / Japanese) for plain whole-answer coverage, 0.87 / 0.82 once coverage was
also taken clause by clause. Thresholds and options were always chosen on dev plateaus, never on held-out,
but the held-out score did tell us to keep working, so it is somewhat optimistic. The rule was then
frozen, and 16 more retrievals per language (the last 16 lines of each file) were written and labelled
without running the judge: on those the frozen rule agreed 60/65 = 0.923 (English) and 55/65 = 0.846
(Japanese). That is the cleanest estimate of what to expect on unseen data.

Japanese stays below the 0.85 we aimed for. Most misses are beyond word overlap: questions scored with no
answer where the topic word and the asked-for attribute sit in different contexts ("the capital" vs "the
largest city of Australia"), same-topic contexts with the wrong fact, and paraphrases. The thresholds below
guard against regressions at the measured level; they are not a claim of 0.85.
"""

# ruff: noqa: RUF001 - the test texts are Japanese and Chinese, with their full-width punctuation on purpose

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from cp_observe._judging._lexical import LexicalJudge
from cp_observe._judging._text import KANA_WEIGHT, term_weights, tokens
from cp_observe._types import Judge, Judgement, Usage

DATA = Path(__file__).resolve().parents[1] / "data"
#: Every reason the judge writes must match this: numbers and fixed words, never words from the texts.
REASON = re.compile(
    r"(?:not relevant|relevant): (?:covers \d+% of (?:the (?:reference|query)'s key terms|the key terms of part "
    r"\d+/\d+ of the (?:reference|query)) \(best context \d+%; needs \d+% and \d+% of the best\)|the context has "
    r"no matchable terms|neither the reference nor the query has terms|the reference declines to answer, so it "
    r"used no context)"
)


def load(lang: str) -> list[dict[str, Any]]:
    with (DATA / f"lexical_{lang}.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def split(lang: str, half: str) -> list[dict[str, Any]]:
    return [row for i, row in enumerate(load(lang)) if i % 2 == (0 if half == "dev" else 1)]


def agreement(rows: list[dict[str, Any]], judge: LexicalJudge | None = None) -> tuple[int, int]:
    judge = judge or LexicalJudge()
    agree = total = 0
    for row in rows:
        reference = row["reference"] if row["reference"] is not None else row["query"]
        verdicts = judge.judge_sync(row["query"], reference, row["contexts"]).verdicts
        agree += sum(v.relevant == label for v, label in zip(verdicts, row["labels"], strict=True))
        total += len(row["labels"])
    return agree, total


# --- the hand-labelled data ----------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_data_files_are_well_formed(lang: str) -> None:
    """Each file has at least 25 retrievals of 3-6 labelled contexts, some without a reference answer."""
    rows = load(lang)
    assert len(rows) >= 25
    assert len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        assert 3 <= len(row["contexts"]) <= 6
        assert len(row["labels"]) == len(row["contexts"])
        assert all(isinstance(label, bool) for label in row["labels"])
        assert row["reference"] is None or isinstance(row["reference"], str)
    assert sum(row["reference"] is None for row in rows) >= 5


@pytest.mark.parametrize(("lang", "floor"), [("en", 0.85), ("ja", 0.80)])
def test_held_out_agreement(lang: str, floor: float) -> None:
    """Per-context agreement with the hand labels on the held-out half (measured: en 0.896, ja 0.818)."""
    agree, total = agreement(split(lang, "held-out"))
    assert agree / total >= floor, f"{lang}: {agree}/{total}"


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_dev_agreement(lang: str) -> None:
    """Per-context agreement on the dev half the defaults were chosen on (measured: en 0.901, ja 0.903)."""
    agree, total = agreement(split(lang, "dev"))
    assert agree / total >= 0.88, f"{lang}: {agree}/{total}"


# --- the Judge contract ---------------------------------------------------------------------------------


def test_implements_the_judge_protocol() -> None:
    """LexicalJudge is a Judge named "lexical"."""
    judge = LexicalJudge()
    assert isinstance(judge, Judge)
    assert judge.model == "lexical"


@pytest.mark.parametrize("count", [0, 1, 2, 5, 17])
def test_one_verdict_per_context_in_order(count: int) -> None:
    """Exactly one verdict per context, with index i at position i, and no usage or cost."""
    contexts = [f"Document number {i} mentions the refund window of {i} days." for i in range(count)]
    judgement = LexicalJudge().judge_sync("refund window?", "The refund window is 3 days.", contexts)
    assert isinstance(judgement, Judgement)
    assert [v.index for v in judgement.verdicts] == list(range(count))
    assert judgement.usage == Usage()
    assert judgement.cost_usd == 0.0
    assert judgement.model == "lexical"


async def test_async_judge_matches_sync() -> None:
    """The async judge returns the same judgement as judge_sync."""
    judge = LexicalJudge()
    row = load("en")[1]
    expected = judge.judge_sync(row["query"], row["reference"], row["contexts"])
    assert await judge.judge(row["query"], row["reference"], row["contexts"]) == expected


def test_deterministic() -> None:
    """The same input gives the same judgement, from the same judge and from a fresh one."""
    rows = load("en") + load("ja")
    first = [LexicalJudge().judge_sync(r["query"], r["reference"] or r["query"], r["contexts"]) for r in rows]
    judge = LexicalJudge()
    again = [judge.judge_sync(r["query"], r["reference"] or r["query"], r["contexts"]) for r in rows]
    assert first == again
    assert again == [judge.judge_sync(r["query"], r["reference"] or r["query"], r["contexts"]) for r in rows]


def test_picks_the_context_that_holds_the_fact() -> None:
    """The context holding the answer's fact is relevant; same-topic and off-topic ones are not."""
    verdicts = (
        LexicalJudge()
        .judge_sync(
            "How long is the warranty on the X200 blender?",
            "The X200 blender has a 5-year motor warranty.",
            [
                "The X200 blender's motor is covered by a five-year (5-year) warranty.",
                "Our return policy allows returns within 30 days of delivery.",
                "Store the blender jar in a dry place.",
            ],
        )
        .verdicts
    )
    assert [v.relevant for v in verdicts] == [True, False, False]


def test_answer_stitched_from_two_contexts() -> None:
    """Each context that supplies one clause of the answer is relevant."""
    verdicts = (
        LexicalJudge()
        .judge_sync(
            "What are the library's opening hours?",
            "The library opens at 9:00 on weekdays, and on Saturdays it closes early at 13:00.",
            [
                "On weekdays the library opens at 9:00 and closes at 20:00.",
                "Saturday hours are shortened: the library closes at 13:00.",
                "Library cards are free for residents.",
            ],
        )
        .verdicts
    )
    assert [v.relevant for v in verdicts] == [True, True, False]


def test_query_is_the_target_without_an_answer() -> None:
    """When the reference is the query itself, contexts are judged against the query."""
    query = "What is the boiling point of nitrogen?"
    verdicts = (
        LexicalJudge()
        .judge_sync(query, query, ["Nitrogen boils at -195.8 °C.", "Helium is the second lightest element."])
        .verdicts
    )
    assert [v.relevant for v in verdicts] == [True, False]
    assert "query's key terms" in verdicts[0].reason


def test_reference_without_terms_falls_back_to_the_query() -> None:
    """A reference with no matchable terms ("Yes.") is replaced by the query."""
    verdicts = (
        LexicalJudge()
        .judge_sync(
            "Is the public API rate limited?",
            "Yes.",
            ["The public API is rate limited to 100 requests per minute.", "Dark mode is available."],
        )
        .verdicts
    )
    assert [v.relevant for v in verdicts] == [True, False]


@pytest.mark.parametrize("reference", ["I don't know.", "I couldn't find that in the documents.", "分かりません。"])
def test_a_refusal_used_no_context(reference: str) -> None:
    """A reference that declines to answer marks every context not relevant."""
    verdicts = LexicalJudge().judge_sync("Where is the office?", reference, ["The office is in Berlin."]).verdicts
    assert [v.relevant for v in verdicts] == [False]
    assert "declines" in verdicts[0].reason


def test_a_question_that_sounds_like_a_refusal_is_still_judged() -> None:
    """Refusal phrases are looked for in answers only, not in a query scored against itself."""
    query = "I don't know how to reset my password, can you help?"
    verdicts = LexicalJudge().judge_sync(query, query, ["Reset your password from the login page.", "Hi."]).verdicts
    assert [v.relevant for v in verdicts] == [True, False]


def test_reasons_quote_no_content() -> None:
    """Reasons are built from numbers and fixed words only, so they are safe to export."""
    rows = load("en") + load("ja")
    for row in rows:
        for verdict in LexicalJudge().judge_sync(row["query"], row["reference"] or "", row["contexts"]).verdicts:
            assert REASON.fullmatch(verdict.reason), verdict.reason


# --- odd inputs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "reference", "contexts"),
    [
        ("", "", []),
        ("", "", [""]),
        ("", "", ["", "", ""]),
        ("q", "", ["some text"]),
        ("", "an answer about refunds", ["", "refunds take five days", "   \n\t "]),
        ("the of and", "it is what it is", ["the of and", "a an the"]),
    ],
)
def test_empty_inputs(query: str, reference: str, contexts: list[str]) -> None:
    """Empty or stopword-only texts never raise; an empty context is never relevant."""
    verdicts = LexicalJudge().judge_sync(query, reference, contexts).verdicts
    assert len(verdicts) == len(contexts)
    for verdict, context in zip(verdicts, contexts, strict=True):
        if not context.strip():
            assert not verdict.relevant
        assert REASON.fullmatch(verdict.reason), verdict.reason


def test_one_megabyte_context_is_capped() -> None:
    """A 1 MB context is read only up to max_chars, so judging it stays fast."""
    huge = "The refund window is 30 days for annual plans. " + ("lorem ipsum dolor sit amet " * 40_000)
    assert len(huge) > 1_000_000
    start = time.perf_counter()
    verdicts = (
        LexicalJudge()
        .judge_sync(
            "refund window?", "Annual plans have a 30-day refund window.", [huge, "Monthly plans renew automatically."]
        )
        .verdicts
    )
    assert time.perf_counter() - start < 2.0
    assert [v.relevant for v in verdicts] == [True, False]


def test_huge_reference_and_many_contexts() -> None:
    """A huge reference and query with many long contexts still finish quickly."""
    text = "alpha beta gamma 東京都の人口 " * 50_000
    start = time.perf_counter()
    judgement = LexicalJudge().judge_sync(text, text, [text] * 20)
    assert time.perf_counter() - start < 10.0
    assert len(judgement.verdicts) == 20


def test_odd_unicode_does_not_raise() -> None:
    """Lone surrogates, NULs, zero-width and combining marks, emoji and RTL text are handled."""
    weird = [
        "\ud800 broken surrogate",
        "nul\x00byte",
        "zero\u200bwidth",
        "e\u0301clair",
        "🍣🍣 sushi 🍣",
        "مرحبا بالعالم",
    ]
    verdicts = LexicalJudge().judge_sync("\udfff?", "sushi éclair", weird).verdicts
    assert len(verdicts) == len(weird)
    assert verdicts[4].relevant


def test_chinese_text() -> None:
    """Chinese (Han, no spaces) is matched by character bigrams."""
    verdicts = (
        LexicalJudge()
        .judge_sync(
            "故宫每天几点开门？",
            "故宫博物院每天上午八点半开门，周一闭馆。",
            [
                "故宫博物院开放时间为上午八点半至下午五点，周一闭馆。",
                "长城位于北京北部，全长两万多公里。",
                "颐和园的门票价格为三十元。",
            ],
        )
        .verdicts
    )
    assert [v.relevant for v in verdicts] == [True, False, False]


def test_mixed_language_text() -> None:
    """English, Japanese and numbers mixed in one text are tokenised and matched together."""
    verdicts = (
        LexicalJudge()
        .judge_sync(
            "JR Passの料金は？",
            "7日間のJR Passは50,000円です。",
            [
                "The 7-day JR Pass costs 50,000円 (Ordinary car).",
                "新幹線のぞみは東京と新大阪を結ぶ。",
                "Suica cards work on most trains.",
            ],
        )
        .verdicts
    )
    assert [v.relevant for v in verdicts] == [True, False, False]


@pytest.mark.parametrize(
    "kwargs",
    [{"min_coverage": -0.1}, {"min_coverage": 1.5}, {"relative": 2}, {"relative": True}, {"max_chars": 0}],
)
def test_bad_options_raise(kwargs: dict[str, Any]) -> None:
    """Out-of-range options fail at construction time, not while judging."""
    with pytest.raises(ValueError, match="must be"):
        LexicalJudge(**kwargs)


def test_options_change_the_verdicts() -> None:
    """A stricter min_coverage rejects a context the default accepts."""
    args = ("refunds?", "Refunds of annual plans take 5 business days.", ["Refunds take 5 business days."])
    assert LexicalJudge().judge_sync(*args).verdicts[0].relevant
    assert not LexicalJudge(min_coverage=1.0).judge_sync(*args).verdicts[0].relevant


def test_judges_many_retrievals_concurrently() -> None:
    """Concurrent async calls on one judge give the same answers as sequential ones."""
    judge = LexicalJudge()
    rows = load("ja")

    async def run() -> list[Judgement]:
        return list(await asyncio.gather(*(judge.judge(r["query"], r["query"], r["contexts"]) for r in rows)))

    assert asyncio.run(run()) == [judge.judge_sync(r["query"], r["query"], r["contexts"]) for r in rows]


# --- the tokenizer ---------------------------------------------------------------------------------------


def test_tokens_english() -> None:
    """Stopwords go, plurals and -ing/-ed forms fold, numbers keep their decimals and lose separators."""
    assert tokens("The refunds were refunded while refunding") == ["refund", "refund", "refund"]
    assert tokens("It's 1,480 m/s, or 1.5 km") == ["1480", "1.5", "km"]
    assert tokens("policies stopped running boxes") == ["policy", "stop", "run", "box"]
    assert tokens("don't CAN'T won’t") == []
    assert tokens("employee's") == ["employe"]


def test_tokens_cjk_bigrams() -> None:
    """Runs without spaces become character bigrams; a one-character run stays whole."""
    assert tokens("有給休暇") == ["有給", "給休", "休暇"]
    assert tokens("北京") == ["北京"]
    assert tokens("東 京") == ["東", "京"]
    assert tokens("한국어") == ["한국", "국어"]
    assert tokens("ジャパン・レール") == ["ジャ", "ャパ", "パン", "レー", "ール"]


def test_tokens_normalise_width_and_case() -> None:
    """NFKC folds full-width letters and digits, and half-width katakana, before lowercasing."""
    assert tokens("ＡＰＩ１２３") == tokens("API 123") == ["api", "123"]
    assert tokens("ｶﾀｶﾅ") == tokens("カタカナ")


def test_kana_bigrams_are_down_weighted() -> None:
    """Bigrams that contain hiragana weigh KANA_WEIGHT; kanji and katakana bigrams weigh 1."""
    weights = term_weights("休暇が取れます")
    assert weights["休暇"] == 1.0
    assert weights["暇が"] == KANA_WEIGHT
    assert weights["ます"] == KANA_WEIGHT
    assert term_weights("") == {}


def test_tokens_are_linear() -> None:
    """Tokenising 1 MB of mixed text takes well under a second per megabyte."""
    text = "Refund policy 返金ポリシー 2024 " * 40_000
    start = time.perf_counter()
    assert len(tokens(text)) > 100_000
    assert time.perf_counter() - start < 3.0
