"""Segments through ``cp-observe serve`` over real OTLP: the same labels as the in-process processor."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from cp_observe import _names as n
from cp_observe.testing import FakeJudge
from tests.segments_support import EXPECTED, SEGMENTS, label_sets, traces
from tests.serve_support import OtlpSink, post, start_service

pytestmark = pytest.mark.usefixtures("serve_state_restored")


@pytest.mark.parametrize("capture_content", [True, False])
def test_serve_labels_the_series_with_the_segments(sink: OtlpSink, cp_observe_judge: FakeJudge,
                                                   capture_content: bool) -> None:
    """Spans posted as OTLP/protobuf are scored with the segment labels the processor gives, capture on or off."""
    body = bytes(encode_spans(traces()).SerializeToString())
    with start_service(sink, cp_observe_judge, segments=SEGMENTS, capture_content=capture_content) as service:
        assert post(f"http://127.0.0.1:{service.port('http')}/v1/traces", body)[0] == 200
        assert service.flush(30)
        assert sink.wait_for(lambda s: len(s.evaluations) >= 4 and len(s.logs) >= 4)
    for metric in (n.METRIC_SCORE_SQUARES, n.METRIC_EVALUATIONS, n.METRIC_VERDICTS):
        assert label_sets(sink.points(metric)) == EXPECTED, metric
    spans = {e.attributes[n.GEN_AI_DATA_SOURCE_ID]: e.attributes for e in sink.evaluations}
    assert spans["agent"][n.CP_SEGMENT_PREFIX + "retriever_version"] == "v2"
    assert spans["root"][n.CP_SEGMENT_PREFIX + "tenant_tier"] == "silver"
    assert {log[n.CP_SEGMENT_PREFIX + "tenant_tier"] for log in sink.logs} == {"gold", "silver", "none"}


def test_serve_cli_takes_the_segment_flags() -> None:
    """``cp-observe serve --segments A --max-segment-values N`` reach the settings; a colliding one exits 2."""
    import argparse

    from cp_observe.serve._cli import add_arguments, main
    from cp_observe.serve._settings import SERVE_FIELDS, ServeSettings

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--segments", SEGMENTS, "--max-segment-values", "7"])
    settings = ServeSettings.resolve({name: getattr(args, name, None) for name in SERVE_FIELDS}, environ={})
    assert settings.segment_labels() == (("retriever.version", "retriever_version"), ("tenant.tier", "tenant_tier"))
    assert settings.max_segment_values == 7
    assert main(["--segments", "outcome", "--http-port", "0", "--grpc-port", "0", "--admin-port", "0"]) == 2
