"""The cheap-plus-LLM cascade in process: the lexical judge on every retrieval, a real LLM judge over loopback HTTP
on a uniform share, both scores on the evaluation span, gates on the LLM calls only, and the PPI sums exported."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import pytest

import cp_observe
from cp_observe import _names as n
from cp_observe._config._settings import Settings
from cp_observe._judging._ppi import PpiSums, ppi_mean_from_sums
from cp_observe._processing._cascade import llm_drawn
from cp_observe._wiring._providers import processor_from_settings
from cp_observe.testing import JudgeServer
from cp_observe.testing._behaviours import status
from tests.conftest import Otel

DOCS = [
    "Paris is the capital of France and its largest city.",
    "Bananas are yellow and rich in potassium.",
    "France borders Spain, Italy and Germany.",
    "The Eiffel Tower stands in Paris since 1889.",
]
QUESTIONS = [f"question {i}: what about Paris and France, the capital?" for i in range(40)]


def _llm(server: JudgeServer) -> Any:
    return cp_observe.LLMJudge("openai/judge-test", api_base=server.url, api_key="sk-test", timeout=5, max_retries=0)


def _run(otel: Otel, processor: Any, questions: list[str] = QUESTIONS) -> list[Any]:
    @cp_observe.retriever(name="kb")
    def search(question: str) -> list[str]:
        offset = len(question) % len(DOCS)
        return DOCS[offset:] + DOCS[:offset]

    @cp_observe.agent(name="helper")
    def answer(question: str) -> str:
        search(question)
        return "Paris is the capital of France; the Eiffel Tower is there."

    for question in questions:
        answer(question)
    assert processor.force_flush(60_000)
    return otel.by_name(n.EVALUATION_SPAN_NAME)


def _sums(otel: Otel) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for point in otel.metric_points(n.METRIC_CASCADE_SUMS):
        assert point.attributes[n.GEN_AI_DATA_SOURCE_ID] == "kb"
        totals[point.attributes[n.TERM]] += point.value
    return dict(totals)


def test_every_retrieval_gets_the_cheap_score_and_a_uniform_share_the_llm_s(otel: Otel) -> None:
    """Lexical on all 40, the LLM on exactly those the id hash draws; the LLM's score is reported where present."""
    with JudgeServer() as server:
        processor = otel.processor(_llm(server), cheap_judge="lexical", llm_share=0.5)
        evaluations = _run(otel, processor)
        calls = server.calls
    assert len(evaluations) == len(QUESTIONS)
    judged = [e for e in evaluations if e.attributes[n.CP_CASCADE_LLM] == n.CASCADE_LLM_JUDGED]
    assert 0 < len(judged) < len(QUESTIONS) and calls == len(judged)
    for evaluation in evaluations:
        a = evaluation.attributes
        parent = evaluation.parent
        assert parent is not None
        drawn = llm_drawn(parent.trace_id, parent.span_id, 0.5)
        assert a[n.CP_CASCADE_LLM] == (n.CASCADE_LLM_JUDGED if drawn else n.CASCADE_LLM_NOT_DRAWN)
        assert a[n.CP_CASCADE_CHEAP_JUDGE_MODEL] == "lexical"
        assert a[n.CP_CASCADE_CHEAP_JUDGE_KIND] == n.JUDGE_KIND_LEXICAL
        assert len(a[n.CP_CASCADE_CHEAP_VERDICTS]) == len(DOCS)
        if drawn:
            assert a[n.CP_CASCADE_LLM_JUDGE_MODEL] == "openai/judge-test"
            assert a[n.CP_CASCADE_LLM_JUDGE_KIND] == n.JUDGE_KIND_LLM
            assert a[n.GEN_AI_EVALUATION_SCORE_VALUE] == a[n.CP_CASCADE_LLM_SCORE]
            assert (a[n.CP_JUDGE_MODEL], a[n.CP_JUDGE_KIND]) == ("openai/judge-test", n.JUDGE_KIND_LLM)
        else:
            assert n.CP_CASCADE_LLM_SCORE not in a
            assert a[n.GEN_AI_EVALUATION_SCORE_VALUE] == a[n.CP_CASCADE_CHEAP_SCORE]
            assert (a[n.CP_JUDGE_MODEL], a[n.CP_JUDGE_KIND]) == ("lexical", n.JUDGE_KIND_LEXICAL)
    stats = processor.stats()
    assert (stats["sampled"], stats["scored"], stats["skipped"]) == (40, 40, 0)


def test_the_exported_sums_are_the_span_scores_and_give_the_offline_ppi_estimate(otel: Otel) -> None:
    """Each PPI sum equals the sum over the evaluation spans' two average precisions, so the estimate does too."""
    with JudgeServer() as server:
        processor = otel.processor(_llm(server), cheap_judge="lexical", llm_share=0.4)
        evaluations = _run(otel, processor)
    f_all = [e.attributes[n.CP_CASCADE_CHEAP_AP] for e in evaluations]
    pairs = [(e.attributes[n.CP_CASCADE_CHEAP_AP], e.attributes[n.CP_CASCADE_LLM_AP])
             for e in evaluations if n.CP_CASCADE_LLM_AP in e.attributes]
    expected = PpiSums(
        count=len(f_all), sum_f=math.fsum(f_all), sum_f2=math.fsum(f * f for f in f_all),
        n=len(pairs), sum_y=math.fsum(y for _, y in pairs), sum_y2=math.fsum(y * y for _, y in pairs),
        sum_f_sub=math.fsum(f for f, _ in pairs), sum_f2_sub=math.fsum(f * f for f, _ in pairs),
        sum_fy=math.fsum(f * y for f, y in pairs),
    )
    got = _sums(otel)
    exported = PpiSums(
        count=int(got[n.TERM_COUNT]), sum_f=got[n.TERM_F], sum_f2=got[n.TERM_F2], n=int(got[n.TERM_N]),
        sum_y=got[n.TERM_Y], sum_y2=got[n.TERM_Y2], sum_f_sub=got[n.TERM_F_SUB], sum_f2_sub=got[n.TERM_F2_SUB],
        sum_fy=got[n.TERM_FY],
    )
    for field in PpiSums.__dataclass_fields__:
        assert getattr(exported, field) == pytest.approx(getattr(expected, field), abs=1e-9), field
    assert ppi_mean_from_sums(exported).estimate == pytest.approx(ppi_mean_from_sums(expected).estimate, abs=1e-9)


def test_the_rate_cap_stops_llm_calls_only(otel: Otel) -> None:
    """With a cap of 3 per minute every retrieval is still scored (by the cheap judge); 3 reach the LLM."""
    with JudgeServer() as server:
        processor = otel.processor(_llm(server), cheap_judge="lexical", llm_share=1.0, max_evaluations_per_minute=3)
        evaluations = _run(otel, processor, QUESTIONS[:12])
        calls = server.calls
    statuses = sorted(e.attributes[n.CP_CASCADE_LLM] for e in evaluations)
    assert statuses == [n.CASCADE_LLM_JUDGED] * 3 + ["rate_limited"] * 9
    assert calls == 3
    stats = processor.stats()
    assert (stats["scored"], stats["skipped"]) == (12, 0)
    assert _sums(otel)[n.TERM_N] == 3 and _sums(otel)[n.TERM_COUNT] == 12


def test_the_daily_budget_stops_llm_calls_only(otel: Otel) -> None:
    """A zero budget: no LLM call at all, every retrieval scored by the cheap judge, no subsample term exported."""
    with JudgeServer() as server:
        processor = otel.processor(_llm(server), cheap_judge="lexical", llm_share=1.0, daily_budget_usd=0)
        evaluations = _run(otel, processor, QUESTIONS[:5])
        calls = server.calls
    assert calls == 0
    assert {e.attributes[n.CP_CASCADE_LLM] for e in evaluations} == {"budget_exhausted"}
    assert processor.stats()["scored"] == 5
    assert n.TERM_N not in _sums(otel) and _sums(otel)[n.TERM_COUNT] == 5


def test_a_failing_llm_opens_the_circuit_and_the_cheap_score_is_reported(otel: Otel) -> None:
    """HTTP 500 from the LLM: each retrieval is still scored (cheap); after 2 failures the circuit stops the calls."""
    with JudgeServer() as server:
        server.default = status(500)
        processor = otel.processor(_llm(server), cheap_judge="lexical", llm_share=1.0, circuit_failures=2,
                                   circuit_cooldown_s=600, concurrency=1)
        evaluations = _run(otel, processor, QUESTIONS[:6])
        calls = server.calls
    statuses = [e.attributes[n.CP_CASCADE_LLM] for e in evaluations]
    assert statuses.count("circuit_open") == 4
    assert all(s.startswith(f"{n.OUTCOME_FAILED}:") for s in statuses if s != "circuit_open")
    assert calls == 2
    assert processor.stats()["scored"] == 6 and processor.circuit_state == "open"
    assert all(e.attributes[n.CP_JUDGE_MODEL] == "lexical" for e in evaluations)


def test_llm_share_zero_never_calls_the_llm(otel: Otel) -> None:
    """llm_share 0: the cheap judge alone, every draw refused."""
    with JudgeServer() as server:
        processor = otel.processor(_llm(server), cheap_judge="lexical", llm_share=0.0)
        evaluations = _run(otel, processor, QUESTIONS[:4])
        calls = server.calls
    assert calls == 0 and {e.attributes[n.CP_CASCADE_LLM] for e in evaluations} == {n.CASCADE_LLM_NOT_DRAWN}


def test_the_draw_is_uniform_and_deterministic() -> None:
    """About llm_share of ids are drawn, the same ids every time, nested as the share grows."""
    ids = [(i * 0x9E3779B97F4A7C15 % (1 << 128), i + 1) for i in range(20_000)]
    for share in (0.05, 0.3, 0.8):
        drawn = [llm_drawn(t, s, share) for t, s in ids]
        assert abs(sum(drawn) / len(ids) - share) < 0.015
        assert drawn == [llm_drawn(t, s, share) for t, s in ids]
    assert all(llm_drawn(t, s, 0.8) for t, s in ids if llm_drawn(t, s, 0.3))


def test_settings_build_the_cascade_through_the_one_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    """CP_OBSERVE_CHEAP_JUDGE and CP_OBSERVE_LLM_SHARE reach the processor the factory builds (configure, serve)."""
    monkeypatch.setenv("CP_OBSERVE_CHEAP_JUDGE", "lexical")
    monkeypatch.setenv("CP_OBSERVE_LLM_SHARE", "0.25")
    settings = Settings.resolve()
    processor = processor_from_settings(cp_observe.LexicalJudge(), settings, sinks=[])
    try:
        assert processor.cascade is not None
        assert processor.cascade.llm_share == 0.25 and processor.cascade.cheap.model == "lexical"
    finally:
        processor.shutdown()
    monkeypatch.setenv("CP_OBSERVE_LLM_SHARE", "1.5")  # out of bounds: warned and the default kept
    assert Settings.resolve().llm_share == 1.0
    with pytest.raises(ValueError, match="llm_share"):
        cp_observe.ContextPrecisionProcessor("lexical", cheap_judge="lexical", llm_share=2.0)


class _FailingCheapJudge:
    """A cheap judge that always raises: the evaluation fails, and the LLM's circuit is not told."""

    kind = "broken-cheap"

    @property
    def model(self) -> str:
        return "broken-cheap"

    async def judge(self, query: str, reference: str, contexts: Any) -> Any:
        raise RuntimeError("cheap judge down")


def test_a_failing_cheap_judge_fails_the_evaluation_without_calling_the_llm(otel: Otel) -> None:
    """The cheap judge raising: outcome failed (judge_exception), no LLM call, the circuit stays closed."""
    with JudgeServer() as server:
        processor = otel.processor(_llm(server), cheap_judge=_FailingCheapJudge(), llm_share=1.0,
                                   circuit_failures=1)
        evaluations = _run(otel, processor, QUESTIONS[:3])
        calls = server.calls
    assert calls == 0
    stats = processor.stats()
    assert (stats["failed"], stats["scored"]) == (3, 0) and processor.circuit_state == "closed"
    assert {(e.attributes[n.CP_JUDGE_MODEL], e.attributes[n.CP_JUDGE_KIND]) for e in evaluations} == {
        ("broken-cheap", "broken-cheap")}
    assert not otel.metric_points(n.METRIC_CASCADE_SUMS)


def test_configure_runs_the_cascade_in_process(otel: Otel) -> None:
    """configure(judge=<LLM>, cheap_judge="lexical", llm_share=1) scores through both judges in this process."""
    with JudgeServer() as server:
        processor = cp_observe.configure(_llm(server), cheap_judge="lexical", llm_share=1.0,
                                         tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider,
                                         logger_provider=otel.logger_provider)
        assert processor is not None
        otel.shut_down_after(processor)
        evaluations = _run(otel, processor, QUESTIONS[:3])
        calls = server.calls
    assert calls == 3
    assert {e.attributes[n.CP_CASCADE_LLM] for e in evaluations} == {n.CASCADE_LLM_JUDGED}
    assert _sums(otel)[n.TERM_N] == 3
