"""``OTEL_TRACES_EXPORTER`` picks the span exporters of the providers ``configure()`` creates, as the SDK reads it."""

from __future__ import annotations

import io

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from cp_observe._config._settings import Settings
from cp_observe._wiring._providers import build_span_exporter
from tests.otlp_receiver import OtlpReceiver


def _settings(**explicit: object) -> Settings:
    return Settings.resolve(explicit, environ={})


def test_unset_means_otlp_only_with_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the variable: no exporter without an endpoint (as before), OTLP with one."""
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert build_span_exporter(_settings()) is None
    assert type(build_span_exporter(_settings(otlp_endpoint="http://127.0.0.1:4318"))).__name__ == "OTLPSpanExporter"


@pytest.mark.parametrize(("value", "kind"), [("console", ConsoleSpanExporter), (" Console ", ConsoleSpanExporter),
                                             ("none", type(None)), ("", type(None))])
def test_console_and_none(monkeypatch: pytest.MonkeyPatch, value: str, kind: type) -> None:
    """``console`` gives the SDK's console exporter; ``none`` (or empty, with no endpoint) gives none."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", value)
    assert isinstance(build_span_exporter(_settings()), kind)


def test_an_unknown_name_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name the SDK would not know is skipped (with a warning); the known ones still apply."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin-typo,console")
    assert isinstance(build_span_exporter(_settings()), ConsoleSpanExporter)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin-typo")
    assert build_span_exporter(_settings()) is None


def test_console_and_otlp_both_receive_every_span(monkeypatch: pytest.MonkeyPatch) -> None:
    """``console,otlp``: each span is printed and reaches a loopback OTLP receiver."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console,otlp")
    with OtlpReceiver() as receiver:
        exporter = build_span_exporter(_settings(otlp_endpoint=receiver.endpoint))
        console = next(e for e in exporter.exporters if isinstance(e, ConsoleSpanExporter))
        console.out = printed = io.StringIO()  # the SDK bound sys.stdout when it was imported, under pytest's capture
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        provider.get_tracer("test").start_span("retrieval kb").end()
        provider.shutdown()
        assert receiver.wait_for(lambda r: "retrieval kb" in r.span_names())
    assert '"name": "retrieval kb"' in printed.getvalue()
