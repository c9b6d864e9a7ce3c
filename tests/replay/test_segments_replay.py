"""Segments through ``cp-observe replay``: a Collector file of the same traces gives the same labels."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from cp_observe import _names as n
from cp_observe.replay import ReplayOptions, TraceFile, replay
from cp_observe.replay._progress import Progress
from cp_observe.testing import FakeJudge
from tests.replay_support import collector_json_line
from tests.segments_support import EXPECTED, SEGMENTS, label_sets, traces
from tests.serve_support import OtlpSink


def test_replay_labels_the_series_with_the_segments(tmp_path: Path, sink: OtlpSink,
                                                    cp_observe_judge: FakeJudge) -> None:
    """Replayed over OTLP to a real receiver, the series and evaluation spans carry the processor's labels."""
    path = tmp_path / "traces.jsonl"
    path.write_text(collector_json_line(encode_spans(traces())) + "\n", encoding="utf-8")
    options = ReplayOptions(otlp_endpoint=sink.url, segments=SEGMENTS, sample_rate=1.0)
    result = replay([TraceFile(path)], options, judge=cp_observe_judge, progress=Progress(enabled=False))
    assert result.error is None and result.stats["scored"] == 4
    assert sink.wait_for(lambda s: len(s.evaluations) >= 4)
    for metric in (n.METRIC_SCORE_SQUARES, n.METRIC_EVALUATIONS, n.METRIC_VERDICTS):
        assert label_sets(sink.points(metric)) == EXPECTED, metric
    spans = {e.attributes[n.GEN_AI_DATA_SOURCE_ID]: e.attributes for e in sink.evaluations}
    assert spans["own"][n.CP_SEGMENT_PREFIX + "retriever_version"] == "v1"


def test_replay_cli_takes_segments(tmp_path: Path, sink: OtlpSink) -> None:
    """``cp-observe replay --segments`` reaches the settings (and a colliding one is refused with exit 2)."""
    from cp_observe.cli import main

    path = tmp_path / "traces.jsonl"
    path.write_text(collector_json_line(encode_spans(traces())) + "\n", encoding="utf-8")
    assert main(["replay", str(path), "--otlp-endpoint", sink.url, "--segments", "outcome", "-q"]) == 2
    assert main(["replay", str(path), "--otlp-endpoint", sink.url, "--segments", SEGMENTS, "--max-segment-values", "1",
                 "--judge", "lexical", "-q"]) == 0
    assert sink.wait_for(lambda s: len(s.evaluations) >= 4)
    versions = {p.get("retriever_version") for p in sink.points(n.METRIC_EVALUATIONS)}
    assert versions <= {"v1", "v2", n.SEGMENT_NONE, n.SEGMENT_OTHER} and n.SEGMENT_OTHER in versions
