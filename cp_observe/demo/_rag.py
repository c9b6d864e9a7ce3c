"""A small, dependency-free RAG app for the demo: documents, a BM25 retriever, a worse one, an answerer.

It exists so the demo can show context precision moving: ``BM25Retriever`` usually ranks the answering
document first; ``DegradedRetriever`` returns mostly random documents with the right one pushed to the
bottom or dropped, so the MAP on the dashboards falls when the demo switches to it. ``ExtractiveAnswerer``
quotes the retrieved sentence(s) that best match the question, which gives the judge a real answer to
score against without a language model.

Everything is deterministic: ties are broken by corpus order, and the degraded retriever draws from a
generator seeded by a hash of its seed and the query, never from global randomness.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from cp_observe._judging._text import term_weights, tokens

__all__ = ["BM25Retriever", "DegradedRetriever", "Document", "ExtractiveAnswerer", "ScoredDocument"]

_SENTENCE_END: Final = re.compile("(?<=[.!?])\\s+|(?<=[\u3002\uff01\uff1f])")
_JAPANESE: Final = re.compile("[\u3040-\u30ff]")


@dataclass(frozen=True, slots=True)
class Document:
    """One document of the corpus, shaped like a LangChain ``Document`` so the hook's extractors read it.

    Attributes:
        id: a stable identifier, reported as the retrieved document's id.
        text: the document's text.
        lang: its language, ``"en"`` or ``"ja"``.

    """

    id: str
    text: str
    lang: str = "en"

    @property
    def page_content(self) -> str:
        """The text, under the name LangChain uses."""
        return self.text

    @property
    def metadata(self) -> Mapping[str, str]:
        """Read-only metadata: the id and the language."""
        return MappingProxyType({"id": self.id, "lang": self.lang})


@dataclass(frozen=True, slots=True)
class ScoredDocument:
    """A retrieved document with the retriever's score; exposes the document's fields too.

    Attributes:
        document: the retrieved document.
        score: the BM25 score of the document for the query (higher is better).

    """

    document: Document
    score: float

    @property
    def id(self) -> str:
        """The document's id."""
        return self.document.id

    @property
    def page_content(self) -> str:
        """The document's text."""
        return self.document.text

    @property
    def metadata(self) -> Mapping[str, str]:
        """The document's metadata."""
        return self.document.metadata


class BM25Retriever:
    """Okapi BM25 over ``_text.tokens``: a classic lexical retriever, good enough to rank the demo corpus.

    Args:
        corpus: the documents to search; ids must be unique.
        k: how many documents ``search`` returns at most.
        k1: term-frequency saturation (the usual 1.2-2.0).
        b: length normalisation, from 0 (none) to 1 (full).

    Raises:
        ValueError: when ``k`` is not positive, ``k1`` is negative, ``b`` is outside 0-1, or an id repeats.

    """

    def __init__(self, corpus: Iterable[Document], k: int = 5, *, k1: float = 1.5, b: float = 0.75) -> None:
        self._docs = tuple(corpus)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if not k1 >= 0 or not 0 <= b <= 1:
            raise ValueError(f"k1 must be >= 0 and b between 0 and 1, got k1={k1!r}, b={b!r}")
        ids = [doc.id for doc in self._docs]
        if len(set(ids)) != len(ids):
            raise ValueError("document ids must be unique")
        self.k = k
        self._k1 = k1
        self._b = b
        counts = [Counter(tokens(doc.text)) for doc in self._docs]
        self._lengths = [sum(c.values()) for c in counts]
        self._avg_length = (sum(self._lengths) / len(self._lengths)) if self._lengths else 0.0
        # term -> [(document position, term frequency)], in corpus order.
        self._postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for position, count in enumerate(counts):
            for term, tf in count.items():
                self._postings[term].append((position, tf))
        n = len(self._docs)
        self._idf = {t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self._postings.items()}

    @property
    def documents(self) -> tuple[Document, ...]:
        """The corpus, in its original order."""
        return self._docs

    def search(self, query: str) -> list[ScoredDocument]:
        """Return up to ``k`` documents that share a term with ``query``, best first; ties in corpus order."""
        scores = self.scores(query)
        ranked = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))
        return [ScoredDocument(self._docs[i], scores[i]) for i in ranked[: self.k]]

    def scores(self, query: str) -> list[float]:
        """Return the BM25 score of every document for ``query``, in corpus order.

        Query terms count once each, weighted by ``_text.term_weights`` so kana-bearing bigrams (particles,
        okurigana) weigh less than content terms.
        """
        scores = [0.0] * len(self._docs)
        for term, weight in term_weights(query).items():
            idf = self._idf.get(term)
            if idf is None:
                continue
            for position, tf in self._postings[term]:
                norm = self._k1 * (1 - self._b + self._b * self._lengths[position] / (self._avg_length or 1.0))
                scores[position] += weight * idf * tf * (self._k1 + 1) / (tf + norm)
        return scores


class DegradedRetriever:
    """A deliberately bad retriever: random documents, with BM25's best one at the bottom or missing.

    For each query it draws ``k`` documents at random, except that with probability ``keep`` it keeps
    BM25's top document and puts it last. Draws come from a generator seeded by a hash of ``seed`` and the
    query, so the same query always gets the same results, in any process.

    Args:
        corpus: the documents to draw from; ids must be unique.
        k: how many documents ``search`` returns.
        seed: the seed; change it to get a different (but again fixed) bad ranking.
        keep: the chance that BM25's top document is kept, last.

    Raises:
        ValueError: when ``k`` is not positive or ``keep`` is outside 0-1.

    """

    def __init__(self, corpus: Iterable[Document], k: int = 5, seed: int = 0, *, keep: float = 0.5) -> None:
        if not 0 <= keep <= 1:
            raise ValueError(f"keep must be between 0 and 1, got {keep!r}")
        self._bm25 = BM25Retriever(corpus, k=k)
        self.k = k
        self._seed = seed
        self._keep = keep

    def search(self, query: str) -> list[ScoredDocument]:
        """Return ``k`` mostly off-topic documents; the right one, when kept, comes last."""
        digest = hashlib.sha256(f"{self._seed}\x00{query}".encode("utf-8", "surrogatepass")).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        documents = self._bm25.documents
        scores = self._bm25.scores(query)
        best = max(range(len(documents)), key=lambda i: (scores[i], -i), default=None)
        keep_best = best is not None and scores[best] > 0 and rng.random() < self._keep
        pool = [i for i in range(len(documents)) if i != best]
        picks = rng.sample(pool, min(self.k - keep_best, len(pool)))
        if keep_best and best is not None:
            picks.append(best)
        return [ScoredDocument(documents[i], scores[i]) for i in picks]


class ExtractiveAnswerer:
    """Answers by quoting the retrieved sentence(s) that cover most of the question's terms.

    Args:
        max_sentences: the most sentences quoted.
        min_overlap: the least share of the question's weighted terms a sentence must contain; when none
            does, the answer is a fixed "I don't know." ("分かりません。" for a Japanese question).
        near_best: a further sentence is quoted only when it covers at least this fraction of what the best
            one covers.

    Raises:
        ValueError: when ``max_sentences`` is not positive or a fraction is outside 0-1.

    """

    def __init__(self, *, max_sentences: int = 2, min_overlap: float = 0.5, near_best: float = 0.8) -> None:
        if isinstance(max_sentences, bool) or not isinstance(max_sentences, int) or max_sentences < 1:
            raise ValueError(f"max_sentences must be a positive integer, got {max_sentences!r}")
        if not 0 <= min_overlap <= 1 or not 0 <= near_best <= 1:
            raise ValueError(f"min_overlap and near_best must be between 0 and 1, got {min_overlap!r}, {near_best!r}")
        self._max_sentences = max_sentences
        self._min_overlap = min_overlap
        self._near_best = near_best

    def answer(self, query: str, documents: Sequence[Document | ScoredDocument]) -> str:
        """Return the best-matching sentence(s) of ``documents`` for ``query``, or a fixed "don't know"."""
        wanted = term_weights(query)
        total = sum(wanted.values())
        candidates: list[tuple[float, int, str]] = []  # (coverage, order, sentence)
        for doc in documents:
            text = doc.document.text if isinstance(doc, ScoredDocument) else doc.text
            for piece in _SENTENCE_END.split(text):
                sentence = piece.strip()
                if not sentence or total <= 0:
                    continue
                present = set(tokens(sentence))
                coverage = sum(w for t, w in wanted.items() if t in present) / total
                candidates.append((coverage, len(candidates), sentence))
        candidates.sort(key=lambda c: (-c[0], c[1]))
        if not candidates or candidates[0][0] < self._min_overlap:
            return "分かりません。" if _JAPANESE.search(query) else "I don't know."
        best = candidates[0][0]
        chosen = [
            c for c in candidates[: self._max_sentences] if c[0] >= max(self._min_overlap, self._near_best * best)
        ]
        chosen.sort(key=lambda c: c[1])  # quote in retrieval order
        return ("" if _JAPANESE.search(query) else " ").join(c[2] for c in chosen)


def rechunk(corpus: Iterable[Document], width: int) -> list[Document]:
    """The corpus cut into fixed ``width``-character pieces, across words and sentences: a worse chunking.

    The demo's canary (``retriever.version=v2``) retrieves from these pieces: each holds a fragment of a fact,
    so fewer of the retrieved pieces support the answer and the MAP drops.

    Raises:
        ValueError: when ``width`` is not positive.
    """
    if width < 1:
        raise ValueError(f"width must be positive, got {width!r}")
    return [Document(f"{d.id}#{i // width}", d.text[i:i + width], d.lang)
            for d in corpus for i in range(0, len(d.text), width)]
