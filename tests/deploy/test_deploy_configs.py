"""Collector pipelines, the compose stack, Kubernetes manifests and Grafana provisioning agree with each other."""

from __future__ import annotations

import copy
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cp_observe import _names as names
from cp_observe._config._settings import Settings
from tests.deploy_support import (
    COLLECTORS,
    COMPOSE_FILE,
    DASHBOARD_FILE,
    DEPLOY,
    K8S_DIR,
    REPO,
    host_port,
    load_yaml,
    load_yaml_all,
    parse_duration,
    pipeline_problems,
    resolve_env,
)

#: OTEL_BSP_SCHEDULE_DELAY's default in the OpenTelemetry SDK specification (milliseconds -> seconds).
BSP_SCHEDULE_DELAY_S = 5.0
#: Answer + turn assembly + queue wait allowed between the retrieval and the judge call (collectors/README.md).
TURN_AND_QUEUE_ALLOWANCE_S = 15.0
JAEGER_OTLP_GRPC_PORT = 4317


def _collector(name: str) -> dict[str, Any]:
    return load_yaml(COLLECTORS / f"{name}.yaml")


def _compose() -> dict[str, Any]:
    return load_yaml(COMPOSE_FILE)


def _service_env(service: str) -> dict[str, str]:
    env = _compose()["services"][service].get("environment", {})
    return {str(k): str(v) for k, v in env.items()}


def _receiver_port(config: dict[str, Any], protocol: str) -> int:
    return host_port(config["receivers"]["otlp"]["protocols"][protocol]["endpoint"])[1]


def _container_ports(service: str) -> set[int]:
    ports = set()
    for spec in _compose()["services"][service].get("ports", []):
        ports.add(int(str(spec).rsplit(":", 1)[-1].split("/")[0]))
    return ports


# --- collectors -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["agent", "gateway"])
def test_collector_components_are_defined_and_used(name: str) -> None:
    """Every component a pipeline names is defined, and every defined component is used."""
    assert pipeline_problems(_collector(name)) == []


def test_structural_check_catches_broken_pipelines() -> None:
    """The structural check reports an undefined processor and an unused exporter."""
    config = copy.deepcopy(_collector("gateway"))
    config["service"]["pipelines"]["traces"]["processors"].append("filter/missing")
    config["exporters"]["otlp_grpc/unused"] = {"endpoint": "x:4317"}
    problems = pipeline_problems(config)
    assert any("filter/missing is not defined" in p for p in problems)
    assert any("otlp_grpc/unused is defined but no pipeline uses it" in p for p in problems)


@pytest.mark.parametrize("name", ["agent", "gateway"])
def test_memory_limiter_first_and_batch_last(name: str) -> None:
    """memory_limiter is the first processor and batch the last in every pipeline."""
    for pipeline_id, pipeline in _collector(name)["service"]["pipelines"].items():
        assert pipeline["processors"][0] == "memory_limiter", pipeline_id
        assert pipeline["processors"][-1] == "batch", pipeline_id


def test_agent_forwards_everything_to_the_gateway() -> None:
    """The agent samples nothing and exports every signal to the gateway's OTLP/gRPC receiver."""
    agent = _collector("agent")
    assert "tail_sampling" not in agent["processors"]
    for pipeline in agent["service"]["pipelines"].values():
        assert pipeline["exporters"] == ["otlp_grpc/gateway"]
    host, port = host_port(resolve_env(agent["exporters"]["otlp_grpc/gateway"]["endpoint"], {}))
    assert (host, port) == ("otel-gateway", _receiver_port(_collector("gateway"), "grpc"))


def test_tail_sampling_keeps_sampled_and_failed_traces() -> None:
    """The gateway keeps traces with context_precision.sampled=true and with a failed evaluation label."""
    gateway = _collector("gateway")
    policies = {p["type"]: p for p in gateway["processors"]["tail_sampling"]["policies"]}
    assert policies["boolean_attribute"]["boolean_attribute"] == {"key": names.CP_SAMPLED, "value": True}
    assert policies["string_attribute"]["string_attribute"] == {
        "key": names.GEN_AI_EVALUATION_SCORE_LABEL,
        "values": [names.LABEL_FAIL],
    }
    traces = gateway["service"]["pipelines"]["traces"]["processors"]
    assert traces.index("tail_sampling") < traces.index("batch")


def test_decision_wait_covers_judge_latency_and_export_delay() -> None:
    """decision_wait exceeds the judge timeout + SDK batch delay + agent batch timeout + turn allowance."""
    tail = _collector("gateway")["processors"]["tail_sampling"]
    judge_timeout = Settings.model_fields["judge_timeout_s"].default
    agent_batch = parse_duration(_collector("agent")["processors"]["batch"]["timeout"])
    budget = judge_timeout + BSP_SCHEDULE_DELAY_S + agent_batch + TURN_AND_QUEUE_ALLOWANCE_S
    assert parse_duration(tail["decision_wait"]) > budget
    assert tail["decision_cache"]["sampled_cache_size"] > 0
    assert f"decision_wait: {tail['decision_wait']}" in (COLLECTORS / "gateway.yaml").read_text(encoding="utf-8")
    assert f"`decision_wait: {tail['decision_wait']}`" in (COLLECTORS / "README.md").read_text(encoding="utf-8")


def test_prometheus_exporter_translates_names_with_suffixes() -> None:
    """The prometheus exporter escapes dots and adds unit/type suffixes (names as the library documents)."""
    exporter = _collector("gateway")["exporters"]["prometheus"]
    assert exporter["translation_strategy"] == "UnderscoreEscapingWithSuffixes"
    assert "add_metric_suffixes" not in exporter
    assert "resource_to_telemetry_conversion" not in exporter


# --- compose ----------------------------------------------------------------------------------------------------------


def test_compose_has_the_whole_stack() -> None:
    """The compose file brings up the demo, both collectors, Jaeger, Prometheus, Alertmanager and Grafana."""
    services = set(_compose()["services"])
    assert services == {"demo", "otel-agent", "otel-gateway", "jaeger", "prometheus", "alertmanager", "grafana"}


def test_compose_images_are_pinned() -> None:
    """Every image has an explicit version tag."""
    for name, service in _compose()["services"].items():
        image = service["image"]
        tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
        assert tag and tag != "latest", (name, image)


def test_compose_mounts_exist() -> None:
    """Every bind-mounted file or directory exists, relative to deploy/."""
    mounts = 0
    for name, service in _compose()["services"].items():
        for volume in service.get("volumes", []):
            source, target = str(volume).split(":")[:2]
            if source.startswith((".", "/")):
                mounts += 1
                assert (DEPLOY / source).resolve().exists(), (name, source)
                assert target.startswith("/")
    assert mounts >= 6


def test_compose_collectors_load_their_mounted_config() -> None:
    """Each collector's --config points at the file mounted from collectors/."""
    for service, config in (("otel-agent", "agent.yaml"), ("otel-gateway", "gateway.yaml")):
        spec = _compose()["services"][service]
        (flag,) = [a for a in spec["command"] if a.startswith("--config=")]
        mounted = {v.split(":")[1]: v.split(":")[0] for v in spec["volumes"]}
        assert mounted[flag.removeprefix("--config=")] == f"../collectors/{config}"


def test_demo_image_builds_from_the_repository() -> None:
    """The demo build context and Dockerfile exist, and every COPY source is inside the context and not ignored."""
    build = _compose()["services"]["demo"]["build"]
    context = (DEPLOY / build["context"]).resolve()
    dockerfile = context / build["dockerfile"]
    assert context == REPO and dockerfile.exists()
    ignore = Path(f"{dockerfile}.dockerignore").read_text(encoding="utf-8")
    allowed = {line[1:].rstrip("/") for line in ignore.splitlines() if line.startswith("!")}
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        if line.startswith("COPY "):
            for source in shlex.split(line)[1:-1]:
                assert (context / source).exists(), source
                assert source.rstrip("/") in allowed, source


def test_demo_runs_in_loop_mode_into_the_agent() -> None:
    """The demo loops with the offline judge and exports OTLP to the agent's gRPC receiver."""
    command = _compose()["services"]["demo"]["command"]
    assert command[:2] == ["demo", "--loop"]
    assert command[command.index("--judge") + 1] == "lexical"
    # cp_observe.configure() picks the OTLP exporter by OTEL_EXPORTER_OTLP_PROTOCOL (default http/protobuf).
    protocol = _service_env("demo").get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    host, port = host_port(command[command.index("--otlp") + 1])
    receiver = "grpc" if protocol == "grpc" else "http"
    assert (host, port) == ("otel-agent", _receiver_port(_collector("agent"), receiver))


def test_compose_ports_match_the_collector_configs() -> None:
    """Published agent ports are its receivers; the gateway's endpoints resolve to compose services."""
    agent, gateway = _collector("agent"), _collector("gateway")
    assert _container_ports("otel-agent") == {_receiver_port(agent, "grpc"), _receiver_port(agent, "http")}
    host, port = host_port(resolve_env(agent["exporters"]["otlp_grpc/gateway"]["endpoint"], _service_env("otel-agent")))
    assert host in _compose()["services"] and port == _receiver_port(gateway, "grpc")
    env = _service_env("otel-gateway")
    host, port = host_port(resolve_env(gateway["exporters"]["otlp_grpc/traces"]["endpoint"], env))
    assert (host, port) == ("jaeger", JAEGER_OTLP_GRPC_PORT)


def test_prometheus_scrapes_the_gateway_exporter_and_alerts_alertmanager() -> None:
    """prometheus.yml's targets are the gateway's exporter port and Alertmanager's compose port."""
    prom = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    exporter_port = host_port(_collector("gateway")["exporters"]["prometheus"]["endpoint"])[1]
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "otel-gateway"]
    assert job["honor_labels"] is True
    assert job["static_configs"][0]["targets"] == [f"otel-gateway:{exporter_port}"]
    (target,) = prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    host, port = host_port(target)
    assert host == "alertmanager" and port in _container_ports("alertmanager")
    assert _compose()["services"]["prometheus"]["volumes"][0] == "./prometheus:/etc/prometheus:ro"


def test_grafana_provisioning_matches_the_stack() -> None:
    """Data source URLs point at compose services; the dashboard provider reads the mounted dashboards folder."""
    provisioning = DEPLOY / "grafana" / "provisioning"
    sources = {d["type"]: d for d in load_yaml(provisioning / "datasources" / "datasources.yaml")["datasources"]}
    host, port = host_port(sources["prometheus"]["url"])
    assert host == "prometheus" and port in _container_ports("prometheus")
    host, port = host_port(sources["jaeger"]["url"])
    assert host == "jaeger" and port in _container_ports("jaeger")
    scrape = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")["global"]["scrape_interval"]
    assert sources["prometheus"]["jsonData"]["timeInterval"] == scrape
    (provider,) = load_yaml(provisioning / "dashboards" / "dashboards.yaml")["providers"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in _compose()["services"]["grafana"]["volumes"]}
    assert (DEPLOY / mounts[provider["options"]["path"]]).resolve() == DASHBOARD_FILE.parent


def test_readme_documents_every_published_port_and_the_command() -> None:
    """deploy/README.md names the one command and every port the stack publishes."""
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    assert "docker compose -f deploy/docker-compose.yml up" in readme
    for name, service in _compose()["services"].items():
        for spec in service.get("ports", []):
            host_side = str(spec).split(":")[0]
            assert re.search(rf"\|\s*{host_side}\s*\|\s*`{name}`", readme), (name, host_side)


def test_alertmanager_routes_reference_defined_receivers() -> None:
    """Every route's receiver exists, grouping keeps data sources apart, inhibitions name shipped alerts."""
    config = load_yaml(DEPLOY / "alertmanager" / "alertmanager.yml")
    receivers = {r["name"] for r in config["receivers"]}
    routes = [config["route"], *config["route"].get("routes", [])]
    assert {r["receiver"] for r in routes} <= receivers
    assert "gen_ai_data_source_id" in config["route"]["group_by"]
    for rule in config.get("inhibit_rules", []):
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            assert re.fullmatch(r'alertname = "ContextPrecision\w+"', matcher)


AMTOOL = shutil.which("amtool")
requires_amtool = pytest.mark.skipif(
    AMTOOL is None, reason="amtool not installed (scripts/install-system-deps.sh installs prometheus-alertmanager)"
)


@pytest.mark.prometheus
@requires_amtool
def test_amtool_accepts_the_alertmanager_config() -> None:
    """amtool check-config accepts deploy/alertmanager/alertmanager.yml."""
    assert AMTOOL is not None
    proc = subprocess.run([AMTOOL, "check-config", str(DEPLOY / "alertmanager" / "alertmanager.yml")],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        ({"alertname": "ContextPrecisionMAPDrop", "severity": "critical", "gen_ai_data_source_id": "faq"},
         "context-precision-page"),
        ({"alertname": "ContextPrecisionJudgeFailing", "severity": "warning", "gen_ai_data_source_id": "faq"},
         "default"),
    ],
)  # fmt: skip
@pytest.mark.prometheus
@requires_amtool
def test_alertmanager_routes_map_drop_to_the_page_receiver(labels: dict[str, str], receiver: str) -> None:
    """The critical MAP-drop alert reaches the paging receiver; warnings go to the default one."""
    assert AMTOOL is not None
    config = DEPLOY / "alertmanager" / "alertmanager.yml"
    args = [f"{k}={v}" for k, v in labels.items()]
    proc = subprocess.run([AMTOOL, "config", "routes", "test", f"--config.file={config}", *args],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.stdout.strip() == receiver, proc.stdout + proc.stderr


# --- Kubernetes -------------------------------------------------------------------------------------------------------


def _k8s(kind: str, name: str) -> dict[str, Any]:
    for path in sorted(K8S_DIR.glob("*.yaml")):
        for doc in load_yaml_all(path):
            if doc.get("kind") == kind and doc["metadata"]["name"] == name:
                return dict(doc)
    raise LookupError(f"{kind}/{name}")


def test_k8s_manifests_parse_and_kustomization_lists_them() -> None:
    """Every manifest parses, and kustomization.yaml lists every manifest file."""
    kustomization = load_yaml(K8S_DIR / "kustomization.yaml")
    manifests = sorted(p.name for p in K8S_DIR.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == manifests
    for name in manifests:
        for doc in load_yaml_all(K8S_DIR / name):
            assert {"apiVersion", "kind", "metadata"} <= set(doc)


def test_k8s_configmap_is_the_gateway_config_verbatim() -> None:
    """The gateway ConfigMap holds collectors/gateway.yaml byte for byte."""
    data = _k8s("ConfigMap", "cp-observe-otel-gateway")["data"]["gateway.yaml"]
    assert data == (COLLECTORS / "gateway.yaml").read_text(encoding="utf-8")


def test_k8s_gateway_ports_and_config_path() -> None:
    """The Deployment loads the mounted config and exposes the receiver, exporter and health ports."""
    gateway = _collector("gateway")
    deployment = _k8s("Deployment", "cp-observe-otel-gateway")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (mount,) = container["volumeMounts"]
    assert container["args"] == [f"--config={mount['mountPath']}"]
    assert mount["subPath"] == "gateway.yaml"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["otlp-grpc"] == _receiver_port(gateway, "grpc")
    assert ports["otlp-http"] == _receiver_port(gateway, "http")
    assert ports["prom-metrics"] == host_port(gateway["exporters"]["prometheus"]["endpoint"])[1]
    assert ports["health"] == host_port(gateway["extensions"]["health_check"]["endpoint"])[1]
    pod_annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert int(pod_annotations["prometheus.io/port"]) == ports["prom-metrics"]
    assert deployment["spec"]["replicas"] == 1  # tail sampling needs whole traces in one process
    service = _k8s("Service", "cp-observe-otel-gateway")["spec"]
    for port in service["ports"]:
        assert ports[port["targetPort"]] == port["port"]
    assert container["image"] == _compose()["services"]["otel-gateway"]["image"]


def test_k8s_app_sets_the_hook_settings_as_environment() -> None:
    """The app Deployment configures the hook and the SDK by environment, the judge key from a Secret."""
    (container,) = _k8s("Deployment", "rag-app")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    required = {f"{names.ENV_PREFIX}{s}" for s in ("SAMPLE_RATE", "JUDGE", "CAPTURE_CONTENT")}
    required |= {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"}
    assert required <= set(env)
    for name in env:
        if name.startswith(names.ENV_PREFIX):
            assert name.removeprefix(names.ENV_PREFIX).lower() in Settings.model_fields, name
    for name, item in env.items():
        if re.search(r"KEY|TOKEN|SECRET|PASSWORD", name) and name != names.ENV_LITELLM_LOCAL_COST_MAP:
            assert "value" not in item and "secretKeyRef" in item["valueFrom"], name
    assert any("secretKeyRef" in e.get("valueFrom", {}) for e in env.values())
    host, port = host_port(env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"])
    service = _k8s("Service", "cp-observe-otel-gateway")
    assert host == service["metadata"]["name"]
    assert port in {p["port"] for p in service["spec"]["ports"] if p["name"] == "otlp-grpc"}
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"]["value"] == "grpc"


def test_no_secret_values_in_manifests() -> None:
    """No manifest ships a Secret object or an inline API key."""
    for path in K8S_DIR.glob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        assert "kind: Secret" not in text, path
        assert not re.search(r"sk-[A-Za-z0-9]{8,}", text), path


# --- system dependencies ----------------------------------------------------------------------------------------------


def test_install_script_is_executable_valid_bash() -> None:
    """scripts/install-system-deps.sh is executable, parses, and installs Debian's prometheus non-interactively."""
    script = REPO / "scripts" / "install-system-deps.sh"
    assert os.access(script, os.X_OK)
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    text = script.read_text(encoding="utf-8")
    assert "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus" in text
    assert "set -euo pipefail" in text


# --- exemplars --------------------------------------------------------------------------------------------------------


def test_exemplars_survive_the_pipeline_to_grafana() -> None:
    """Gateway exposes OpenMetrics, Prometheus stores exemplars, Grafana maps their trace_id to the trace store."""
    assert _collector("gateway")["exporters"]["prometheus"]["enable_open_metrics"] is True
    for name in ("agent", "gateway"):
        metrics = _collector(name)["service"]["pipelines"]["metrics"]
        assert set(metrics["processors"]) <= {"memory_limiter", "batch"}, (name, metrics)  # nothing drops them
    assert "--enable-feature=exemplar-storage" in _compose()["services"]["prometheus"]["command"]
    sources = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "datasources.yaml")["datasources"]
    uids = {s["uid"] for s in sources}
    (prometheus,) = [s for s in sources if s["type"] == "prometheus"]
    (destination,) = prometheus["jsonData"]["exemplarTraceIdDestinations"]
    assert destination["name"] == "trace_id" and destination["datasourceUid"] in uids - {prometheus["uid"]}
