"""Judge against person: the 2x2 figures against a hand computation, label lines, the match rule, the draw."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cp_observe._errors import LabelError
from cp_observe._judging._agreement import Agreement
from cp_observe._judging._calibration import needs_label
from cp_observe._judging._labels import HumanLabel, label_line, label_position, parse_label_line
from cp_observe._judging._map import average_precision
from cp_observe._judging._ppi import classical_mean, ppi_mean
from cp_observe._stats._proportions import kappa, wilson
from cp_observe.calibrate._calibrate import ALL, calibrate
from cp_observe.calibrate._judged import JudgedRetrieval, JudgeKey
from cp_observe.calibrate._label_files import read_label_file

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


def test_agreement_tpr_tnr_and_kappa_match_a_hand_computation() -> None:
    """A 2x2 table of 20: TP 8, FP 2, FN 3, TN 7; every figure worked by hand below."""
    pairs = [(True, True)] * 8 + [(True, False)] * 2 + [(False, True)] * 3 + [(False, False)] * 7
    table = Agreement.of(pairs)
    assert (table.tp, table.fp, table.fn, table.tn, table.n) == (8, 2, 3, 7, 20)
    assert table.agreement.value == pytest.approx(15 / 20)
    assert table.tpr.value == pytest.approx(8 / 11)
    assert table.tnr.value == pytest.approx(7 / 9)
    # p_o = 0.75; judge says relevant 10/20, person 11/20: p_e = 0.5*0.55 + 0.5*0.45 = 0.5; kappa = 0.25/0.5.
    k, se, low, high = table.kappa()
    assert k == pytest.approx(0.5)
    # Fleiss, Cohen and Everitt (1969), term by term. p_ij: judge i, person j (1 relevant).
    p11, p10, p01, p00 = 8 / 20, 2 / 20, 3 / 20, 7 / 20
    j1, j0, h1, h0 = 0.5, 0.5, 0.55, 0.45
    a = p11 * (1 - (j1 + h1) * 0.5) ** 2 + p00 * (1 - (j0 + h0) * 0.5) ** 2
    b = 0.5 ** 2 * (p10 * (h1 + j0) ** 2 + p01 * (h0 + j1) ** 2)
    c = (0.5 - 0.5 * 0.5) ** 2
    assert se == pytest.approx(math.sqrt((a + b - c) / (20 * 0.5 ** 2)))
    assert (low, high) == pytest.approx((0.5 - 1.959963984540054 * se, 0.5 + 1.959963984540054 * se))


def test_wilson_interval_matches_the_published_value() -> None:
    """Wilson 95 % for 15/20 is [0.5313, 0.8881] (Newcombe 1998, Table I, method 3, rounded)."""
    share = wilson(15, 20)
    assert (round(share.low or 0, 4), round(share.high or 0, 4)) == (0.5313, 0.8881)
    assert wilson(0, 10).low == 0.0 and wilson(10, 10).high == 1.0
    assert wilson(0, 0).value is None


def test_kappa_is_undefined_when_both_raters_give_one_answer() -> None:
    """All relevant by both: p_e = 1, so kappa is None rather than a division by zero."""
    assert kappa(5, 0, 0, 0) == (None, None, None, None)
    assert kappa(0, 0, 0, 0) == (None, None, None, None)


def test_a_label_line_round_trips() -> None:
    """label_line writes what parse_label_line reads, by position and by document id."""
    for label in (HumanLabel(int(TRACE, 16), int(SPAN, 16), True, position=2, reason="yes", annotator="ana"),
                  HumanLabel(int(TRACE, 16), int(SPAN, 16), False, document_id="doc-7")):
        back = parse_label_line(label_line(label), "x:1")
        assert back == HumanLabel(label.trace_id, label.span_id, label.relevant, label.position, label.document_id,
                                  label.reason, label.annotator, "x:1")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{", "not JSON"),
        ("[]", "a label is a JSON object"),
        (json.dumps({"trace_id": TRACE, "span_id": SPAN, "position": 0}), "missing 'relevant'"),
        (json.dumps({"trace_id": TRACE[:-1], "span_id": SPAN, "position": 0, "relevant": True}), "32 hex digits"),
        (json.dumps({"trace_id": "0" * 32, "span_id": SPAN, "position": 0, "relevant": True}), "not all zero"),
        (json.dumps({"trace_id": TRACE, "span_id": "xyz", "position": 0, "relevant": True}), "16 hex digits"),
        (json.dumps({"trace_id": TRACE, "span_id": SPAN, "position": 0, "relevant": "yes"}), "true or false"),
        (json.dumps({"trace_id": TRACE, "span_id": SPAN, "relevant": True}), "exactly one of"),
        (json.dumps({"trace_id": TRACE, "span_id": SPAN, "position": 0, "document_id": "d", "relevant": True}),
         "exactly one of"),
        (json.dumps({"trace_id": TRACE, "span_id": SPAN, "position": -1, "relevant": True}), "integer >= 0"),
        (json.dumps({"trace_id": TRACE, "span_id": SPAN, "position": True, "relevant": True}), "integer >= 0"),
        (json.dumps({"trace_id": TRACE, "span_id": SPAN, "document_id": "", "relevant": True}), "non-empty"),
        (json.dumps({"trace_id": TRACE, "span_id": SPAN, "position": 0, "relevant": True, "who": "x"}),
         "unknown keys ['who']"),
        (json.dumps({"trace_id": TRACE, "span_id": SPAN, "position": 0, "relevant": True, "reason": 3}),
         "reason must be a string"),
    ],
)
def test_a_malformed_label_file_line_is_an_error_naming_file_and_line(tmp_path: Path, line: str,
                                                                      message: str) -> None:
    """Every way a line can be wrong raises LabelError with file:line and what is wrong."""
    good = json.dumps({"trace_id": TRACE, "span_id": SPAN, "position": 0, "relevant": True})
    path = tmp_path / "labels.jsonl"
    path.write_text(f"{good}\n\n{line}\n", encoding="utf-8")
    with pytest.raises(LabelError) as caught:
        read_label_file(path)
    assert str(caught.value).startswith(f"{path}:3: ")
    assert message in str(caught.value)


def test_an_unreadable_label_file_is_an_error_naming_it(tmp_path: Path) -> None:
    """A missing file and a non-UTF-8 file are LabelErrors that name the file."""
    with pytest.raises(LabelError, match=r"missing\.jsonl: cannot read"):
        read_label_file(tmp_path / "missing.jsonl")
    (tmp_path / "latin.jsonl").write_bytes(b"\xff\xfe{}")
    with pytest.raises(LabelError, match=r"latin\.jsonl: not UTF-8"):
        read_label_file(tmp_path / "latin.jsonl")


def test_a_label_names_a_judged_position_by_position_or_document_id() -> None:
    """Position in retrieval order, or the first document with that id; past the judged contexts: None."""
    ids = ("a", "b", "c", "d")
    by_position = HumanLabel(1, 2, True, position=1)
    assert label_position(by_position, 3, ids) == 1
    assert label_position(HumanLabel(1, 2, True, position=3), 3, ids) is None
    assert label_position(HumanLabel(1, 2, True, document_id="c"), 3, ids) == 2
    assert label_position(HumanLabel(1, 2, True, document_id="d"), 3, ids) is None  # recorded, not judged
    assert label_position(HumanLabel(1, 2, True, document_id="zz"), 3, ids) is None


def test_the_calibration_draw_is_uniform_reproducible_and_independent_of_the_trace_sampler() -> None:
    """About rate of many ids are drawn, the same ones every time; 0 and 1 are none and all."""
    ids = [(trace * 7919 + 13, trace * 104729 + 7) for trace in range(1, 20_001)]
    drawn = [needs_label(t, s, 0.1) for t, s in ids]
    assert abs(sum(drawn) / len(ids) - 0.1) < 0.01  # 0.1 ± 4.7 SE
    assert drawn == [needs_label(t, s, 0.1) for t, s in ids]
    assert not any(needs_label(t, s, 0.0) for t, s in ids[:100])
    assert all(needs_label(t, s, 1.0) for t, s in ids[:100])
    # Nested: what 0.05 draws, 0.1 draws too (one hash, one threshold).
    assert all(needs_label(t, s, 0.1) for t, s in ids if needs_label(t, s, 0.05))
    # Independent of trace-id sampling: among traces a 50 % trace-id ratio keeps, still about 10 %.
    from cp_observe._config._sampling import TraceIdRatio

    sampler = TraceIdRatio(0.5)
    kept = [(t, s) for t, s in ids if sampler(t)]
    assert abs(sum(needs_label(t, s, 0.1) for t, s in kept) / len(kept) - 0.1) < 0.015


JUDGE_A = JudgeKey("judge-a", "cp-2", "llm")


def _judged(span: int, verdicts: tuple[bool, ...], source: str = "docs", needs: bool | None = True,
            judge: JudgeKey = JUDGE_A) -> JudgedRetrieval:
    return JudgedRetrieval(trace_id=span * 10, span_id=span, data_source=source, judge=judge, verdicts=verdicts,
                           reasons=tuple(f"judge reason {i}" for i in range(len(verdicts))),
                           document_ids=(*(f"d{span}-{i}" for i in range(len(verdicts))), "extra"),
                           needs_label=needs)


def test_calibrate_matches_labels_counts_apart_and_corrects_map() -> None:
    """Labels matched per span and position or id; unmatched and unseen counted; PPI on the labelled retrievals."""
    retrievals = [_judged(1, (True, False)), _judged(2, (True, True)), _judged(3, (False, True), needs=False),
                  _judged(4, (True, False, False)), _judged(5, (False, False), source="faq")]
    labels = [
        HumanLabel(10, 1, True, position=0), HumanLabel(10, 1, True, document_id="d1-1", reason="it answers"),
        HumanLabel(20, 2, True, position=0), HumanLabel(20, 2, False, position=1),
        HumanLabel(30, 3, False, position=0), HumanLabel(30, 3, True, position=1),
        HumanLabel(40, 4, True, position=0),  # 4 stays partly labelled: not a labelled retrieval
        HumanLabel(10, 1, True, document_id="extra"),  # recorded on the span, never judged: unseen
        HumanLabel(10, 1, True, position=5),  # unseen
        HumanLabel(99, 1, True, position=0),  # right span id, other trace: unmatched
        HumanLabel(10, 77, True, position=0),  # unmatched
    ]
    result = calibrate(retrievals, labels)
    assert (result.labels, result.unmatched, result.unseen) == (11, 2, 2)
    docs = next(g for g in result.groups if g.data_source == "docs")
    # pairs (judge, person): (T,T) (F,T) (T,T) (T,F) (F,F) (T,T) (T,T)
    assert (docs.agreement.tp, docs.agreement.fp, docs.agreement.fn, docs.agreement.tn) == (4, 1, 1, 1)
    assert docs.labelled_retrievals == 3 and docs.retrievals == 4 and docs.labelled_outside_draw == 1
    [top, *_] = docs.disagreements
    assert top.count == 1 and {d.context for d in docs.disagreements} == {"document d1-1", "document d2-1"}
    d11 = next(d for d in docs.disagreements if d.context == "document d1-1")
    assert (d11.judge_reason, d11.person_reason, d11.person_said_relevant) == ("judge reason 1", "it answers", 1)
    y = [average_precision([True, True]), average_precision([True, False]), average_precision([False, True])]
    f = [average_precision([True, False]), average_precision([True, True]), average_precision([False, True])]
    f_rest = [average_precision([True, False, False])]
    assert docs.corrected is not None
    expected = ppi_mean(y, f, f_rest)
    assert docs.corrected["ppi_plus_plus"]["estimate"] == pytest.approx(expected.estimate)
    assert docs.corrected["ppi_plus_plus"]["low"] == pytest.approx(expected.low)
    assert docs.corrected["ppi"]["estimate"] == pytest.approx(ppi_mean(y, f, f_rest, lam=1.0).estimate)
    assert docs.corrected["classical"]["estimate"] == pytest.approx(classical_mean(y).estimate)
    assert docs.judge_map["estimate"] == pytest.approx((sum(f) + sum(f_rest)) / 4)
    faq = next(g for g in result.groups if g.data_source == "faq")
    assert faq.agreement.n == 0 and faq.corrected is None
    overall = next(g for g in result.groups if g.data_source == ALL)
    assert overall.agreement.n == 7 and overall.retrievals == 5
    json.dumps(result.as_dict())  # JSON-ready


def test_each_judge_identity_of_a_span_is_compared_on_its_own() -> None:
    """Two judges scored the same span: one label is compared with each, in its own group."""
    other = JudgeKey("judge-b", "cp-2", "lexical")
    result = calibrate([_judged(1, (True, False)), _judged(1, (False, False), judge=other)],
                       [HumanLabel(10, 1, True, position=0)])
    by_judge = {g.judge.model: g.agreement for g in result.groups if g.data_source == "docs"}
    assert (by_judge["judge-a"].tp, by_judge["judge-b"].fn) == (1, 1)
    assert result.unmatched == result.unseen == 0
