"""``cp-observe serve`` settings and command line: flag > ``CP_OBSERVE_*`` > default; the key from the env only."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from cp_observe import ConfigurationError
from cp_observe.serve import ScorerService, ServeSettings
from cp_observe.serve._cli import add_arguments, run
from cp_observe.testing import IsolatedRuntime, JudgeServer
from tests.serve_support import ROOT, OtlpSink, post, read_line, retrieval_request, stop_by_signal, subprocess_env


@pytest.fixture(autouse=True)
def clean_runtime() -> Iterator[None]:
    """Restore the process-wide runtime the processor touches."""
    with IsolatedRuntime():
        yield


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_help_documents_every_flag_and_its_variable() -> None:
    """``--help`` names each option's CP_OBSERVE_* variable and default, and the environment-only key."""
    result = subprocess.run([sys.executable, "-m", "cp_observe.serve", "--help"], cwd=ROOT, env=subprocess_env(),
                            capture_output=True, text=True, timeout=60, check=True)
    text = result.stdout
    for flag, variable in (("--queue-size", "CP_OBSERVE_QUEUE_SIZE"), ("--grpc-port", "CP_OBSERVE_GRPC_PORT"),
                           ("--judge-api-base", "CP_OBSERVE_JUDGE_API_BASE"), ("--drain-timeout-s", "DRAIN_TIMEOUT_S")):
        assert flag in text and variable in text
    assert "CP_OBSERVE_JUDGE_API_KEY" in text and "--judge-api-key" not in text
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in text


def test_flag_beats_variable_beats_default() -> None:
    """An explicit value wins over the environment, which wins over the default; bad variables fall back."""
    args = _parse("--queue-size", "5", "--no-capture-content")
    explicit = {name: value for name, value in vars(args).items() if value is not None}
    environ = {"CP_OBSERVE_QUEUE_SIZE": "7", "CP_OBSERVE_GRPC_PORT": "5317", "CP_OBSERVE_CONCURRENCY": "many",
               "CP_OBSERVE_JUDGE_API_KEY": "sk-from-env"}
    settings = ServeSettings.resolve(explicit, environ=environ)
    assert (settings.queue_size, settings.grpc_port, settings.concurrency) == (5, 5317, 32)  # serve's own default
    assert settings.capture_content is False
    assert settings.judge_api_key is not None and settings.judge_api_key.get_secret_value() == "sk-from-env"
    assert "sk-from-env" not in repr(settings)
    assert _parse().queue_size is None  # not given: the environment decides
    with pytest.raises(ConfigurationError):
        ServeSettings.resolve({"ready_high_water": 1.5}, environ={})


def test_bad_flag_value_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """A flag out of range is a configuration error: exit status 2 and a message, nothing started."""
    assert run(_parse("--queue-size", "0")) == 2
    assert "queue_size" in capsys.readouterr().err


def test_llm_judge_from_settings_uses_the_key_from_the_environment() -> None:
    """Without a judge object the service builds the LLM judge from its settings; the key comes from the env."""
    sink = OtlpSink()
    with JudgeServer() as judge_server:
        settings = ServeSettings.resolve(
            {"judge": "openai/judge-test", "judge_api_base": judge_server.url, "listen_host": "127.0.0.1",
             "grpc_port": 0, "http_port": 0, "admin_port": 0, "otlp_endpoint": sink.url},
            environ={"CP_OBSERVE_JUDGE_API_KEY": "sk-from-env"},
        )
        with ScorerService(settings) as service:
            assert service.processor.judge.model == "openai/judge-test"
            assert post(f"http://127.0.0.1:{service.port('http')}/v1/traces", retrieval_request(1))[0] == 200
            assert service.flush(60)
            stats = service.stats()
        [request] = judge_server.requests
    sink.close()
    assert (stats["scored"], stats["failed"]) == (1, 0)
    assert request.headers["authorization"] == "Bearer sk-from-env"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_drains_and_stops_serve_promptly(sig: signal.Signals) -> None:
    """SIGTERM and SIGINT each wake the blocked main thread: serve drains, prints its stats and exits 0 at once."""
    args = [sys.executable, "-m", "cp_observe.serve", "--judge", "lexical", "--grpc-port", "0", "--http-port", "0",
            "--admin-port", "0", "--log-level", "error"]
    process = subprocess.Popen(args, cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)

    def listening() -> None:
        assert "cp-observe serve: grpc 127.0.0.1:" in read_line(process)

    out, err, took = stop_by_signal(process, sig, listening)
    assert process.returncode == 0, err
    assert "cp-observe serve: draining" in out and "stopped (drained)" in out, out
    assert took < 10, took  # an idle service drains at once; 10 s leaves room for a loaded CI machine
