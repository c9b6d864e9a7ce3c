"""Shared fixtures: in-memory OpenTelemetry pipelines, a simple test judge, and a clean runtime per test."""

from __future__ import annotations

import os

# litellm must never fetch its cost map from the network in tests.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
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
from cp_observe._types import Judgement, Usage, Verdict
from cp_observe.testing import IsolatedRuntime

if TYPE_CHECKING:
    from tests.serve_support import OtlpSink

# Our own bugs fail this project's tests instead of becoming a log line. An explicit switch: cp-observe never
# infers it from pytest being imported, so users' test suites see the production behaviour.
_internal.set_raise_internal_errors(True)


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


class KeywordJudge:
    """A deterministic test judge: a context is relevant when it contains a word of 5+ letters of the reference.

    It records every call, so tests can check what reached the judge.
    """

    def __init__(self, model: str = "keyword-judge") -> None:
        self._model = model
        self.calls: list[tuple[str, str, list[str]]] = []

    @property
    def model(self) -> str:
        return self._model

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Judgement:
        self.calls.append((query, reference, list(contexts)))
        words = {w.strip(".,!?").lower() for w in reference.split() if len(w.strip(".,!?")) >= 5}
        verdicts = tuple(
            Verdict(i, any(w in c.lower() for w in words), "keyword overlap") for i, c in enumerate(contexts)
        )
        return Judgement(verdicts=verdicts, model=self._model, usage=Usage(1, 10, 5), cost_usd=0.001)


@pytest.fixture
def keyword_judge() -> KeywordJudge:
    """A fresh recording keyword judge."""
    return KeywordJudge()


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
