"""A second ``configure()``: one live processor on the provider, and a changed exporter warned about, not ignored."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

import cp_observe
from cp_observe._config._settings import Settings
from cp_observe._judging._llm_judge import LLMJudge
from cp_observe._wiring._providers import judge_from_settings
from tests.conftest import Otel


class CountingProvider(TracerProvider):
    """A tracer provider that keeps what was added to it (through the SDK's public method)."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[SpanProcessor] = []

    def add_span_processor(self, span_processor: Any) -> None:
        self.added.append(span_processor)
        super().add_span_processor(span_processor)


@cp_observe.retriever(name="kb")
def _search(query: str) -> list[str]:
    return ["Paris is the capital of France.", "Bananas are yellow."]


def test_a_second_configure_leaves_one_live_processor(otel: Otel) -> None:
    """Two configure() calls add one processor to the provider; only the second processor scores what follows."""
    provider = CountingProvider()
    otel.runtime.install(tracer_provider=provider)
    first = cp_observe.configure("lexical", tracer_provider=provider, meter_provider=otel.meter_provider,
                                 logger_provider=otel.logger_provider)
    second = cp_observe.configure("lexical", tracer_provider=provider, meter_provider=otel.meter_provider,
                                  logger_provider=otel.logger_provider)
    assert first is not None and second is not None and first is not second
    assert len(provider.added) == 1  # the forwarding processor, attached once
    _search("capital of France?")
    assert second.force_flush(10_000)
    assert second.stats()["scored"] == 1
    assert first.stats()["sampled"] == 0  # shut down and no longer called


def test_capture_only_after_scoring_leaves_no_live_processor(otel: Otel) -> None:
    """configure(capture_only=True) after a scoring configure(): the provider's forwarder calls nothing."""
    provider = CountingProvider()
    otel.runtime.install(tracer_provider=provider)
    first = cp_observe.configure("lexical", tracer_provider=provider, meter_provider=otel.meter_provider,
                                 logger_provider=otel.logger_provider)
    assert cp_observe.configure(capture_only=True, tracer_provider=provider) is None
    assert first is not None
    _search("capital of France?")
    assert first.stats()["sampled"] == 0
    assert len(provider.added) == 1


_RECONFIGURE = textwrap.dedent("""
    import logging, os, sys
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(message)s")
    import cp_observe
    os.environ["OTEL_TRACES_EXPORTER"] = "console"
    first = cp_observe.configure("lexical")
    print("same", flush=True, file=sys.stderr)
    second = cp_observe.configure("lexical")
    print("changed", flush=True, file=sys.stderr)
    os.environ["OTEL_TRACES_EXPORTER"] = "none"
    third = cp_observe.configure("lexical")
""")


def test_a_reconfigure_asking_for_another_exporter_warns() -> None:
    """Providers configure() created keep their exporters: another one asked for later is a warning, not silence."""
    done = subprocess.run([sys.executable, "-c", _RECONFIGURE], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    same, changed = done.stderr.split("same\n", 1)[1].split("changed\n", 1)
    assert "other exporters" not in same
    assert "configure() called again with other exporters" in changed
    assert "OTEL_TRACES_EXPORTER" in changed


def test_the_cheap_judge_honours_judge_transport() -> None:
    """The cascade's cheap judge is built by the same factory as the judge: judge_transport reaches both."""
    settings = Settings(judge="openai/judge-test", cheap_judge="openai/cheap-test",
                        judge_api_base="http://127.0.0.1:9/v1", judge_api_key="sk-test-0000", judge_transport="litellm")
    judge = judge_from_settings(settings)
    cheap = judge_from_settings(settings, settings.cheap_judge)
    assert isinstance(judge, LLMJudge) and isinstance(cheap, LLMJudge)
    assert (judge.path, cheap.path) == ("litellm", "litellm")
    lean = Settings(judge="openai/judge-test", cheap_judge="openai/cheap-test", judge_api_key="sk-test-0000",
                    judge_api_base="http://127.0.0.1:9/v1")
    assert judge_from_settings(lean, lean.cheap_judge).path == "lean"  # type: ignore[attr-defined]
