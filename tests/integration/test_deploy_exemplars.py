"""Live: a real Prometheus with exemplar storage scrapes the demo; its exemplars lead to traces the demo exported.

The demo exports its spans (and metrics) over OTLP/HTTP to a loopback receiver and serves ``/metrics``; Prometheus,
started with ``--enable-feature=exemplar-storage``, negotiates OpenMetrics and stores the exemplars on
``context_precision_score_bucket``. ``/api/v1/query_exemplars`` must return trace and span ids of evaluation
spans the receiver got, and the OTLP metrics carry the same exemplars (the Collector path).
"""

from __future__ import annotations

import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from cp_observe import _names as names
from tests.deploy_support import (
    PROMETHEUS,
    child_env,
    demo_executable,
    free_port,
    http_get_json,
    http_get_text,
    prometheus_label,
    prometheus_server,
    stop_process,
)
from tests.otlp_receiver import OtlpReceiver

DEMO = demo_executable()

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (run scripts/install-system-deps.sh)"),
    pytest.mark.skipif(DEMO is None, reason="`cp-observe demo` not available"),
]

DS = prometheus_label(names.GEN_AI_DATA_SOURCE_ID)


def _exemplars(prom: str) -> list[dict[str, Any]]:
    now = time.time()
    query = urllib.parse.urlencode({"query": "context_precision_score_bucket", "start": now - 600, "end": now + 60})
    body = http_get_json(f"{prom}/api/v1/query_exemplars?{query}")
    assert body["status"] == "success", body
    return [
        {**exemplar, "series": group["seriesLabels"]}
        for group in body["data"]
        for exemplar in group["exemplars"]
    ]


def _evaluation_spans(receiver: OtlpReceiver) -> dict[str, set[str]]:
    """trace id -> span ids of the evaluation spans the demo exported."""
    spans: dict[str, set[str]] = {}
    for span in receiver.spans():
        if span.name == names.EVALUATION_SPAN_NAME:
            spans.setdefault(span.trace_id.hex(), set()).add(span.span_id.hex())
    return spans


def test_prometheus_exemplars_lead_to_exported_evaluation_spans(tmp_path: Path) -> None:
    """Exemplars stored by Prometheus carry the trace and span id of an evaluation span the demo exported."""
    assert DEMO is not None
    metrics_port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "cp-observe-demo", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}
        ],
    }
    log_path = tmp_path / "demo.log"
    with OtlpReceiver() as receiver, prometheus_server(
        tmp_path / "prometheus", config, extra_args=("--enable-feature=exemplar-storage",)
    ) as prom, log_path.open("w") as log:
        command = [DEMO, "demo", "--loop", "--judge", "lexical", "--quiet", "--interval", "0.1",
                   "--metrics-port", str(metrics_port), "--otlp", receiver.endpoint]  # fmt: skip
        demo = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                env=child_env(OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
                                              OTEL_METRIC_EXPORT_INTERVAL="1000", OTEL_BSP_SCHEDULE_DELAY="200"))
        try:
            matched: list[dict[str, Any]] = []
            exemplars: list[dict[str, Any]] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not matched:
                time.sleep(1)
                assert demo.poll() is None, log_path.read_text()[-3000:]
                exemplars = _exemplars(prom)
                exported = _evaluation_spans(receiver)
                matched = [e for e in exemplars
                           if e["labels"].get("span_id") in exported.get(e["labels"].get("trace_id", ""), set())]
            assert matched, (f"no exemplar matched an exported evaluation span; exemplars: {exemplars[:3]}, "
                             f"spans: {len(receiver.spans())}; demo: {log_path.read_text()[-2000:]}")
            exemplar = matched[0]
            assert exemplar["series"][DS] == "demo-bm25"
            assert exemplar["series"]["__name__"] == "context_precision_score_bucket"
            upper = float(exemplar["series"]["le"])
            assert 0.0 <= float(exemplar["value"]) <= upper  # the exemplar sits in its bucket
            # Every stored exemplar is an evaluation span of the demo: none points elsewhere.
            exported = _evaluation_spans(receiver)
            assert all(e["labels"]["trace_id"] in exported for e in exemplars)

            # Plain Prometheus text stays exemplar-free; OpenMetrics carries them.
            plain = http_get_text(f"http://127.0.0.1:{metrics_port}/metrics")
            assert "trace_id=" not in plain
            request = urllib.request.Request(f"http://127.0.0.1:{metrics_port}/metrics",
                                             headers={"Accept": "application/openmetrics-text; version=1.0.0"})
            with urllib.request.urlopen(request, timeout=5) as response:
                assert "# {span_id=" in response.read().decode()

            # The OTLP export (what the Collector receives and its prometheus exporter re-exposes) has them too.
            otlp = {
                (dp_exemplar.trace_id.hex(), dp_exemplar.span_id.hex())
                for metric in receiver.metrics() if metric.name == names.METRIC_SCORE
                for point in metric.histogram.data_points for dp_exemplar in point.exemplars
            }
            assert any(span in exported.get(trace, set()) for trace, span in otlp), otlp
        finally:
            stop_process(demo)
