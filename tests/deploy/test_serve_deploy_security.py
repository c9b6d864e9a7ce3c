"""The scorer tier's deployment files are secured: TLS and a bearer token from Secrets, all interfaces on purpose."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cp_observe.serve import ServeSettings
from cp_observe.testing import FakeJudge
from tests.serve_support import OtlpSink, retrieval_request, start_service

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "collectors" / "gateway-loadbalancing.yaml"
K8S = ROOT / "deploy" / "k8s" / "scorer"
COMPOSE = ROOT / "deploy" / "compose.scorer.yml"


#: Each test restores the process-wide runtime a service installs (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("serve_state_restored")


def _k8s(kind: str, name: str) -> dict[str, Any]:
    for path in sorted(K8S.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == kind and document["metadata"]["name"] == name:
                return dict(document)
    raise AssertionError(f"no {kind} {name}")


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])}


def _mounted(pod: dict[str, Any], container: dict[str, Any], path: str) -> dict[str, Any]:
    """The volume whose mount holds ``path`` (a file named by a setting)."""
    for mount in container.get("volumeMounts", []):
        if path.startswith(mount["mountPath"].rstrip("/") + "/") and "subPath" not in mount:
            return next(v for v in pod["volumes"] if v["name"] == mount["name"])
    raise AssertionError(f"{path} is not under a mounted volume")


def test_gateway_sends_tls_and_the_token_to_the_scorers() -> None:
    """loadbalancing/scorers verifies the scorers' certificate and authenticates with bearertokenauth from a file."""
    config = yaml.safe_load(GATEWAY.read_text())
    otlp = config["exporters"]["loadbalancing/scorers"]["protocol"]["otlp"]
    assert "insecure" not in otlp["tls"] and "insecure_skip_verify" not in otlp["tls"]
    assert "ca_file" in otlp["tls"] and "server_name_override" in otlp["tls"]
    authenticator = otlp["auth"]["authenticator"]
    extension = config["extensions"][authenticator]
    assert authenticator.split("/")[0] == "bearertokenauth" and extension["scheme"] == "Bearer"
    assert "filename" in extension and "token" not in extension  # never a literal in the config
    assert authenticator in config["service"]["extensions"]


def test_k8s_scorer_binds_all_interfaces_only_with_tls_and_token_from_secrets() -> None:
    """The manifest opts in to 0.0.0.0 and then requires TLS and a token, both mounted from Secrets."""
    deployment = _k8s("Deployment", "cp-observe-scorer")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = _env(container)
    assert env["CP_OBSERVE_LISTEN_HOST"] == "0.0.0.0"  # explicit, with the reason next to it
    assert "CP_OBSERVE_AUTH_TOKEN" not in env  # the token comes from a file, rotated with its Secret
    secrets = set()
    for name in ("CP_OBSERVE_TLS_CERT_FILE", "CP_OBSERVE_TLS_KEY_FILE", "CP_OBSERVE_AUTH_TOKEN_FILE"):
        volume = _mounted(pod, container, env[name])
        secrets.add(volume["secret"]["secretName"])
    assert secrets == {"cp-observe-scorer-tls", "cp-observe-scorer-token"}
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    lb = _k8s("Deployment", "cp-observe-otel-lb")["spec"]["template"]["spec"]
    [otelcol] = lb["containers"]
    lb_env = _env(otelcol)
    ca = _mounted(lb, otelcol, lb_env["SCORER_CA_FILE"])
    assert ca["secret"]["secretName"] == "cp-observe-scorer-tls"
    assert [item["key"] for item in ca["secret"]["items"]] == ["ca.crt"]  # never the scorers' private key
    assert _mounted(lb, otelcol, lb_env["SCORER_TOKEN_FILE"])["secret"]["secretName"] == "cp-observe-scorer-token"
    assert lb_env["SCORER_SERVER_NAME"] == "cp-observe-scorer-headless"


def _compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text())["services"])


def test_compose_scorer_is_secured_with_the_generated_files() -> None:
    """The demo's scorers require TLS and the token from the shared volume; otel-lb reads CA and token from it."""
    services = _compose()
    scorer, lb = services["scorer"], services["otel-lb"]
    env = scorer["environment"]
    assert env["CP_OBSERVE_LISTEN_HOST"] == "0.0.0.0" and env["CP_OBSERVE_ADMIN_HOST"] == "127.0.0.1"
    [scorer_volume] = scorer["volumes"]
    volume, mount = scorer_volume.split(":")[:2]
    for name in ("CP_OBSERVE_TLS_CERT_FILE", "CP_OBSERVE_TLS_KEY_FILE", "CP_OBSERVE_AUTH_TOKEN_FILE"):
        assert env[name].startswith(mount + "/"), name
    lb_mount = next(v.split(":")[1] for v in lb["volumes"] if v.startswith(volume + ":"))
    for name in ("SCORER_CA_FILE", "SCORER_TOKEN_FILE"):
        assert lb["environment"][name].startswith(lb_mount + "/"), name
    assert lb["environment"]["SCORER_SERVER_NAME"] == "scorer"
    assert "https://" in " ".join(scorer["healthcheck"]["test"])
    for name in ("scorer", "otel-lb"):
        assert services[name]["depends_on"]["scorer-secrets"]["condition"] == "service_completed_successfully"


def test_compose_secrets_job_makes_files_a_scorer_serves_and_a_client_trusts(
    tmp_path: Path, cp_observe_judge: FakeJudge
) -> None:
    """The compose job's own script makes files a scorer serves with and an otel-lb-like client trusts."""
    # A CA, a certificate for `scorer` and a token; the client checks the name `scorer` against that CA and
    # sends the token, as otel-lb does (server_name_override), and is refused without it.
    job = _compose()["scorer-secrets"]
    script = job["command"][0].replace("$$", "$").replace("cd /secrets", f"cd {tmp_path}")
    script = script.replace("chown 10001:10001", "true")  # not root here
    subprocess.run(["sh", "-c", script], check=True, capture_output=True, timeout=60, env=dict(os.environ))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "tls.crt", "tls.key", "token"]
    assert oct((tmp_path / "tls.key").stat().st_mode & 0o777) == "0o400"
    token = (tmp_path / "token").read_text()
    assert len(token) == 64 and "\n" not in token
    env = _compose()["scorer"]["environment"]
    files = {name: str(tmp_path / Path(env[name]).name)
             for name in ("CP_OBSERVE_TLS_CERT_FILE", "CP_OBSERVE_TLS_KEY_FILE", "CP_OBSERVE_AUTH_TOKEN_FILE")}
    sink = OtlpSink()
    settings = {name[len("CP_OBSERVE_"):].lower(): value for name, value in files.items()}
    assert set(settings) <= set(ServeSettings.model_fields)
    try:
        with start_service(sink, cp_observe_judge, **settings) as service:
            context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
            statuses = []
            for headers in ({"Authorization": f"Bearer {token}"}, {}):
                raw = socket.create_connection(("127.0.0.1", service.port("http")), timeout=10)
                with context.wrap_socket(raw, server_hostname="scorer") as secure:  # otel-lb's server_name_override
                    secure.sendall(_request(retrieval_request(1), headers))
                    statuses.append(secure.recv(64).split(b" ")[1])
    finally:
        sink.close()
    assert statuses == [b"200", b"401"]


def _request(body: bytes, headers: dict[str, str]) -> bytes:
    lines = ["POST /v1/traces HTTP/1.1", "Host: scorer", "Content-Type: application/x-protobuf",
             f"Content-Length: {len(body)}", "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
