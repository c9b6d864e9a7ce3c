"""The demo's reranker stage: reorders what the retriever found by how much of the question each document covers.

A stand-in for a cross-encoder, dependency-free and deterministic: each document's score is the weighted share of
the question's terms (``_text.term_weights``) it contains, ties kept in retrieval order, and only the best
``top_n`` are returned. Over the good BM25 retriever it mostly agrees (little lift); over the degraded one it pulls
the answering document up from the bottom (a large lift), and when the retriever lost that document there is
nothing to pull up: the retrieval stage's MAP drops and the rerank lift cannot hide it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from cp_observe._judging._text import term_weights, tokens

__all__ = ["CoverageReranker"]

D = TypeVar("D")


class CoverageReranker:
    """Reorders documents (anything with ``page_content``) by their coverage of the question's terms.

    Args:
        top_n: how many documents ``rerank`` returns at most.

    Raises:
        ValueError: when ``top_n`` is not a positive integer.

    """

    def __init__(self, top_n: int = 4) -> None:
        if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
            raise ValueError(f"top_n must be a positive integer, got {top_n!r}")
        self.top_n = top_n

    def rerank(self, query: str, documents: Sequence[D]) -> list[D]:
        """The best ``top_n`` of ``documents`` for ``query``, most covering first; ties in their given order."""
        wanted = term_weights(query)
        total = sum(wanted.values()) or 1.0

        def coverage(document: D) -> float:
            present = set(tokens(str(getattr(document, "page_content", document))))
            return sum(w for t, w in wanted.items() if t in present) / total

        scored = [(coverage(d), i, d) for i, d in enumerate(documents)]
        scored.sort(key=lambda s: (-s[0], s[1]))
        return [d for _, _, d in scored[: self.top_n]]
