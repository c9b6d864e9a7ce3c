"""``cp-observe calibrate`` end to end on a demo run's export, the test kit's labels, ``calibration_rate``,
``report --labels``, ``--push`` to a real OTLP receiver, and the CronJob that runs it."""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

import cp_observe
from cp_observe import _names as n
from cp_observe._cli._calibrate import add_calibrate_arguments
from cp_observe._judging._calibration import needs_label
from cp_observe._judging._labels import HumanLabel, label_line
from cp_observe._judging._map import average_precision
from cp_observe._judging._ppi import ppi_mean
from cp_observe.testing import EvaluationCapture, FakeJudge, HumanLabels
from tests.chromium_support import CHROMIUM, render
from tests.deploy_support import load_yaml_all
from tests.otlp_receiver import OtlpReceiver
from tests.replay_support import Exported, export_demo

CLI = [sys.executable, "-m", "cp_observe.cli"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """One demo run (12 turns, every trace scored, lexical judge) as a Collector file."""
    return export_demo(tmp_path_factory.mktemp("calibrate"), 1.0, turns=12)


def _labels(exported: Exported, path: Path) -> tuple[list[tuple[bool, bool]], list[tuple[float, float]], list[float]]:
    """People label every other retrieval fully, flipping 1 verdict in 4 (seeded); plus one label never judged.

    Returns the (judge, person) pairs, the labelled (y, f) and the unlabelled f, computed here by hand.
    """
    rng = random.Random(24)
    pairs: list[tuple[bool, bool]] = []
    labelled: list[tuple[float, float]] = []
    unlabelled: list[float] = []
    lines = []
    for i, (span, (trace, _ap, verdicts)) in enumerate(sorted(exported.live.items())):
        if i % 2:
            unlabelled.append(average_precision(verdicts))
            continue
        human = [v if rng.random() < 0.75 else not v for v in verdicts]
        for position, (verdict, person) in enumerate(zip(verdicts, human, strict=True)):
            pairs.append((verdict, person))
            lines.append(label_line(HumanLabel(trace, span, person, position=position,
                                               reason="the person's reason" if verdict != person else None)))
        labelled.append((average_precision(human), average_precision(verdicts)))
    trace, span = next((t, s) for s, (t, _, _) in sorted(exported.live.items()))
    lines.append(label_line(HumanLabel(trace, span, True, position=49)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return pairs, labelled, unlabelled


def test_calibrate_reports_agreement_and_corrected_map_equal_to_a_hand_computation(exported: Exported,
                                                                                   tmp_path: Path) -> None:
    """The JSON figures equal the table and the PPI estimate computed from the same labels and verdicts here."""
    labels = tmp_path / "labels.jsonl"
    pairs, labelled, unlabelled = _labels(exported, labels)
    out = tmp_path / "figures.json"
    done = subprocess.run([*CLI, "calibrate", str(exported.jsonl), "--labels", str(labels), "--json", str(out)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert figures["labels"] == len(pairs) + 1
    assert figures["counted_apart"]["unseen"] == 1 and figures["counted_apart"]["unmatched"] == 0
    [group] = [g for g in figures["groups"] if g["data_source"] != "all data sources"]
    tp = sum(1 for j, h in pairs if j and h)
    tn = sum(1 for j, h in pairs if not j and not h)
    assert group["table"] == {"tp": tp, "fp": sum(1 for j, h in pairs if j and not h),
                              "fn": sum(1 for j, h in pairs if not j and h), "tn": tn}
    assert group["agreement"]["value"] == pytest.approx((tp + tn) / len(pairs))
    assert group["judge"]["model"] == "lexical" and group["judge"]["kind"] == "lexical"
    assert group["labelled_retrievals"] == len(labelled) and group["retrievals"] == len(exported.live)
    expected = ppi_mean([y for y, _ in labelled], [f for _, f in labelled], unlabelled)
    assert group["corrected_map"]["ppi_plus_plus"]["estimate"] == pytest.approx(expected.estimate)
    assert group["corrected_map"]["ppi_plus_plus"]["high"] == pytest.approx(expected.high)
    assert "agreement" in done.stdout and "PPI++" in done.stdout
    assert any(d["person_reason"] == "the person's reason" for d in group["disagreements"])


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed")
def test_the_calibrate_page_renders_in_chromium_without_console_errors(exported: Exported, tmp_path: Path) -> None:
    """One self-contained HTML page; Chromium renders one chart per group and logs nothing but its own line."""
    labels = tmp_path / "labels.jsonl"
    _labels(exported, labels)
    page = tmp_path / "calibrate.html"
    done = subprocess.run([*CLI, "calibrate", str(exported.jsonl), "--labels", str(labels), "-o", str(page)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text and "uniform random subsample" in text
    render(page, tmp_path, dom=False).assert_clean("cp-observe calibrate: 2 groups")


def test_calibrate_replays_the_inputs_through_another_judge(exported: Exported, tmp_path: Path) -> None:
    """--judge scores the stored retrievals again (an LLM judge over loopback HTTP) and calibrates those verdicts."""
    from cp_observe.testing import JudgeServer

    labels = tmp_path / "labels.jsonl"
    pairs, _, _ = _labels(exported, labels)
    out = tmp_path / "figures.json"
    env = {"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "CP_OBSERVE_JUDGE_API_KEY": "sk-test-0"}
    with JudgeServer() as judge:
        done = subprocess.run([*CLI, "calibrate", str(exported.jsonl), "--labels", str(labels), "--json", str(out),
                               "--judge", "openai/judge-test", "--judge-api-base", judge.url],
                              capture_output=True, text=True, timeout=300, check=False, env=env)
        calls = len(judge.requests)
    assert done.returncode == 0, done.stderr
    assert calls >= len(exported.live)
    figures = json.loads(out.read_text(encoding="utf-8"))
    models = {g["judge"]["model"] for g in figures["groups"]}
    assert models in ({"judge-test"}, {"openai/judge-test"}), models
    [group] = [g for g in figures["groups"] if g["data_source"] != "all data sources"]
    assert group["labels"] == len(pairs) and group["retrievals"] == len(exported.live)


def test_report_with_labels_shows_the_corrected_map(exported: Exported, tmp_path: Path) -> None:
    """``report --labels`` adds the judge-only and PPI/PPI++ MAP section and prints the same figures."""
    labels = tmp_path / "labels.jsonl"
    _labels(exported, labels)
    page = tmp_path / "report.html"
    done = subprocess.run([*CLI, "report", str(exported.jsonl), "--labels", str(labels), "-o", str(page)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    html = page.read_text(encoding="utf-8")
    assert "MAP: judge only and corrected with the labels" in html and "PPI++" in html
    assert "PPI++" in done.stdout


def test_a_bad_label_file_stops_with_exit_2_naming_the_line(exported: Exported, tmp_path: Path) -> None:
    """A malformed label is exit status 2 and a message with file:line; nothing is computed from it."""
    labels = tmp_path / "bad.jsonl"
    labels.write_text('{"trace_id": "00", "span_id": "1", "position": 0, "relevant": true}\n', encoding="utf-8")
    for command in ("calibrate", "report"):
        done = subprocess.run([*CLI, command, str(exported.jsonl), "--labels", str(labels), "-o",
                               str(tmp_path / "x.html")], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 2, done.stderr
        assert f"{labels}:1: trace_id must be 32 hex digits" in done.stderr


def test_calibrate_needs_verdicts_and_labels() -> None:
    """Without an input or without labels it says what to give, exit status 2."""
    done = subprocess.run([*CLI, "calibrate", "--labels", "x.jsonl"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2 and "no verdicts" in done.stderr
    done = subprocess.run([*CLI, "calibrate", "some.jsonl"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "no labels" in done.stderr
    done = subprocess.run([*CLI, "calibrate", "missing.jsonl", "--labels", "x.jsonl"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr
    assert "missing.jsonl" in done.stderr or "x.jsonl" in done.stderr


def test_push_sends_the_agreement_gauges_over_otlp(exported: Exported, tmp_path: Path) -> None:
    """``--push`` exports agreement and its label count, labelled by data source and judge, to an OTLP receiver."""
    labels = tmp_path / "labels.jsonl"
    pairs, _, _ = _labels(exported, labels)
    with OtlpReceiver() as receiver:
        env = {"PATH": "/usr/bin:/bin", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
        done = subprocess.run([*CLI, "calibrate", str(exported.jsonl), "--labels", str(labels), "--push",
                               "--otlp-endpoint", receiver.endpoint], capture_output=True, text=True, timeout=120,
                              check=False, env=env)
        assert done.returncode == 0, done.stderr
        requests = receiver.messages("metrics")
    points: dict[str, list[tuple[float, dict[str, str]]]] = {}
    for request in requests:
        assert isinstance(request, ExportMetricsServiceRequest)
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.gauge.data_points:
                        value = point.as_double if point.HasField("as_double") else point.as_int
                        attributes = {kv.key: kv.value.string_value for kv in point.attributes}
                        points.setdefault(metric.name, []).append((value, attributes))
    agree = sum(1 for j, h in pairs if j == h) / len(pairs)
    [(share, attributes)] = points[n.METRIC_JUDGE_AGREEMENT]
    assert share == pytest.approx(agree)
    assert attributes[n.GEN_AI_DATA_SOURCE_ID] == "demo-bm25" and attributes[n.CP_JUDGE_MODEL] == "lexical"
    assert points[n.METRIC_JUDGE_AGREEMENT_LABELS] == [(len(pairs), attributes)]


def test_push_without_an_endpoint_is_a_clear_error(exported: Exported, tmp_path: Path) -> None:
    """No --otlp-endpoint and no OTEL_EXPORTER_OTLP_ENDPOINT: exit 2, saying what to give."""
    labels = tmp_path / "labels.jsonl"
    _labels(exported, labels)
    done = subprocess.run([*CLI, "calibrate", str(exported.jsonl), "--labels", str(labels), "--push"],
                          capture_output=True, text=True, timeout=120, check=False, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "--push needs --otlp-endpoint" in done.stderr


def test_push_to_an_endpoint_that_does_not_take_them_fails(exported: Exported, tmp_path: Path) -> None:
    """Nothing listens on the endpoint: exit status 1 and a message, not 'pushed'."""
    from tests.phoenix_support import free_port

    labels = tmp_path / "labels.jsonl"
    _labels(exported, labels)
    env = {"PATH": "/usr/bin:/bin", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TIMEOUT": "2"}
    done = subprocess.run([*CLI, "calibrate", str(exported.jsonl), "--labels", str(labels), "--push",
                           "--otlp-endpoint", f"http://127.0.0.1:{free_port()}"], capture_output=True, text=True,
                          timeout=120, check=False, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "did not take the agreement gauges" in done.stderr and "pushed" not in done.stdout


def test_the_cronjob_runs_a_valid_calibrate_command_that_pushes() -> None:
    """The CronJob's args parse as ``cp-observe calibrate`` options, push, and name the gateway as endpoint."""
    [job] = load_yaml_all(ROOT / "deploy" / "k8s" / "calibrate-cronjob.yaml")
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "CronJob"
    assert job["metadata"]["labels"]["app.kubernetes.io/part-of"] == "cp-observe"
    assert len(job["spec"]["schedule"].split()) == 5 and job["spec"]["concurrencyPolicy"] == "Forbid"
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] in {"OnFailure", "Never"} and pod["securityContext"]["runAsNonRoot"] is True
    [container] = pod["containers"]
    assert container["args"][0] == "calibrate"
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_calibrate_arguments(parser)
    args = parser.parse_args(container["args"][1:])
    assert args.push and args.phoenix and args.project
    env = {e["name"]: e for e in container["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"].startswith("http://cp-observe-otel-gateway:")
    assert "value" not in env["CP_OBSERVE_PHOENIX_API_KEY"]  # a Secret, never written in the manifest
    kustomization = load_yaml_all(ROOT / "deploy" / "k8s" / "kustomization.yaml")[0]
    assert "calibrate-cronjob.yaml" in kustomization["resources"]


@cp_observe.retriever
def _search(query: str) -> list[str]:
    return ["The refund window is thirty days.", "Shipping is free over fifty euros.", "Refunds go to the card."]


def test_the_test_kit_supplies_labels_and_reads_agreement(tmp_path: Path) -> None:
    """HumanLabels against EvaluationCapture: the table by hand, labels counted apart, and a file calibrate reads."""
    with EvaluationCapture(FakeJudge()) as capture:
        _search("what is the refund window?")
        [evaluation] = capture.evaluations()
        spans = capture.spans()
    labels = HumanLabels()
    verdicts = evaluation.verdicts
    labels.add(evaluation, position=0, relevant=True)
    labels.add(evaluation, position=1, relevant=not verdicts[1])
    labels.add(evaluation, position=2, relevant=verdicts[2], reason="mentions refunds")
    labels.add(evaluation, position=7, relevant=True)  # the judge saw three
    labels.add_ids(evaluation.trace_id, 12345, position=0, relevant=True)  # no such evaluation
    result = labels.agreement([evaluation])
    assert (result.table.n, result.unseen, result.unmatched) == (3, 1, 1)
    assert result.table.agreement.successes == (verdicts[0] is True) + 0 + 1
    with pytest.raises(ValueError, match="position"):
        labels.add(evaluation, position=-1, relevant=True)
    # The same labels, written as a file, are what calibrate reads from an export of these spans.
    from cp_observe.replay import JsonLinesSpanExporter

    export = tmp_path / "spans.jsonl"
    exporter = JsonLinesSpanExporter(export)
    exporter.export(spans)
    exporter.shutdown()
    path = labels.write(tmp_path / "labels.jsonl")
    out = tmp_path / "figures.json"
    done = subprocess.run([*CLI, "calibrate", str(export), "--labels", str(path), "--json", str(out)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert figures["counted_apart"]["unseen"] == 1 and figures["counted_apart"]["unmatched"] == 1
    assert figures["groups"][0]["labels"] == 3
    assert figures["groups"][0]["agreement"]["successes"] == result.table.agreement.successes


def test_calibration_rate_marks_the_drawn_share_needs_label() -> None:
    """With calibration_rate, exactly the retrievals the draw picks carry needs_label; the sink record says so."""
    with EvaluationCapture(FakeJudge(), calibration_rate=0.5) as capture:
        for i in range(40):
            _search(f"refund question {i}")
        records = capture.evaluations()
        spans = [s for s in capture.spans() if s.name == n.EVALUATION_SPAN_NAME]
    assert len(records) == len(spans) == 40
    drawn = {(r.trace_id, r.span_id) for r in records if needs_label(r.trace_id, r.span_id, 0.5)}
    assert 5 < len(drawn) < 35
    assert {(r.trace_id, r.span_id) for r in records if r.needs_label} == drawn
    marked = {(s.context.trace_id, s.parent.span_id) for s in spans
              if s.parent is not None and s.context is not None and (s.attributes or {}).get(n.CP_NEEDS_LABEL)}
    assert marked == drawn
    with EvaluationCapture(FakeJudge()) as capture:
        _search("refund question")
        assert not any(n.CP_NEEDS_LABEL in (s.attributes or {}) for s in capture.spans())
        assert not capture.evaluations()[0].needs_label
