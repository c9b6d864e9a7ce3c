"""Segments in process: labels on the score, squares, evaluations and verdicts series; fallback; none/other/cut."""

from __future__ import annotations

from typing import Any

import pytest

import cp_observe
from cp_observe import _names as n
from cp_observe._emission._segments import MAX_SEGMENT_VALUE_CHARS, SegmentValues
from cp_observe._errors import ConfigurationError
from cp_observe.testing import FakeJudge
from tests.conftest import Otel
from tests.segments_support import EXPECTED, SEGMENTS, emit_traces, label_sets

SERIES = (n.METRIC_SCORE, n.METRIC_SCORE_SQUARES, n.METRIC_EVALUATIONS, n.METRIC_VERDICTS)


def _attributes(otel: Otel, metric: str) -> list[dict[str, Any]]:
    return [dict(p.attributes) for p in otel.metric_points(metric)]


def test_each_series_carries_one_label_per_segment(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """With segments set, the four series carry the values read from the retrieval, its agent or its root."""
    processor = otel.processor(cp_observe_judge, segments=SEGMENTS)
    emit_traces(otel.tracer_provider)
    assert processor.force_flush()
    for metric in SERIES:
        assert label_sets(_attributes(otel, metric)) == EXPECTED, metric
    evaluations = otel.by_name(n.EVALUATION_SPAN_NAME)
    assert len(evaluations) == 4
    spans = {(e.attributes or {})[n.GEN_AI_DATA_SOURCE_ID]: dict(e.attributes or {}) for e in evaluations}
    assert spans["agent"][n.CP_SEGMENT_PREFIX + "retriever_version"] == "v2"
    assert spans["root"][n.CP_SEGMENT_PREFIX + "tenant_tier"] == "silver"
    assert "retriever_version" not in spans["own"]  # the label name is for metrics; the span has the prefix
    events = [dict(r.log_record.attributes or {}) for r in otel.logs.get_finished_logs()]
    assert {(e[n.GEN_AI_DATA_SOURCE_ID], e[n.CP_SEGMENT_PREFIX + "retriever_version"]) for e in events} == {
        ("own", "v1"), ("agent", "v2"), ("root", "none"), ("bare", "none")}


def test_no_segment_labels_when_unset(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Without segments, no series and no evaluation span carries a segment label or attribute."""
    processor = otel.processor(cp_observe_judge)
    emit_traces(otel.tracer_provider)
    assert processor.force_flush()
    for metric in SERIES:
        for attributes in _attributes(otel, metric):
            assert "retriever_version" not in attributes and "tenant_tier" not in attributes
    for span in otel.by_name(n.EVALUATION_SPAN_NAME):
        assert not any(key.startswith(n.CP_SEGMENT_PREFIX) for key in span.attributes or {})
    assert otel.metric_points(n.METRIC_SEGMENT_OVERFLOW) == []


def test_content_capture_off_still_carries_segments(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Segment values are the user's attributes, not content: capture off keeps them on series and span."""
    processor = otel.processor(cp_observe_judge, segments=SEGMENTS, capture_content=False)
    emit_traces(otel.tracer_provider)
    assert processor.force_flush()
    assert label_sets(_attributes(otel, n.METRIC_SCORE)) == EXPECTED
    spans = otel.by_name(n.EVALUATION_SPAN_NAME)
    assert {(s.attributes or {})[n.CP_SEGMENT_PREFIX + "tenant_tier"] for s in spans} == {"gold", "silver", "none"}
    assert all(n.CP_REASONS not in (s.attributes or {}) for s in spans)  # capture is off indeed


def test_ten_thousand_values_keep_the_bound_and_overflow_is_counted(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """10,000 distinct values at max 50: 50 kept, the rest 'other', and the overflow counter says 9,950."""
    processor = otel.processor(cp_observe_judge, segments="request.id", max_segment_values=50, queue_size=20_000)
    tracer = otel.tracer_provider.get_tracer("t")
    for i in range(10_000):
        with tracer.start_as_current_span("retrieval kb", attributes={
            n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.GEN_AI_DATA_SOURCE_ID: "kb",
            n.INPUT_VALUE: "capital of France", n.document_attribute(0, "content"): "Paris, capital of France",
            "request.id": f"r{i}",
        }):
            pass
    assert processor.force_flush(120_000)
    values = {p.attributes["request_id"]: p.count for p in otel.metric_points(n.METRIC_SCORE)}
    assert len(values) == 51 and values[n.SEGMENT_OTHER] == 9_950
    assert sum(values.values()) == 10_000
    overflow = otel.metric_points(n.METRIC_SEGMENT_OVERFLOW)
    assert [(dict(p.attributes), p.value) for p in overflow] == [({n.SEGMENT: "request_id"}, 9_950)]


def test_long_values_are_cut_and_empty_is_none() -> None:
    """A value is cut to MAX_SEGMENT_VALUE_CHARS; empty or missing is none; the retrieval wins over its agent."""
    values = SegmentValues([("v", "v")], 5)
    assert values.resolve({"v": "x" * 500}, None) == (("v", "x" * MAX_SEGMENT_VALUE_CHARS),)
    assert values.resolve({"v": "  "}, {"v": "agent"}) == (("v", "agent"),)
    assert values.resolve({}, None) == (("v", n.SEGMENT_NONE),)
    assert values.resolve({"v": "own"}, {"v": "agent"}) == (("v", "own"),)
    assert values.resolve({"v": 3}, None) == (("v", "3"),)


@pytest.mark.parametrize("segments, message", [
    ("gen_ai.data_source.id", "already puts"),
    ("outcome", "already puts"),
    ("le", "already puts"),
    ("tenant.tier,tenant-tier", "would both be"),
    ("1tier", "digit"),
    ("__name__", "already puts"),
])
def test_colliding_segments_are_refused_at_configuration(segments: str, message: str) -> None:
    """A segment whose label name is one the library emits, or a duplicate, raises ConfigurationError."""
    with pytest.raises(ConfigurationError, match=message):
        cp_observe.configure(judge="lexical", segments=segments, capture_only=True)


def test_a_bad_segments_variable_warns_and_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A colliding CP_OBSERVE_SEGMENTS is ignored (a warning), as every bad environment value is."""
    from cp_observe._config._settings import Settings

    monkeypatch.setenv("CP_OBSERVE_SEGMENTS", "outcome")
    assert Settings.resolve().segments is None
    monkeypatch.setenv("CP_OBSERVE_SEGMENTS", "retriever.version, tenant.tier")
    assert Settings.resolve().segment_labels() == (("retriever.version", "retriever_version"),
                                                  ("tenant.tier", "tenant_tier"))


def test_a_retrieval_ending_after_its_agent_gets_the_agents_segment(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """Spans reordered on the way (the agent ends first): the remembered answer still lends its segment value."""
    from opentelemetry import trace

    from tests.segments_support import _agent, _retrieval

    processor = otel.processor(cp_observe_judge, segments=SEGMENTS)
    tracer = otel.tracer_provider.get_tracer("t")
    agent = tracer.start_span("invoke_agent helper", attributes=_agent(**{"tenant.tier": "bronze"}), start_time=1_000)
    inner = tracer.start_span("retrieval late", context=trace.set_span_in_context(agent),
                              attributes=_retrieval("late"), start_time=2_000)
    agent.end(end_time=9_000)  # handed to the processor before the retrieval it encloses
    inner.end(end_time=3_000)
    assert processor.force_flush()
    (point,) = [p for p in otel.metric_points(n.METRIC_SCORE) if p.attributes[n.GEN_AI_DATA_SOURCE_ID] == "late"]
    assert point.attributes["tenant_tier"] == "bronze" and point.attributes["retriever_version"] == n.SEGMENT_NONE


def test_the_bound_holds_under_threads() -> None:
    """8 threads resolving 1,000 distinct values each at once: exactly 50 kept, every other one counted once."""
    import threading

    overflowed: list[str] = []
    values = SegmentValues([("v", "v")], 50, on_overflow=overflowed.append)
    start = threading.Barrier(8)
    results: list[str] = []

    def work(thread: int) -> None:
        start.wait()
        results.extend(values.resolve({"v": f"{thread}-{i}"}, None)[0][1] for i in range(1_000))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kept = {r for r in results if r != n.SEGMENT_OTHER}
    assert len(kept) == 50 and results.count(n.SEGMENT_OTHER) == 7_950
    assert len(overflowed) == 7_950 and values.overflowed == {"v": 7_950}


def test_a_reranker_takes_the_variant_of_the_retrieval_it_reranks(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """The variant set on the retrieval span only: the rerank evaluation carries it too (not ``none``).

    Its own span wins over the retrieval's, and the retrieval's over the enclosing agent's.
    """
    from opentelemetry import trace

    from tests.processing.test_rerank_lift import ANSWER, DOCS, QUESTION, RERANKED

    processor = otel.processor(cp_observe_judge, segments=SEGMENTS)
    own: dict[str, str] = {}

    @cp_observe.retriever(name="products")
    def search(query: str, version: str) -> list[str]:
        trace.get_current_span().set_attribute("retriever.version", version)
        return list(DOCS)

    @cp_observe.reranker(name="cross-encoder")
    def rerank(query: str, documents: list[str]) -> list[str]:
        for key, value in own.items():
            trace.get_current_span().set_attribute(key, value)
        return list(RERANKED)

    @cp_observe.agent(name="shop")
    def answer(question: str, version: str) -> str:
        trace.get_current_span().set_attribute("retriever.version", "agent")
        trace.get_current_span().set_attribute("tenant.tier", "gold")
        rerank(question, search(question, version))
        return ANSWER

    answer(QUESTION, "v2")
    own["retriever.version"] = "mine"
    answer(QUESTION, "v1")
    assert processor.force_flush(30_000)
    labelled = sorted((dict(p.attributes)[n.STAGE], dict(p.attributes)["retriever_version"],
                       dict(p.attributes)["tenant_tier"]) for p in otel.metric_points(n.METRIC_SCORE))
    assert labelled == [(n.STAGE_RERANK, "mine", "gold"), (n.STAGE_RERANK, "v2", "gold"),
                        (n.STAGE_RETRIEVAL, "v1", "gold"), (n.STAGE_RETRIEVAL, "v2", "gold")]
    spans = [dict(s.attributes or {}) for s in otel.by_name(n.EVALUATION_SPAN_NAME)]
    assert sorted((s[n.CP_STAGE], s[n.CP_SEGMENT_PREFIX + "retriever_version"]) for s in spans) == [
        (n.STAGE_RERANK, "mine"), (n.STAGE_RERANK, "v2"), (n.STAGE_RETRIEVAL, "v1"), (n.STAGE_RETRIEVAL, "v2")]


def test_the_reranked_retrieval_ranks_between_the_own_span_and_the_enclosing_one() -> None:
    """``resolve``'s order: own span, then the reranked retrieval, then the enclosing span."""
    values = SegmentValues([("v", "v")], 5)
    assert values.resolve({}, {"v": "agent"}, {"v": "retrieval"}) == (("v", "retrieval"),)
    assert values.resolve({"v": "own"}, {"v": "agent"}, {"v": "retrieval"}) == (("v", "own"),)
    assert values.resolve({}, {"v": "agent"}, {"v": " "}) == (("v", "agent"),)
