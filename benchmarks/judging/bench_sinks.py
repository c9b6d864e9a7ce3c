"""Evaluation sinks: what a sink costs the evaluator thread, and how fast the Phoenix sink delivers.

1. **Emission cost.** ``Emitter.scored`` (evaluation span, event, metrics) per evaluation, on the thread that runs
   it, with no sink (the baseline), with a Phoenix sink whose Phoenix is down (nothing listens: every send fails
   and backs off on the sink's own thread), and with a sink stuck in ``send`` (its queue full: every offer is a
   counted drop), then the sink hook alone (build the record, offer it). The sink's HTTP never runs on this
   thread; what a sink adds there is the hook, and the GIL its thread takes while it sends.
2. **Delivery** (``--phoenix``, needs ``.venv-phoenix``): N retrieval spans with 5 documents exported to a real
   Phoenix on loopback, then N evaluations through ``SinkRunner(PhoenixSink)``: evaluations/s delivered (span
   annotation + 5 document annotations each), batch size 100 vs 1 (the baseline: one request pair per evaluation).

    .venv/bin/python benchmarks/judging/bench_sinks.py [--quick] [--phoenix]
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _common and _peers
import _common as c
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanContext, TraceFlags

from cp_observe import _names as n
from cp_observe._config._settings import Settings
from cp_observe._emission._emit import Emitter, Target
from cp_observe._emission._phoenix import PhoenixSink
from cp_observe._emission._sinks import Delivery, EvaluationRecord, SinkRunner
from cp_observe._types import ScoreResult, Usage, Verdict

ROOT = Path(__file__).resolve().parents[2]
DOCS = 5


class StuckSink:
    """A sink whose ``send`` never returns until released: its queue fills and every further offer drops."""

    def __init__(self) -> None:
        self.release = threading.Event()

    @property
    def name(self) -> str:
        return "stuck"

    def send(self, records: Sequence[EvaluationRecord]) -> list[Delivery]:
        self.release.wait()
        return [Delivery.SENT] * len(records)


def _result() -> ScoreResult:
    verdicts = tuple(Verdict(i, i % 2 == 0, f"reason {i}") for i in range(DOCS))
    return ScoreResult(score=0.76, reason="built from the verdicts", verdicts=verdicts, average_precision=0.7555,
                       judge_model="lexical", reference="output", usage=Usage(1, 100, 20))


def _attributes() -> dict[str, Any]:
    return {n.document_attribute(i, "content"): f"document {i}" for i in range(DOCS)}


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def emission_cost(evaluations: int, rounds: int) -> list[list[str]]:
    """µs per ``Emitter.scored`` call, best and median of ``rounds`` (interleaved), per variant."""
    result, attributes = _result(), _attributes()
    stuck = StuckSink()
    variants: dict[str, Any] = {
        "no sink (baseline)": (),
        "Phoenix sink, Phoenix down": (SinkRunner(PhoenixSink(f"http://127.0.0.1:{_closed_port()}", timeout_s=1),
                                                  meter_provider=MeterProvider(),
                                                  options=Settings(sink_queue_size=evaluations * rounds)),),
        "stuck sink, queue full (drops)": (SinkRunner(stuck, meter_provider=MeterProvider(),
                                                       options=Settings(sink_queue_size=10)),),
    }
    emitters: dict[str, Emitter] = {}
    for label, sinks in variants.items():
        provider = TracerProvider()
        provider.add_span_processor(c.ListSink())
        emitters[label] = Emitter(tracer_provider=provider, meter_provider=MeterProvider(),
                                  logger_provider=LoggerProvider(), queue_depth=lambda: 0, sinks=sinks)
    samples: dict[str, list[float]] = {label: [] for label in variants}
    for r in range(rounds):  # variants interleaved round by round, so machine noise spreads evenly
        for label, emitter in emitters.items():
            start = time.perf_counter()
            for i in range(evaluations):
                context = SpanContext(trace_id=r * evaluations + i + 1, span_id=i + 1, is_remote=False,
                                      trace_flags=TraceFlags(TraceFlags.SAMPLED))
                target = Target(context, "kb", "helper", "output", "ratio", attributes)
                emitter.scored(target, result, start_ns=0, end_ns=1_000_000, model="lexical")
            samples[label].append((time.perf_counter() - start) / evaluations * 1e6)
    rows: list[list[str]] = []
    baseline = min(samples["no sink (baseline)"])
    for label, sinks in variants.items():
        us = min(samples[label])  # the least disturbed round: the machine is shared
        stats = sinks[0].stats() if sinks else {}
        rows.append([label, f"{us:.1f}", f"{c.median(samples[label]):.1f}", f"{us / baseline:.2f}x",
                     f"{stats.get('offered', 0)} / {stats.get('dropped', 0)}" if sinks else "—"])
    stuck.release.set()
    for sinks in variants.values():
        for runner in sinks:
            runner.shutdown(1.0)
    return rows


def hook_cost(calls: int) -> list[list[str]]:
    """µs of the sink hook alone (``Emitter._to_sinks``: build the record, offer it), best of 5 timings."""
    import timeit

    from opentelemetry.trace import NonRecordingSpan

    result, attributes = _result(), _attributes()
    context = SpanContext(trace_id=1, span_id=1, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    target = Target(context, "kb", "helper", "output", "ratio", attributes)
    span = NonRecordingSpan(context)
    stuck = StuckSink()
    rows: list[list[str]] = []
    for label, runner in (("accepted (queue has room)", SinkRunner(StuckSink(), meter_provider=MeterProvider(),
                                                                    options=Settings(sink_queue_size=100 * calls),
                                                                    linger_s=3600)),
                          ("dropped (queue full, counted)", SinkRunner(stuck, meter_provider=MeterProvider(),
                                                                        options=Settings(sink_queue_size=1)))):
        emitter = Emitter(tracer_provider=TracerProvider(), meter_provider=MeterProvider(),
                          logger_provider=LoggerProvider(), queue_depth=lambda: 0, sinks=(runner,))
        # ``scored`` builds the explanation once for the span, the log record and the sinks: not the hook's cost.
        explanation = emitter._explanation(result)
        timer = timeit.Timer(lambda e=emitter, x=explanation: e._to_sinks(target, span, "pass", result, "lexical",
                                                                         explanation=x, identity=e.identity))
        best = min(timer.repeat(repeat=5, number=calls)) / calls * 1e6
        rows.append([label, f"{best:.1f}"])
        runner.sink.release.set()  # type: ignore[attr-defined]
        runner.shutdown(1.0)
    return rows


def delivery(count: int) -> list[list[str]]:
    """Evaluations/s delivered to a real Phoenix, batch 100 vs batch 1."""
    sys.path.insert(0, str(ROOT))
    import tempfile

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from tests.phoenix_support import phoenix_server

    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as work, phoenix_server(Path(work)) as phoenix:
        project = "bench-sinks"
        provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces")))
        tracer = provider.get_tracer("bench")
        ids: list[tuple[int, int]] = []
        for _ in range(2 * count):
            with tracer.start_as_current_span("retrieval kb", attributes={**_attributes(),
                                              n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER}) as span:
                ids.append((span.get_span_context().trace_id, span.get_span_context().span_id))
        provider.force_flush(60_000)
        phoenix.wait_for_spans(project, lambda got: len(got) >= 2 * count, deadline_s=120)
        verdicts = tuple(v.relevant for v in _result().verdicts)
        totals: dict[str, list[float]] = {"batch 1 (baseline)": [0.0, 0, 0, 0, 0], "batch 100": [0.0, 0, 0, 0, 0]}
        half = count // 2
        chunks = [ids[k * half:(k + 1) * half] for k in range(4)]
        for (label, batch), chunk in zip((("batch 1 (baseline)", 1), ("batch 100", 100)) * 2, chunks, strict=True):
            records = [EvaluationRecord(trace_id=t, span_id=s, evaluation_span_id=s, score=0.76, label="pass",
                                        explanation="x", average_precision=0.7555, verdicts=verdicts,
                                        reasons=tuple(f"reason {k}" for k in range(DOCS)), documents=DOCS,
                                        judge_model="m", annotator_kind="LLM", prompt_version="cp-2",
                                        data_source="kb", agent_name=None, reference="output")
                       for t, s in chunk]
            runner = SinkRunner(PhoenixSink(phoenix.url), meter_provider=MeterProvider(),
                                options=Settings(sink_batch_size=batch, sink_queue_size=len(records)))
            start = time.perf_counter()
            for record in records:
                runner.offer(record)
            runner.flush(600)
            total = totals[label]
            total[0] += time.perf_counter() - start
            stats = runner.stats()
            runner.shutdown(1.0)
            for k, key in enumerate(("offered", "sent", "failed", "dropped"), start=1):
                total[k] += stats[key]
        for label, (seconds, offered, sent, failed, dropped) in totals.items():
            rows.append([label, str(int(offered)), f"{seconds:.2f}", f"{sent / seconds:.0f}",
                         f"{int(sent)} / {int(failed)} / {int(dropped)}"])
        provider.shutdown()
    return rows


def main() -> int:
    """Print the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer evaluations and rounds")
    parser.add_argument("--phoenix", action="store_true", help="also measure delivery to a real Phoenix")
    args = parser.parse_args()
    blocked = c.block_network()
    print(c.machine_line())
    evaluations, rounds = (500, 3) if args.quick else (2000, 7)
    print(f"\n### Emission cost on the evaluator thread ({evaluations} evaluations x {rounds} rounds)\n")
    print(c.markdown_table(["variant", "µs / evaluation (best round)", "median round", "best vs baseline",
                            "offered / dropped"],
                           emission_cost(evaluations, rounds)))
    calls = 2000 if args.quick else 10000
    print(f"\n### The sink hook alone, on the evaluator thread ({calls} calls, best of 5)\n")
    print(c.markdown_table(["offer", "µs / evaluation"], hook_cost(calls)))
    if args.phoenix:
        count = 100 if args.quick else 300
        print(f"\n### Delivery to Phoenix on loopback ({count} evaluations, 5 documents each)\n")
        print(c.markdown_table(["variant", "evaluations", "seconds", "evaluations/s", "sent / failed / dropped"],
                               delivery(count)))
    print(f"\nnon-loopback connections refused: {blocked.total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
