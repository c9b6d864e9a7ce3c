"""An offline, deterministic judge: per-clause weighted term overlap between the reference and each context.

``LexicalJudge`` needs no model, no network and no money, so it is what tests, demos and air-gapped
deployments score with, and a baseline to compare an LLM judge against. It cannot read meaning: a context
that paraphrases the answer in other words, or a same-topic context with the wrong fact, can fool it.

The rule, chosen on the dev half of ``tests/data/lexical_{en,ja}.jsonl`` (see ``tests/judging/test_lexical.py``):

1. The *target* is the reference (the agent's answer), or the query when the reference has no terms.
   A reference that declines to answer ("I don't know", "分かりません") used no context: all are not
   relevant.
2. Every target term is weighted by an IDF computed over this retrieval alone, counting the reference as
   one more document: ``ln(1 + documents / documents_with_term)``. Words that every retrieved context
   shares (the topic) weigh little; the words that carry the answer's fact weigh most.
3. The target is scored whole and clause by clause (split at sentence punctuation, commas and 「、」),
   because an answer is often stitched from several contexts, one clause each. A context's *coverage* of
   a clause is the weighted share of the clause's terms it contains.
4. A context is relevant when, for the whole target or for one of its clauses, its coverage is at least
   ``min_coverage`` *and* at least ``relative`` times the best coverage any context reaches for that clause.
   The relative test reads "this clause was drawn from its best-matching contexts": it keeps a same-topic
   context that shares only the topic words from riding along with the one that holds the fact.

Reasons quote numbers only, never words from the texts, so they are safe to export when content capture
is off.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from cp_observe._judging._text import term_weights
from cp_observe._types import Judgement, Usage, Verdict

__all__ = ["LexicalJudge"]

#: English terms are cut to this many characters for matching, so derived forms meet
#: ("deletion" / "deleted", "remotely" / "remote", "monthly" / "month").
_PREFIX: Final = 5
#: A clause needs this many full-weight terms to be judged on its own; shorter ones are noise.
_MIN_CLAUSE_TERMS: Final = 2
#: Sentence ends (followed by space or the end), commas followed by space, and CJK punctuation. Dots and
#: commas inside numbers ("1.5", "1,000") and names ("example.com") do not split.
_CLAUSE_SPLIT: Final = re.compile("[.!?;](?=\\s|$)|,(?=\\s)|[\n\u3002\uff01\uff1f\uff1b\u3001\uff0c]")
#: Phrases with which an answer declines to answer; only looked for in short references.
_REFUSAL: Final = re.compile(
    r"\b(?:i|we) (?:don't|do not|did not|didn't) know\b|\b(?:couldn't|could not|can't|cannot|was unable to|"
    r"am unable to|unable to) (?:find|locate|answer)\b|\bno information (?:about|on|regarding)\b|"
    r"\b(?:i'm|i am) not sure\b|分かりません|わかりません|見当たりません|見つかりません|見つけられません|"
    r"お答えできません|情報がありません"
)
_REFUSAL_MAX_CHARS: Final = 300


@dataclass(frozen=True, slots=True)
class _Unit:
    """The whole target or one clause of it: IDF-weighted terms and their total."""

    weights: dict[str, float]
    total: float
    part: int  # 0 for the whole target, else the clause's 1-based position
    parts: int


class LexicalJudge:
    """Judges relevance by IDF-weighted, clause-by-clause term coverage; offline and deterministic.

    Args:
        min_coverage: the least share (0-1) of a clause's weighted terms a context must contain to be
            relevant. Default 0.2: on the dev data anything from 0.1 to 0.3 scored within two points.
        relative: the least fraction (0-1) of the best context's coverage of the same clause. Default 0.8,
            in the middle of the plateau found on the dev data (0.6-1.0).
        max_chars: only the first ``max_chars`` characters of each text are read, so a huge context costs
            no more than a long one. Default 20,000.

    Raises:
        ValueError: when an option is out of range.

    """

    def __init__(self, *, min_coverage: float = 0.2, relative: float = 0.8, max_chars: int = 20_000) -> None:
        for name, value in (("min_coverage", min_coverage), ("relative", relative)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a number between 0 and 1, got {value!r}")
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"max_chars must be a positive integer, got {max_chars!r}")
        self._min_coverage = float(min_coverage)
        self._relative = float(relative)
        self._max_chars = max_chars

    @property
    def model(self) -> str:
        """The name reported as ``context_precision.judge.model``."""
        return "lexical"

    def __repr__(self) -> str:
        return (
            f"LexicalJudge(min_coverage={self._min_coverage}, relative={self._relative}, max_chars={self._max_chars})"
        )

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Judgement:
        """Return one verdict per context, in rank order (runs inline: the work is bounded by ``max_chars``)."""
        return self.judge_sync(query, reference, contexts)

    def judge_sync(self, query: str, reference: str, contexts: Sequence[str]) -> Judgement:
        """Return one verdict per context, in rank order, with no calls and no cost.

        Args:
            query: the user's question; the target when ``reference`` has no terms.
            reference: the agent's answer, or the query itself when there is no answer.
            contexts: the retrieved texts in rank order.

        Returns:
            A ``Judgement`` with exactly one ``Verdict`` per context, ``verdicts[i].index == i``.

        """
        texts = [self._clip(text) for text in contexts]
        context_terms = [set(self._terms(text)) for text in texts]
        clipped_query, target = self._clip(query), self._clip(reference)
        name = "query" if target.strip() == clipped_query.strip() else "reference"
        if name == "reference" and self._declines(target):
            reason = "not relevant: the reference declines to answer, so it used no context"
            return self._judgement([Verdict(i, False, reason) for i in range(len(texts))])
        if not any(weight == 1.0 for weight in self._terms(target).values()):
            target, name = clipped_query, "query"
        units = self._units(target, context_terms)
        verdicts: list[Verdict] = []
        coverage = [[self._coverage(unit, terms) for terms in context_terms] for unit in units]
        best = [max(row, default=0.0) for row in coverage]
        for i, terms in enumerate(context_terms):
            if not terms:
                verdicts.append(Verdict(i, False, "not relevant: the context has no matchable terms"))
                continue
            if not units:
                verdicts.append(Verdict(i, False, "not relevant: neither the reference nor the query has terms"))
                continue
            passing = [u for u in range(len(units)) if self._passes(coverage[u][i], best[u])]
            u = passing[0] if passing else 0
            verdicts.append(
                Verdict(i, bool(passing), self._reason(bool(passing), units[u], coverage[u][i], best[u], name))
            )
        return self._judgement(verdicts)

    def _clip(self, text: str) -> str:
        return text[: self._max_chars] if isinstance(text, str) else ""

    def _judgement(self, verdicts: list[Verdict]) -> Judgement:
        return Judgement(verdicts=tuple(verdicts), model=self.model, usage=Usage(), cost_usd=0.0)

    def _passes(self, coverage: float, best: float) -> bool:
        return coverage > 0.0 and coverage >= self._min_coverage and coverage >= self._relative * best

    @staticmethod
    def _declines(reference: str) -> bool:
        if not reference or len(reference) > _REFUSAL_MAX_CHARS:
            return False
        normal = unicodedata.normalize("NFKC", reference).lower().replace("\u2019", "'")
        return _REFUSAL.search(normal) is not None

    @staticmethod
    def _terms(text: str) -> dict[str, float]:
        """Return the matching keys of ``text`` with their weights (English terms cut to ``_PREFIX``)."""
        out: dict[str, float] = {}
        for term, weight in term_weights(text).items():
            key = term[:_PREFIX] if term.isascii() and term.isalpha() else term
            out[key] = max(out.get(key, 0.0), weight)
        return out

    def _units(self, target: str, context_terms: list[set[str]]) -> list[_Unit]:
        """Return the whole target and, when it has several, each of its clauses, IDF-weighted."""
        whole = self._terms(target)
        if not whole:
            return []
        documents = len(context_terms) + 1  # the reference counts as a document
        idf = {t: math.log(1.0 + documents / (1 + sum(t in terms for terms in context_terms))) for t in whole}
        clauses = [self._terms(piece) for piece in _CLAUSE_SPLIT.split(target)]
        clauses = [c for c in clauses if sum(w == 1.0 for w in c.values()) >= _MIN_CLAUSE_TERMS]
        if len(clauses) < 2:  # one clause is the whole target again
            clauses = []
        units = [_weigh(whole, idf, 0, len(clauses))]
        units.extend(_weigh(clause, idf, k, len(clauses)) for k, clause in enumerate(clauses, start=1))
        return units

    @staticmethod
    def _coverage(unit: _Unit, terms: set[str]) -> float:
        if unit.total <= 0.0:
            return 0.0
        return sum(weight for term, weight in unit.weights.items() if term in terms) / unit.total

    def _reason(self, relevant: bool, unit: _Unit, coverage: float, best: float, name: str) -> str:
        """Explain a verdict with numbers only: the reason may be exported when content capture is off."""
        what = (
            f"the {name}'s key terms"
            if unit.part == 0
            else f"the key terms of part {unit.part}/{unit.parts} of the {name}"
        )
        return (
            f"{'relevant' if relevant else 'not relevant'}: covers {_pct(coverage)}% of {what} "
            f"(best context {_pct(best)}%; needs {_pct(self._min_coverage)}% and {_pct(self._relative)}% of the best)"
        )


def _weigh(terms: dict[str, float], idf: dict[str, float], part: int, parts: int) -> _Unit:
    weights = {t: w * idf.get(t, 0.0) for t, w in terms.items()}
    return _Unit(weights, sum(weights.values()), part, parts)


def _pct(share: float) -> int:
    """Round a share to a whole percentage, half up, so reasons read the same on every platform."""
    return math.floor(share * 100 + 0.5)
