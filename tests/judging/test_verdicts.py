"""Reading judge replies: JSON extraction, verdict normalisation and alignment by index."""

from __future__ import annotations

import pytest

from cp_observe._judging._verdicts import align, coerce_verdicts, normalise_verdict, parse_reply
from cp_observe._types import Verdict


@pytest.mark.parametrize("text", ["yes", "Yes.", " YES ", "yes, it is relevant", "True", "y", "はい"])
def test_yes_variants(text: str) -> None:
    """Spelling variants of yes are yes."""
    assert normalise_verdict(text) is True


@pytest.mark.parametrize("text", ["no", "No.", " NO ", "Not relevant", "false", "いいえ"])
def test_no_variants(text: str) -> None:
    """Spelling variants of no are no."""
    assert normalise_verdict(text) is False


@pytest.mark.parametrize("text", ["maybe", "", "?", "partially"])
def test_unclear_verdicts_are_none(text: str) -> None:
    """An unclear verdict is not guessed."""
    assert normalise_verdict(text) is None


def test_fenced_json_with_prose() -> None:
    """JSON inside a markdown fence, surrounded by prose, is found."""
    text = 'Sure!\n```json\n{"verdicts": [{"context_index": 0, "verdict": "yes", "reason": "r"}]}\n```\nDone.'
    entries = parse_reply(text)
    assert entries is not None
    assert [(e.index, e.relevant) for e in entries] == [(0, True)]


def test_json_embedded_in_prose_without_fence() -> None:
    """A JSON object in running text is found by scanning."""
    text = 'Here you go: {"verdicts": [{"context_index": "1", "verdict": "No"}]} hope it helps'
    entries = parse_reply(text)
    assert entries is not None
    assert [(e.index, e.relevant) for e in entries] == [(1, False)]


@pytest.mark.parametrize("text", ["", "not json", '{"verdicts": [', '{"foo": 1}'])
def test_no_usable_json(text: str) -> None:
    """Garbage, truncated or foreign JSON yields no entries."""
    assert parse_reply(text) in (None, [])


def test_complete_alignment() -> None:
    """Out-of-order but complete indices are placed by index."""
    entries = parse_reply('[{"context_index": 1, "verdict": "no"}, {"context_index": 0, "verdict": "yes"}]')
    assert entries is not None
    result = align(entries, 2)
    assert result.trustworthy
    assert [result.verdicts[i].relevant for i in range(2)] == [True, False]
    assert result.missing(2) == []


def test_shifted_indices_are_not_trusted() -> None:
    """Indices 1..n for n contexts (shifted) place no verdict at all."""
    shifted = ",".join(f'{{"context_index": {i}, "verdict": "yes"}}' for i in (1, 2, 3, 4))
    entries = parse_reply('{"verdicts": [' + shifted + "]}")
    assert entries is not None
    result = align(entries, 4)
    assert not result.trustworthy
    assert result.verdicts == {}
    assert result.missing(4) == [0, 1, 2, 3]


def test_duplicates_are_not_trusted() -> None:
    """A repeated index discards the reply."""
    entries = parse_reply('[{"context_index": 0, "verdict": "yes"}, {"context_index": 0, "verdict": "no"}]')
    assert entries is not None
    assert not align(entries, 2).trustworthy


def test_too_few_leaves_the_rest_missing() -> None:
    """Two verdicts for four contexts leave two missing, never shifted into place."""
    entries = parse_reply('[{"context_index": 0, "verdict": "yes"}, {"context_index": 2, "verdict": "no"}]')
    assert entries is not None
    result = align(entries, 4)
    assert result.missing(4) == [1, 3]


def test_coerce_user_verdicts() -> None:
    """A user judge's verdicts are accepted only when exactly one per index."""
    good = [Verdict(1, False), Verdict(0, True)]
    assert coerce_verdicts(good, 2) == (Verdict(0, True), Verdict(1, False))
    assert coerce_verdicts(good[:1], 2) is None
    assert coerce_verdicts([Verdict(0, True), Verdict(0, False)], 2) is None
    assert coerce_verdicts([Verdict(1, True), Verdict(2, False)], 2) is None
