"""The demo's RAG app: its corpus, BM25 ranking, the degraded retriever, and the MAP gap between them."""

# ruff: noqa: RUF001 - Japanese text, with its full-width punctuation and katakana, on purpose

from __future__ import annotations

import statistics

import pytest

from cp_observe._capture._extract import extract_contexts
from cp_observe._judging._lexical import LexicalJudge
from cp_observe._judging._map import context_precision_score
from cp_observe.demo._corpus import CORPUS, QUESTIONS
from cp_observe.demo._rag import BM25Retriever, DegradedRetriever, Document, ExtractiveAnswerer, ScoredDocument


def mean_score(retriever: BM25Retriever | DegradedRetriever) -> float:
    """Mean context precision over the demo questions, judged by LexicalJudge against the extractive answer."""
    answerer, judge = ExtractiveAnswerer(), LexicalJudge()
    scores = []
    for question in QUESTIONS:
        results = retriever.search(question.text)
        answer = answerer.answer(question.text, results)
        verdicts = judge.judge_sync(question.text, answer, [r.page_content for r in results]).verdicts
        scores.append(context_precision_score([v.relevant for v in verdicts]))
    return statistics.fmean(scores)


def test_corpus_shape() -> None:
    """40-60 documents, about two thirds English, unique ids; 20-30 questions whose answers exist."""
    assert 40 <= len(CORPUS) <= 60
    ids = [doc.id for doc in CORPUS]
    assert len(set(ids)) == len(ids)
    english = sum(doc.lang == "en" for doc in CORPUS) / len(CORPUS)
    assert 0.55 <= english <= 0.75
    assert {doc.lang for doc in CORPUS} == {"en", "ja"}
    assert 20 <= len(QUESTIONS) <= 30
    assert {q.lang for q in QUESTIONS} == {"en", "ja"}
    for question in QUESTIONS:
        assert question.answer_ids
        assert set(question.answer_ids) <= set(ids)


def test_bm25_ranks_an_answer_first() -> None:
    """BM25 puts an answering document at rank 1 for at least 80% of the demo questions."""
    retriever = BM25Retriever(CORPUS)
    hits = [bool(r) and r[0].id in q.answer_ids for q in QUESTIONS for r in [retriever.search(q.text)]]
    assert sum(hits) / len(hits) >= 0.8, [q.text for q, hit in zip(QUESTIONS, hits, strict=True) if not hit]


def test_bm25_ranking_is_sorted_bounded_and_stable() -> None:
    """Results are at most k, best first, ties broken by corpus order, and identical on every call."""
    retriever = BM25Retriever(CORPUS, k=3)
    for question in QUESTIONS:
        results = retriever.search(question.text)
        assert 1 <= len(results) <= 3
        assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
        assert results == retriever.search(question.text) == BM25Retriever(CORPUS, k=3).search(question.text)
    twins = [Document("a", "same words here"), Document("b", "same words here")]
    assert [r.id for r in BM25Retriever(twins).search("same words")] == ["a", "b"]
    assert BM25Retriever(CORPUS).search("") == []
    assert BM25Retriever([]).search("anything") == []


def test_good_retriever_scores_clearly_above_degraded() -> None:
    """Judged by LexicalJudge, the BM25 retriever's mean context precision beats the degraded one's by >= 0.2."""
    good, degraded = mean_score(BM25Retriever(CORPUS)), mean_score(DegradedRetriever(CORPUS))
    assert good >= 0.8
    assert good - degraded >= 0.2, (good, degraded)


def test_degraded_retriever_is_deterministic_per_seed() -> None:
    """The same seed and query give the same results; another seed gives another (fixed) ranking."""
    first, again, other = (
        DegradedRetriever(CORPUS, seed=0),
        DegradedRetriever(CORPUS, seed=0),
        DegradedRetriever(CORPUS, seed=1),
    )
    runs = [(first.search(q.text), again.search(q.text), other.search(q.text)) for q in QUESTIONS]
    assert all(a == b for a, b, _ in runs)
    assert any(a != c for a, _, c in runs)
    for results, _, _ in runs:
        assert len(results) == 5
        assert len({r.id for r in results}) == 5


def test_degraded_retriever_pushes_the_answer_down_or_out() -> None:
    """BM25's top document is never in the degraded top 4: it is either last or missing."""
    bm25, degraded = BM25Retriever(CORPUS), DegradedRetriever(CORPUS)
    positions = []
    for question in QUESTIONS:
        best = bm25.search(question.text)[0].id
        ids = [r.id for r in degraded.search(question.text)]
        assert best not in ids[:-1]
        positions.append(best in ids)
    assert 0 < sum(positions) < len(positions)


def test_extractive_answerer_quotes_the_best_sentence() -> None:
    """The answer is the retrieved sentence covering the question, or a fixed "don't know"."""
    answerer = ExtractiveAnswerer()
    docs = [Document("x", "Cats sleep a lot. The refund window is 30 days."), Document("y", "Dogs bark.")]
    assert answerer.answer("How long is the refund window?", docs) == "The refund window is 30 days."
    assert answerer.answer("What is the capital of Peru?", docs) == "I don't know."
    assert answerer.answer("ペルーの首都は？", docs) == "分かりません。"
    assert answerer.answer("anything", []) == "I don't know."
    scored = [ScoredDocument(docs[0], 1.0)]
    assert answerer.answer("refund window?", scored) == answerer.answer("refund window?", docs[:1])


def test_demo_answers_are_deterministic() -> None:
    """The whole pipeline gives the same answers and scores on every run."""
    assert mean_score(BM25Retriever(CORPUS)) == mean_score(BM25Retriever(CORPUS))
    assert mean_score(DegradedRetriever(CORPUS, seed=7)) == mean_score(DegradedRetriever(CORPUS, seed=7))


def test_documents_look_like_langchain_documents_to_the_hook() -> None:
    """The hook's extractor reads text, id, score and metadata from Document and ScoredDocument."""
    results = BM25Retriever(CORPUS).search("How do I install the Python SDK?")
    extracted = extract_contexts(results)
    assert [c.id for c in extracted.contexts] == [r.id for r in results]
    assert [c.text for c in extracted.contexts] == [r.page_content for r in results]
    assert [c.score for c in extracted.contexts] == [r.score for r in results]
    assert extracted.contexts[0].metadata is not None
    assert extracted.contexts[0].metadata["lang"] == "en"
    plain = extract_contexts(list(CORPUS[:2]))
    assert [c.id for c in plain.contexts] == [CORPUS[0].id, CORPUS[1].id]


@pytest.mark.parametrize(
    ("factory", "kwargs"),
    [
        (BM25Retriever, {"k": 0}),
        (BM25Retriever, {"b": 2.0}),
        (DegradedRetriever, {"keep": 1.5}),
    ],
)
def test_bad_retriever_arguments_raise(
    factory: type[BM25Retriever] | type[DegradedRetriever], kwargs: dict[str, float]
) -> None:
    """Bad arguments fail at construction."""
    with pytest.raises(ValueError, match="must be"):
        factory(CORPUS, **kwargs)  # type: ignore[arg-type]


def test_duplicate_ids_raise() -> None:
    """Two documents with one id are refused: ids must identify documents in spans."""
    with pytest.raises(ValueError, match="unique"):
        BM25Retriever([Document("a", "one"), Document("a", "two")])
