"""Shared fixtures: in-memory OpenTelemetry pipelines and a clean runtime per test.

The judge is the shipped test kit's: the ``cp_observe_judge`` fixture (a ``cp_observe.testing.FakeJudge``, which
records every call) from cp-observe's own pytest plugin, the same one users get.
"""

from __future__ import annotations

import os

# litellm must never fetch its cost map from the network in tests.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cp_observe import _internal
from cp_observe.testing import IsolatedRuntime
from tests.turn_support import Turn, make_turn

if TYPE_CHECKING:
    from tests.serve_support import OtlpSink

# Our own bugs fail this project's tests instead of becoming a log line. An explicit switch: cp-observe never
# infers it from pytest being imported, so users' test suites see the production behaviour.
_internal.set_raise_internal_errors(True)


_INTEGRATION = Path(__file__).resolve().parent / "integration"
_NOT_UNIT = ("slow", "e2e", "browser")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tier every test: under tests/integration ``e2e``; any test not slow, e2e or browser ``unit`` (``-m unit``)."""
    for item in items:
        if _INTEGRATION in item.path.parents:
            item.add_marker(pytest.mark.e2e)
        if not any(item.get_closest_marker(name) for name in _NOT_UNIT):
            item.add_marker(pytest.mark.unit)


@dataclass
class Otel:
    """An in-memory tracer, meter and logger provider, wired as the decorators' provider.

    ``runtime`` is the test's ``IsolatedRuntime``: ``otel.runtime.install(capture_content=False)`` changes what
    the decorators read for the rest of the test.
    """

    tracer_provider: TracerProvider
    spans: InMemorySpanExporter
    meter_provider: MeterProvider
    metrics: InMemoryMetricReader
    logger_provider: LoggerProvider
    logs: InMemoryLogRecordExporter
    runtime: IsolatedRuntime

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def by_name(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name.startswith(prefix)]

    def metric_points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        points: list[Any] = []
        if data is None:
            return points
        for resource_metrics in data.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        points.extend(metric.data.data_points)
        return points

    def processor(self, judge: Any, **kwargs: Any) -> Any:
        from cp_observe import ContextPrecisionProcessor

        processor = ContextPrecisionProcessor(
            judge,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            logger_provider=self.logger_provider,
            **kwargs,
        )
        self.tracer_provider.add_span_processor(processor)
        self._processors.append(processor)
        return processor

    def shut_down_after(self, processor: Any) -> None:
        """Shut ``processor`` (one the test built itself) down when the test ends, with the fixture's own."""
        self._processors.append(processor)

    _processors: list[Any] = field(default_factory=list)


@pytest.fixture
def otel() -> Iterator[Otel]:
    """In-memory providers; the decorators write to this tracer provider for the test's duration."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    metrics = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[metrics])
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    with IsolatedRuntime(tracer_provider=tracer_provider) as runtime:
        state = Otel(tracer_provider, spans, meter_provider, metrics, logger_provider, logs, runtime)
        yield state
        for processor in state._processors:
            processor.shutdown()


@pytest.fixture(autouse=True)
def _fresh_error_log() -> None:
    """Each test starts with no failures counted, so the once-per-minute log line is not spent by another test."""
    _internal.reset_error_counts()


@pytest.fixture(scope="session", autouse=True)
def _own_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The session's default durable store (``$XDG_STATE_HOME/cp-observe``) is its own, from before any fixture.

    A service built from settings resolved with ``environ={}`` ignores ``CP_OBSERVE_DATA_DIR`` and would
    otherwise open ``~/.local/state/cp-observe``, shared with every other run on the machine, and resume their
    targets (module-scoped services start before the per-test directory below is set).
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
        yield


@pytest.fixture(autouse=True)
def _own_data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's `serve` gets its own durable store, so no test resumes what another one left."""
    data = tmp_path_factory.mktemp("data")
    monkeypatch.setenv("CP_OBSERVE_DATA_DIR", str(data))
    monkeypatch.setenv("XDG_STATE_HOME", str(data / "state"))  # the default location too


@pytest.fixture
def production_errors() -> Iterator[None]:
    """Internal errors are swallowed as in production (this suite otherwise turns re-raising on)."""
    _internal.set_raise_internal_errors(False)
    yield
    _internal.set_raise_internal_errors(True)


@pytest.fixture
def turn() -> Turn:
    """The suite's test turn (``TURN_*``): retriever ``kb`` inside agent ``helper``."""
    return make_turn()


@pytest.fixture
def sink() -> Iterator[OtlpSink]:
    """A real OTLP/HTTP receiver for a scorer's evaluation spans, events and metrics (the serve tests)."""
    from tests.serve_support import OtlpSink

    receiver = OtlpSink()
    yield receiver
    receiver.close()


@pytest.fixture
def serve_state_restored() -> Iterator[IsolatedRuntime]:
    """A service installs its sampler in the process-wide runtime: restore it, drop payloads, forget forced traces."""
    with IsolatedRuntime() as runtime:
        yield runtime
