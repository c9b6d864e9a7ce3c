"""Evaluations survive a short process's exit: real interpreters that end right after three calls.

Each test runs a script in its own interpreter (the exit hooks under test are the interpreter's), lets it end
without a flush, and counts what it exported: console lines on stdout, OTLP spans at a loopback receiver. The
script's last exit hook (registered before ``configure()``, so it runs after cp-observe's) prints the processor's
``stats()``, so every sampled target is seen to end in one outcome.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from cp_observe import _names as n
from cp_observe.testing import JudgeServer, delay
from tests.otlp_receiver import OtlpReceiver
from tests.serve_support import subprocess_env

pytestmark = pytest.mark.e2e  # whole programs in child processes: not the quick unit tier

_SCRIPT = textwrap.dedent('''
    import atexit, json, logging, os, sys, time
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    import cp_observe

    logging.basicConfig(level=logging.WARNING)  # the host shows library warnings (cp-observe is quiet otherwise)
    order = os.environ["EXIT_ORDER"]  # where the console exporter is added: before, after, none
    stats = []
    ended = []  # when the script's last line ran: the exit's length is measured from there
    atexit.register(lambda: print("STATS " + json.dumps({**stats[0].stats(), "exit_s": time.monotonic() - ended[0]}),
                                  file=sys.stderr, flush=True))
    if order != "none":
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        console = BatchSpanProcessor(ConsoleSpanExporter(formatter=lambda span: "SPAN " + span.name + "\\n"))
    if order == "before":
        provider.add_span_processor(console)
    judge_url = os.environ.get("EXIT_JUDGE_URL")
    stats.append(cp_observe.configure(
        judge="openai/judge-test" if judge_url else "lexical",
        judge_api_base=judge_url, judge_api_key="sk-test" if judge_url else None,
        sample_rate=1.0, shutdown_timeout_s=float(os.environ.get("EXIT_BOUND", "5")),
    ))
    if order == "after":
        provider.add_span_processor(console)

    @cp_observe.retriever(name="kb")
    def search(query):
        return ["Paris is the capital of France.", "Bananas are yellow.", "France borders Spain."]

    @cp_observe.agent(name="bot")
    def answer(question):
        search(question)
        return "Paris is the capital of France."

    for _ in range(3):
        answer("What is the capital of France?")
    if os.environ.get("EXIT_EXPLICIT"):  # the host shuts the provider down itself
        trace.get_tracer_provider().shutdown()
    ended.append(time.monotonic())
''')


def _run(tmp_path: Path, timeout: float = 120, **env: str) -> tuple[subprocess.CompletedProcess[str], float,
                                                                       dict[str, Any]]:
    script = tmp_path / "short_script.py"
    script.write_text(_SCRIPT)
    started = time.monotonic()
    run = subprocess.run([sys.executable, str(script)], env=subprocess_env(**env), capture_output=True, text=True,
                         timeout=timeout, check=False)
    elapsed = time.monotonic() - started
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("STATS ")]
    assert len(lines) == 1, run.stderr
    return run, elapsed, json.loads(lines[0][len("STATS "):])


@pytest.mark.parametrize("order", ["before", "after"])
def test_console_exporter_gets_every_evaluation_whichever_order_it_was_added(tmp_path: Path, order: str) -> None:
    """The console exporter, added before or after configure(), prints all 3 evaluation spans at exit."""
    run, _, stats = _run(tmp_path, EXIT_ORDER=order)
    spans = [line for line in run.stdout.splitlines() if line.startswith("SPAN ")]
    assert spans.count("SPAN evaluation context_precision") == 3, run.stdout
    assert spans.count("SPAN retrieval kb") == 3
    assert stats["sampled"] == stats["scored"] == 3, stats
    assert "were dropped" not in run.stderr


def test_an_llm_judge_called_first_at_exit_still_scores(tmp_path: Path) -> None:
    """An HTTP judge first called at exit (by name: a DNS lookup on asyncio's pool) scores all 3 in time."""
    with JudgeServer() as server:
        url = server.url.replace("127.0.0.1", "localhost")
        run, _, stats = _run(tmp_path, EXIT_ORDER="before", EXIT_JUDGE_URL=url)
    spans = [line for line in run.stdout.splitlines() if line.startswith("SPAN ")]
    assert spans.count("SPAN evaluation context_precision") == 3, (run.stdout, run.stderr)
    assert stats["scored"] == 3, stats


@pytest.mark.parametrize("explicit", ["", "1"])
def test_otlp_export_of_providers_cp_observe_owns_carries_every_evaluation(tmp_path: Path, explicit: str) -> None:
    """Providers cp-observe creates, OTLP to a loopback receiver: all 3 evaluations, at exit or an explicit shutdown."""
    with OtlpReceiver() as receiver:
        _, _, stats = _run(tmp_path, EXIT_ORDER="none", OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                           EXIT_EXPLICIT=explicit)
        assert receiver.wait_for(lambda r: r.span_names().count("evaluation context_precision") >= 3)
        names = receiver.span_names()
        metrics, events = receiver.metric_names(), receiver.log_records()
    assert names.count("evaluation context_precision") == 3
    assert names.count("retrieval kb") == 3
    assert stats["scored"] == 3, stats
    # The metrics and the gen_ai.evaluation.result events of those evaluations went out too, at the same exit.
    assert n.METRIC_SCORE in metrics, metrics
    assert len(events) == 3


def test_a_judge_slower_than_the_bound_is_cut_off_and_counted(tmp_path: Path) -> None:
    """A judge that answers after 60 s: the script exits within the bound, all 3 counted dropped/shutdown once."""
    with JudgeServer() as server:
        server.default = delay(60.0)
        run, elapsed, stats = _run(tmp_path, EXIT_ORDER="before", EXIT_JUDGE_URL=server.url, EXIT_BOUND="1")
    # The bound is 1 s from the script's last line to the end of its last exit hook (some slack for the SDK's
    # own shutdown and a loaded machine); the whole run, imports included, is far from the judge's 60 s.
    assert stats["exit_s"] < 3.0, stats
    assert elapsed < 30, elapsed
    assert stats["sampled"] == stats["dropped"] == 3, stats
    assert stats["reasons"] == {"dropped:shutdown": 3}
    warnings = [line for line in run.stderr.splitlines() if "were dropped" in line]
    assert len(warnings) == 1 and "dropped=3" in warnings[0], run.stderr
    assert "SPAN evaluation context_precision" not in run.stdout
