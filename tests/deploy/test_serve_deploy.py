"""The scorer tier's deployment files agree with the service: gateway wiring, Kubernetes manifests, compose override."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cp_observe import _names as n
from cp_observe.serve import ServeSettings
from cp_observe.serve._service import DEFAULT_SERVICE_NAME

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "collectors" / "gateway-loadbalancing.yaml"
K8S = ROOT / "deploy" / "k8s" / "scorer"
COMPOSE = ROOT / "deploy" / "compose.scorer.yml"
DEFAULTS = ServeSettings.resolve({}, environ={})


def _gateway() -> dict[str, Any]:
    return dict(yaml.safe_load(GATEWAY.read_text()))


def _k8s(kind: str, name: str | None = None) -> dict[str, Any]:
    for path in sorted(K8S.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == kind and (name is None or document["metadata"]["name"] == name):
                return dict(document)
    raise AssertionError(f"no {kind} {name or ''} in {K8S}")


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])}


def test_gateway_routes_every_trace_to_one_scorer_by_trace_id() -> None:
    """Both loadbalancing exporters route by traceID, retry and queue at the top level, not in the sub-exporter."""
    config = _gateway()
    for name in ("loadbalancing/scorers", "loadbalancing/store"):
        exporter = config["exporters"][name]
        assert exporter["routing_key"] == "traceID"
        assert set(exporter["resolver"]) <= {"dns", "k8s", "static"} and "dns" in exporter["resolver"]
        assert exporter["resolver"]["dns"]["port"] == "4317"
        assert exporter["retry_on_failure"]["enabled"] is True and exporter["sending_queue"]["enabled"] is True
        otlp = exporter["protocol"]["otlp"]
        assert otlp["sending_queue"]["enabled"] is False and otlp["retry_on_failure"]["enabled"] is False
        assert "endpoint" not in otlp  # the resolver provides the endpoints
    assert "cp-observe-scorer-headless" in config["exporters"]["loadbalancing/scorers"]["resolver"]["dns"]["hostname"]


def test_gateway_pipelines_are_wired_without_loops() -> None:
    """Scores never flow back to the scorers, metrics are not routed by trace id, every component is used."""
    config = _gateway()
    pipelines = config["service"]["pipelines"]
    assert pipelines["traces/score"]["receivers"] == ["otlp"]
    assert pipelines["traces/score"]["exporters"] == ["loadbalancing/scorers"]
    assert "filter/unsampled" in pipelines["traces/score"]["processors"]
    assert "otlp/scores" in pipelines["traces/store"]["receivers"]
    assert pipelines["logs"]["exporters"] == ["loadbalancing/store"]
    assert not any(e.startswith("loadbalancing") for e in pipelines["metrics"]["exporters"])
    for kind in ("receivers", "processors", "exporters"):
        used = {c for p in pipelines.values() for c in p.get(kind, [])}
        assert used == set(config[kind]), kind
    for pipeline in pipelines.values():
        assert pipeline["processors"][0] == "memory_limiter"
    [condition] = config["processors"]["filter/unsampled"]["traces"]["span"]
    assert condition == f'attributes["{n.CP_SAMPLED}"] == false'
    assert config["receivers"]["otlp/scores"]["protocols"]["grpc"]["endpoint"].endswith(":4319")


def test_gateway_batches_fit_the_scorer_queue() -> None:
    """The gateway's largest batch stays below the scorers' queue, so no request is too large to ever accept."""
    batch = _gateway()["processors"]["batch"]
    deployment = _k8s("Deployment", "cp-observe-scorer")
    queue = int(_env(deployment["spec"]["template"]["spec"]["containers"][0])["CP_OBSERVE_QUEUE_SIZE"])
    assert batch["send_batch_max_size"] < queue
    assert batch["send_batch_max_size"] < DEFAULTS.queue_size


def test_k8s_configmap_is_the_gateway_file_verbatim() -> None:
    """The gateway's ConfigMap carries collectors/gateway-loadbalancing.yaml unchanged."""
    data = _k8s("ConfigMap", "cp-observe-otel-lb")["data"]["gateway-loadbalancing.yaml"]
    assert data == GATEWAY.read_text()
    container = _k8s("Deployment", "cp-observe-otel-lb")["spec"]["template"]["spec"]["containers"][0]
    env = _env(container)
    headless = _k8s("Service", "cp-observe-scorer-headless")["metadata"]["name"]
    assert env["SCORER_HOSTNAME"].startswith(headless + ".")
    ports = {p["containerPort"] for p in container["ports"]}
    assert {4317, 4318, 4319} <= ports


def test_scorer_deployment_matches_the_service_defaults() -> None:
    """Ports, probes, env names and the drain timeout agree with ``cp-observe serve``."""
    deployment = _k8s("Deployment", "cp-observe-scorer")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"] == ["serve"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"otlp-grpc": DEFAULTS.grpc_port, "otlp-http": DEFAULTS.http_port, "admin": DEFAULTS.admin_port}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin", "scheme": "HTTPS"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin", "scheme": "HTTPS"}
    env = _env(container)
    for name in env:
        if name.startswith(n.ENV_PREFIX):
            assert name[len(n.ENV_PREFIX):].lower() in ServeSettings.model_fields, name
    assert "secretKeyRef" in env["CP_OBSERVE_JUDGE_API_KEY"]
    assert pod["terminationGracePeriodSeconds"] > float(env["CP_OBSERVE_DRAIN_TIMEOUT_S"])
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"].endswith(":4319")
    assert env["OTEL_SERVICE_NAME"] == DEFAULT_SERVICE_NAME
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(DEFAULTS.admin_port)


def test_headless_service_hpa_and_pdb_select_the_scorers() -> None:
    """The headless Service, the autoscalers and the disruption budget all point at the scorer pods."""
    labels = _k8s("Deployment", "cp-observe-scorer")["spec"]["template"]["metadata"]["labels"]
    service = _k8s("Service", "cp-observe-scorer-headless")["spec"]
    assert service["clusterIP"] == "None" and service["publishNotReadyAddresses"] is False
    assert service["selector"].items() <= labels.items()
    pdb = _k8s("PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"].items() <= labels.items()
    hpa = yaml.safe_load((K8S / "hpa.yaml").read_text())["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "cp-observe-scorer"}
    assert [m["resource"]["name"] for m in hpa["metrics"]] == ["cpu"]
    queue_hpa = yaml.safe_load((K8S / "hpa-queue.yaml").read_text())["spec"]
    [pods_metric] = [m["pods"]["metric"]["name"] for m in queue_hpa["metrics"] if m["type"] == "Pods"]
    assert pods_metric == n.METRIC_QUEUE_DEPTH.replace(".", "_")  # a gauge: no unit or type suffix
    resources = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    assert "hpa.yaml" in resources and "hpa-queue.yaml" not in resources  # optional, swapped in by hand
    assert all((K8S / r).exists() for r in resources)


@pytest.mark.parametrize("path", sorted(K8S.glob("*.yaml")), ids=lambda p: p.name)
def test_every_manifest_is_labelled_and_parses(path: Path) -> None:
    """Every object of the scorer tier parses and carries the part-of label."""
    for document in yaml.safe_load_all(path.read_text()):
        if document and "kind" in document and document["kind"] != "Kustomization":
            assert document["metadata"]["labels"]["app.kubernetes.io/part-of"] == "cp-observe"


def test_compose_override_runs_two_scorers_behind_the_gateway() -> None:
    """Two scorer replicas, the demo in capture-only mode, the agent sending to the load-balancing gateway."""
    compose = yaml.safe_load(COMPOSE.read_text())["services"]
    scorer = compose["scorer"]
    assert scorer["deploy"]["replicas"] == 2
    assert scorer["command"][0] == "serve"
    for name in scorer["environment"]:
        if name.startswith(n.ENV_PREFIX):
            assert name[len(n.ENV_PREFIX):].lower() in ServeSettings.model_fields, name
    assert "ports" not in scorer  # replicas cannot share host ports
    assert compose["demo"]["environment"]["CP_OBSERVE_CAPTURE_ONLY"] == "true"
    assert compose["otel-agent"]["environment"]["OTEL_GATEWAY_ENDPOINT"] == "otel-lb:4317"
    lb = compose["otel-lb"]
    assert lb["environment"]["SCORER_HOSTNAME"] == "scorer"
    assert any(v.startswith("../collectors/gateway-loadbalancing.yaml:") for v in lb["volumes"])
    assert re.search(r":4319$", scorer["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"])
