"""The kit's ``IsolatedRuntime`` and ``ProcessorProbe``: what a test changes process-wide is undone after it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

import cp_observe
from cp_observe.testing import IsolatedRuntime, ProcessorProbe

DOCS = ["The refund window is thirty days.", "Shipping is free over fifty euros."]


@cp_observe.retriever(name="kb")
def search(query: str) -> list[str]:
    return list(DOCS)


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    tracer_provider = TracerProvider()
    yield tracer_provider
    tracer_provider.shutdown()


def test_settings_apply_inside_and_are_undone_after(provider: TracerProvider) -> None:
    """Settings given to the isolation, and installed in it later, hold only while it is open."""
    with IsolatedRuntime() as outer:
        before = outer.settings
        with IsolatedRuntime(tracer_provider=provider, capture_content=False) as runtime:
            assert runtime.settings.capture_content is False
            assert runtime.settings.tracer_provider is provider
            runtime.install(max_contexts=3, sample_rate=0.0)
            assert runtime.settings.max_contexts == 3
            assert runtime.settings.sampler(2**64 - 1) is False
            assert runtime.settings.capture_content is False  # earlier settings are kept
        assert outer.settings is before


def test_payloads_and_forced_traces_do_not_outlive_it(provider: TracerProvider) -> None:
    """Payloads kept for a judge that never took them, and forced traces, are gone once it closes."""
    from cp_observe._config._sampling import FORCED

    with IsolatedRuntime(tracer_provider=provider) as runtime:
        probe = cp_observe.ContextPrecisionProcessor(cp_observe.LexicalJudge(), tracer_provider=TracerProvider())
        try:  # a processor on another provider: calls keep payloads for it, and none is ever taken
            with provider.get_tracer("app").start_as_current_span("request"), cp_observe.force_evaluation():
                search("refund window?")  # force_evaluation remembers the request's trace
            assert runtime.payloads_held == 1
            assert len(FORCED._ids) == 1
        finally:
            probe.shutdown()
    with IsolatedRuntime() as after:
        assert after.payloads_held == 0
    assert len(FORCED._ids) == 0


def test_the_payload_capacity_is_put_back(provider: TracerProvider) -> None:
    """A small payload store evicts after two calls; the next isolation has the default bound again."""
    from cp_observe._capture._payloads import PAYLOADS

    default = PAYLOADS._max
    with IsolatedRuntime(tracer_provider=provider, payload_capacity=2) as runtime:
        other = cp_observe.ContextPrecisionProcessor(cp_observe.LexicalJudge(), tracer_provider=TracerProvider())
        try:
            evicted = PAYLOADS.evicted
            for i in range(5):
                search(f"q{i}")
            assert runtime.payloads_held == 2
            assert PAYLOADS.evicted == evicted + 3
        finally:
            other.shutdown()
    assert PAYLOADS._max == default


def test_what_configure_installed_is_shut_down(provider: TracerProvider) -> None:
    """configure() inside the isolation: its processor is shut down and no longer configure()'s current one."""
    from cp_observe._wiring._configure import current_processor

    with IsolatedRuntime():
        processor = cp_observe.configure("lexical", tracer_provider=provider,
                                         meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]))
        assert processor is not None and current_processor() is processor
    assert current_processor() is None
    assert ProcessorProbe(processor).closed


@pytest.mark.parametrize("bad", [{"tracer": None}, {"configured": True}, {"capture": False}])
def test_unknown_settings_are_refused(bad: dict[str, Any]) -> None:
    """A name that is not a runtime setting (or one derived from others) is a TypeError that lists the known ones."""
    with IsolatedRuntime() as runtime, pytest.raises(TypeError, match=r"not runtime settings.*known"):
        runtime.install(**bad)


def test_installing_before_it_opens_is_an_error() -> None:
    """Settings go into an open isolation only: otherwise nothing would undo them."""
    with pytest.raises(RuntimeError, match="open the IsolatedRuntime"):
        IsolatedRuntime().install(capture_content=False)


def test_the_fixture_is_an_open_isolation(cp_observe_runtime: IsolatedRuntime, provider: TracerProvider) -> None:
    """``cp_observe_runtime`` (the pytest plugin's) is open: install works, and the test after it sees none of it."""
    cp_observe_runtime.install(tracer_provider=provider, max_value_length=64)
    assert cp_observe_runtime.settings.max_value_length == 64


def test_the_fixture_left_nothing_behind() -> None:
    """Runs after the one above: the default bound is back."""
    with IsolatedRuntime() as runtime:
        assert runtime.settings.max_value_length != 64


def test_the_probe_reads_the_processor_and_moves_its_rate_clock(provider: TracerProvider) -> None:
    """Queue, loop, sinks and the rate cap's clock, without touching the processor's attributes in the test."""
    judged = threading.Event()

    class Judge:
        model = "counting"

        async def judge(self, query: str, reference: str, contexts: Any) -> Any:
            judged.set()
            return [cp_observe.Verdict(i, True) for i in range(len(contexts))]

    now = [0.0]
    with IsolatedRuntime(tracer_provider=provider):
        processor = cp_observe.ContextPrecisionProcessor(Judge(), tracer_provider=provider,
                                                         max_evaluations_per_minute=1)
        provider.add_span_processor(processor)
        probe = ProcessorProbe(processor)
        probe.use_rate_clock(lambda: now[0])
        assert probe.queued == 0 and probe.sinks == () and not probe.closed
        search("first")
        assert processor.force_flush(10_000)
        search("second")  # the bucket is empty and the clock stands still: refused by the rate cap
        assert processor.force_flush(10_000)
        now[0] += 60.0
        search("third")  # a minute later on the test's clock: a token again
        assert processor.force_flush(10_000)
        assert probe.event_loop is not None
        stats = processor.stats()
        processor.shutdown()
        assert probe.closed
    assert (stats["scored"], stats["skipped"] + stats["dropped"]) == (2, 1), stats
