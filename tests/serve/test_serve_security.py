"""``cp-observe serve`` secure by default: loopback binds, TLS and mTLS with real certificates, bearer tokens."""

from __future__ import annotations

import http.client
import logging
import shutil
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from cp_observe._errors import ConfigurationError
from cp_observe.serve import ScorerService, ServeSettings
from cp_observe.serve._cli import add_arguments
from cp_observe.testing import FakeJudge
from tests.serve_support import OtlpSink, retrieval_request, retrieval_spans, start_service
from tests.tls_support import Pki, find_listeners, make_pki

TOKEN = "s3cr3t-token-4f9a1c2e"
WRONG = "wrong-token-77b1e0d3"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

#: Each test restores the process-wide runtime a service installs (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("serve_state_restored")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, a server certificate, a client certificate, and a second CA with its own client and server."""
    return make_pki(tmp_path_factory.mktemp("pki"))


def _secure(sink: OtlpSink, judge: FakeJudge, pki: Pki, *, mutual: bool = True, **extra: Any) -> ScorerService:
    settings: dict[str, Any] = {"tls_cert_file": str(pki.server_cert), "tls_key_file": str(pki.server_key),
                                "auth_token": TOKEN, **extra}
    if mutual:
        settings["tls_client_ca_file"] = str(pki.ca)
    return start_service(sink, judge, **settings)  # type: ignore[no-any-return]


def _client_context(pki: Pki, *, ca: Path | None = None, cert: str | None = "client") -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca or pki.ca))
    if cert is not None:
        context.load_cert_chain(str(getattr(pki, f"{cert}_cert")), str(getattr(pki, f"{cert}_key")))
    return context


def _https_post(port: int, context: ssl.SSLContext, headers: dict[str, str], body: bytes,
                path: str = "/v1/traces") -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/x-protobuf", **headers})
        response = connection.getresponse()
        return response.status, dict(response.headers), response.read()
    finally:
        connection.close()


def _https_get(port: int, context: ssl.SSLContext, path: str, headers: dict[str, str] | None = None) -> int:
    connection = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _grpc_call(port: int, credentials: grpc.ChannelCredentials | None, token: str | None,
               body: bytes) -> grpc.StatusCode:
    target = f"localhost:{port}"
    channel = grpc.secure_channel(target, credentials) if credentials is not None else grpc.insecure_channel(target)
    with channel:
        export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        metadata = (("authorization", f"Bearer {token}"),) if token is not None else None
        try:
            export(body, metadata=metadata, timeout=10)
        except grpc.RpcError as error:
            return error.code()  # type: ignore[no-any-return]
        return grpc.StatusCode.OK


def _grpc_credentials(pki: Pki, *, ca: Path | None = None, cert: str | None = "client") -> grpc.ChannelCredentials:
    chain = key = None
    if cert is not None:
        chain, key = pki.read(f"{cert}_cert"), pki.read(f"{cert}_key")
    return grpc.ssl_channel_credentials((ca or pki.ca).read_bytes(), private_key=key, certificate_chain=chain)


# --- bind addresses ----------------------------------------------------------------------------------------------
def test_default_serve_binds_loopback_only(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """With no host settings, the OTLP gRPC, OTLP HTTP and admin ports listen on 127.0.0.1 and nowhere else."""
    defaults = ServeSettings.resolve({}, environ={})
    assert (defaults.listen_host, defaults.admin_host) == ("127.0.0.1", "127.0.0.1")
    explicit = {"grpc_port": 0, "http_port": 0, "admin_port": 0, "otlp_endpoint": sink.url}
    with ScorerService(ServeSettings.resolve(explicit, environ={}), judge=cp_observe_judge) as service:
        ports = [service.port(name) for name in ("grpc", "http", "admin")]
        listeners = find_listeners(ports)
    assert listeners == {port: ["127.0.0.1"] for port in ports}, listeners


def test_admin_keeps_its_own_bind_address(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """OTLP can be exposed on every interface while /metrics and /stats stay on loopback."""
    with start_service(sink, cp_observe_judge, listen_host="0.0.0.0", admin_host="127.0.0.1") as service:
        listeners = find_listeners([service.port(name) for name in ("grpc", "http", "admin")])
        admin = service.port("admin")
    assert listeners[admin] == ["127.0.0.1"]
    assert all(addresses and set(addresses) <= {"0.0.0.0", "::"}
               for port, addresses in listeners.items() if port != admin), listeners


# --- the real exporters, accepted ------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def no_ca_bundle_override(monkeypatch: pytest.MonkeyPatch) -> None:
    """requests lets REQUESTS_CA_BUNDLE win over the exporter's ``certificate_file`` (psf/requests#3829)."""
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_real_otlp_exporters_succeed_with_mtls_and_token(
    protocol: str, sink: OtlpSink, cp_observe_judge: FakeJudge, pki: Pki
) -> None:
    """The SDK's OTLP gRPC and HTTP exporters, with the CA, a client certificate and the token, get through."""
    spans = retrieval_spans(3)
    with _secure(sink, cp_observe_judge, pki) as service:
        exporter: Any
        if protocol == "grpc":
            exporter = GrpcSpanExporter(endpoint=f"localhost:{service.port('grpc')}", timeout=10,
                                        credentials=_grpc_credentials(pki),
                                        headers={"authorization": f"Bearer {TOKEN}"})
        else:
            exporter = HttpSpanExporter(endpoint=f"https://localhost:{service.port('http')}/v1/traces",
                                        certificate_file=str(pki.ca), client_certificate_file=str(pki.client_cert),
                                        client_key_file=str(pki.client_key),
                                        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        try:
            assert exporter.export(spans) is SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()
        assert service.flush(30)
        stats = service.stats()
    assert (stats["sampled"], stats["scored"]) == (3, 3)
    assert stats["requests"] == {f"{protocol}:accepted": 1} and stats["refusals"] == {}


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_real_exporter_without_the_token_is_refused(
    protocol: str, sink: OtlpSink, cp_observe_judge: FakeJudge, pki: Pki
) -> None:
    """The same exporters with TLS but no token fail, and the refusal is counted as missing_token."""
    with _secure(sink, cp_observe_judge, pki, mutual=False) as service:
        exporter: Any
        if protocol == "grpc":
            exporter = GrpcSpanExporter(endpoint=f"localhost:{service.port('grpc')}",
                                        credentials=_grpc_credentials(pki, cert=None), timeout=5)
        else:
            exporter = HttpSpanExporter(endpoint=f"https://localhost:{service.port('http')}/v1/traces",
                                        certificate_file=str(pki.ca), timeout=5)
        try:
            assert exporter.export(retrieval_spans(1)) is SpanExportResult.FAILURE
        finally:
            exporter.shutdown()
        stats = service.stats()
    assert stats["refusals"] == {f"{protocol}:missing_token": 1} and stats["sampled"] == 0


# --- refusals ----------------------------------------------------------------------------------------------------
def test_grpc_refusals(sink: OtlpSink, cp_observe_judge: FakeJudge, pki: Pki) -> None:
    """gRPC: plaintext, an unknown CA, no client cert, a foreign client cert fail the handshake; bad tokens are 16."""
    body = retrieval_request(1)
    with _secure(sink, cp_observe_judge, pki) as service:
        port = service.port("grpc")
        assert _grpc_call(port, None, TOKEN, body) is grpc.StatusCode.UNAVAILABLE  # plaintext to a TLS port
        assert _grpc_call(port, _grpc_credentials(pki, ca=pki.rogue_ca), TOKEN, body) is grpc.StatusCode.UNAVAILABLE
        assert _grpc_call(port, _grpc_credentials(pki, cert=None), TOKEN, body) is grpc.StatusCode.UNAVAILABLE
        assert _grpc_call(port, _grpc_credentials(pki, cert="rogue_client"), TOKEN, body) is grpc.StatusCode.UNAVAILABLE
        assert _grpc_call(port, _grpc_credentials(pki), None, body) is grpc.StatusCode.UNAUTHENTICATED
        assert _grpc_call(port, _grpc_credentials(pki), WRONG, body) is grpc.StatusCode.UNAUTHENTICATED
        assert _grpc_call(port, _grpc_credentials(pki), TOKEN, body) is grpc.StatusCode.OK
        assert service.flush(30)
        stats = service.stats()
    assert stats["refusals"] == {"grpc:missing_token": 1, "grpc:wrong_token": 1}
    assert stats["requests"] == {"grpc:accepted": 1, "grpc:unauthenticated": 2} and stats["sampled"] == 1


def _handshake_fails(call: Callable[[], object]) -> bool:
    try:
        call()
    except (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected):
        return True
    return False


def test_http_refusals(sink: OtlpSink, cp_observe_judge: FakeJudge, pki: Pki) -> None:
    """HTTP: plaintext, an unknown CA, no or a foreign client cert never get an answer; bad tokens get 401."""
    body = retrieval_request(1)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with _secure(sink, cp_observe_judge, pki) as service:
        port = service.port("http")
        plain = http.client.HTTPConnection("localhost", port, timeout=10)
        assert _handshake_fails(lambda: (plain.request("POST", "/v1/traces", body=body, headers=auth),
                                         plain.getresponse().read()))
        plain.close()
        with pytest.raises(ssl.SSLCertVerificationError):  # the client does not trust the server: unknown CA
            _https_post(port, _client_context(pki, ca=pki.rogue_ca), auth, body)
        assert _handshake_fails(lambda: _https_post(port, _client_context(pki, cert=None), auth, body))
        assert _handshake_fails(lambda: _https_post(port, _client_context(pki, cert="rogue_client"), auth, body))
        status, headers, _ = _https_post(port, _client_context(pki), {}, body)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        assert _https_post(port, _client_context(pki), {"Authorization": f"Bearer {WRONG}"}, body)[0] == 401
        assert _https_post(port, _client_context(pki), {"Authorization": f"Basic {TOKEN}"}, body)[0] == 401
        assert _https_post(port, _client_context(pki), auth, body)[0] == 200
        assert service.flush(30)
        stats = service.stats()
    refusals = stats["refusals"]
    assert (refusals["http:missing_token"], refusals["http:wrong_token"]) == (2, 1)
    assert refusals["http:tls"] >= 3  # the unknown-CA client may drop the connection before its alert arrives
    assert stats["requests"] == {"http:accepted": 1, "http:unauthenticated": 3} and stats["scored"] == 1


def test_tokens_are_never_logged_served_or_echoed(
    sink: OtlpSink, cp_observe_judge: FakeJudge, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """Neither the service's token nor a wrong one appears in a log line, /stats, /metrics or an answer."""
    caplog.set_level(logging.DEBUG, logger="cp_observe")
    with _secure(sink, cp_observe_judge, pki, mutual=False, admin_auth=True) as service:
        context = _client_context(pki, cert=None)
        answers = [_https_post(service.port("http"), context, {"Authorization": f"Bearer {token}"},
                               retrieval_request(1))[2] for token in (WRONG, TOKEN)]
        _grpc_call(service.port("grpc"), _grpc_credentials(pki, cert=None), WRONG, retrieval_request(1))
        admin = service.port("admin")
        served = []
        for path in ("/stats", "/metrics"):
            connection = http.client.HTTPSConnection("localhost", admin, context=context, timeout=10)
            connection.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
            served.append(connection.getresponse().read())
            connection.close()
    text = caplog.text + "".join(record.getMessage() for record in caplog.records)
    assert "request refused" in text  # the refusals were logged...
    everything = text.encode() + b"".join(answers) + b"".join(served)
    assert TOKEN.encode() not in everything and WRONG.encode() not in everything  # ...without either token
    assert b'reason="wrong_token"' in served[1]


def test_admin_port_speaks_tls_and_guards_metrics_and_stats(
    sink: OtlpSink, cp_observe_judge: FakeJudge, pki: Pki
) -> None:
    """Admin over TLS without a client cert (probes); /metrics and /stats need the token, /healthz does not."""
    with _secure(sink, cp_observe_judge, pki) as service:
        admin = service.port("admin")
        context = _client_context(pki, cert=None)
        assert _https_get(admin, context, "/healthz") == 200
        assert _https_get(admin, context, "/readyz") == 200
        for path in ("/metrics", "/stats"):
            assert _https_get(admin, context, path) == 401
            assert _https_get(admin, context, path, {"Authorization": f"Bearer {WRONG}"}) == 401
            assert _https_get(admin, context, path, {"Authorization": f"Bearer {TOKEN}"}) == 200
        with pytest.raises(ConnectionError):  # plaintext to the TLS admin port: no HTTP answer
            connection = http.client.HTTPConnection("localhost", admin, timeout=10)
            connection.request("GET", "/healthz")
            connection.getresponse()
        assert service.stats()["refusals"] == {}  # admin requests are not OTLP requests


def test_server_certificate_and_token_file_reload_on_change(
    sink: OtlpSink, cp_observe_judge: FakeJudge, pki: Pki, tmp_path: Path
) -> None:
    """Rotating the mounted files takes effect for new connections on both front doors without a restart."""
    cert, key, tokens = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "token"
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    tokens.write_text(f"{TOKEN}\n")
    body = retrieval_request(1)
    with start_service(sink, cp_observe_judge, tls_cert_file=str(cert), tls_key_file=str(key),
                       tls_reload_interval_s=0.05, auth_token_file=str(tokens)) as service:
        http_port, grpc_port = service.port("http"), service.port("grpc")
        old, new = _client_context(pki, cert=None), _client_context(pki, ca=pki.rogue_ca, cert=None)
        assert _https_post(http_port, old, {"Authorization": f"Bearer {TOKEN}"}, body)[0] == 200
        shutil.copy(pki.rogue_server_cert, cert)  # a rotation: new key pair, signed by another CA
        shutil.copy(pki.rogue_server_key, key)
        tokens.write_text(f"{WRONG}\n")
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline and status != 200:
            try:
                status = _https_post(http_port, new, {"Authorization": f"Bearer {WRONG}"}, body)[0]
            except ssl.SSLError:
                status = None
            time.sleep(0.1)
        assert status == 200
        assert _grpc_call(grpc_port, _grpc_credentials(pki, ca=pki.rogue_ca, cert=None), WRONG, body) is \
            grpc.StatusCode.OK
        assert _https_post(http_port, new, {"Authorization": f"Bearer {TOKEN}"}, body)[0] == 401
        with pytest.raises(ssl.SSLCertVerificationError):
            _https_post(http_port, old, {"Authorization": f"Bearer {WRONG}"}, body)


# --- settings ---------------------------------------------------------------------------------------------------
def test_security_settings_are_checked_at_start(cp_observe_judge: FakeJudge, pki: Pki, tmp_path: Path) -> None:
    """Half a key pair, a client CA without a certificate, missing or empty files: refused before binding."""
    empty = tmp_path / "empty"
    empty.write_text("\n")
    bad = [
        {"tls_cert_file": str(pki.server_cert)},
        {"tls_client_ca_file": str(pki.ca)},
        {"tls_cert_file": str(tmp_path / "missing.crt"), "tls_key_file": str(pki.server_key)},
        {"tls_cert_file": str(pki.server_cert), "tls_key_file": str(pki.client_key)},  # key of another cert
        {"auth_token_file": str(tmp_path / "missing")},
        {"auth_token_file": str(empty)},
    ]
    for settings in bad:
        with pytest.raises(ConfigurationError):
            ScorerService(ServeSettings.resolve(settings, environ={}), judge=cp_observe_judge)


def test_the_token_comes_from_the_environment_or_a_file_never_a_flag() -> None:
    """``CP_OBSERVE_AUTH_TOKEN`` is read; there is no ``--auth-token`` flag, only ``--auth-token-file``."""
    import argparse

    settings = ServeSettings.resolve({}, environ={"CP_OBSERVE_AUTH_TOKEN": TOKEN})
    assert settings.auth_token is not None and settings.auth_token.get_secret_value() == TOKEN
    assert TOKEN not in repr(settings)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["--auth-token-file", "/run/secrets/token"]).auth_token_file == "/run/secrets/token"
    with pytest.raises(SystemExit):
        parser.parse_args(["--auth-token", TOKEN])


def test_bare_socket_that_never_handshakes_does_not_block_others(
    sink: OtlpSink, cp_observe_judge: FakeJudge, pki: Pki
) -> None:
    """A connection that opens and says nothing holds only its own thread: other senders still get through."""
    with _secure(sink, cp_observe_judge, pki, mutual=False) as service:
        port = service.port("http")
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            status = _https_post(port, _client_context(pki, cert=None), {"Authorization": f"Bearer {TOKEN}"},
                                 retrieval_request(1))[0]
        assert status == 200


@pytest.mark.parametrize("name", ["listen_host", "admin_host", "tls_cert_file", "tls_key_file", "tls_client_ca_file",
                                  "tls_reload_interval_s", "admin_tls", "auth_token_file", "admin_auth", "log_level"])
def test_every_security_setting_is_documented_in_securing_serve(name: str) -> None:
    """The "Securing serve" guide names each setting and its variable; the token's variable is environment-only."""
    section = (Path(__file__).resolve().parents[2] / "docs" / "how-to" / "securing-serve.md").read_text()
    assert section.startswith("# Securing serve")
    assert f"`{name}`" in section and f"`CP_OBSERVE_{name.upper()}`" in section
    assert "`CP_OBSERVE_AUTH_TOKEN`" in section and "never from a flag" in section
