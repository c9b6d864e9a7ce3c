"""What the per-data-source sampler costs the request path, against today's flat trace-id ratio in the same run.

A decorated ``@cp_observe.retriever`` returning five short contexts, with a ``ContextPrecisionProcessor`` on an SDK
tracer provider whose spans go to an in-process list. Variants, interleaved in a shuffled order each round:

- **flat, unsampled**: no budget, ``sample_rate=0`` (a ``TraceIdRatio``, today's sampler);
- **allocated, unsampled**: ``max_evaluations_per_minute`` set (a ``SourceRates``), the data source's rate 0;
- **flat, sampled** and **allocated, sampled**: the same at rate 1 (what capturing for a higher per-data-source
  rate costs a call it samples: the content kept for the judge, the evaluation queued).

Medians over rounds of wall-clock µs per call and the ratio to the flat row of the same sampling.

    .venv/bin/python benchmarks/budget/bench_sampler_cost.py [--rounds N] [--calls N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import block_network, machine_line, markdown_table
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import cp_observe
from cp_observe import ContextPrecisionProcessor
from cp_observe.testing import FakeJudge, IsolatedRuntime

CONTEXTS = [f"context {i}: Paris is the capital of France." for i in range(5)]


class ListSink(SpanExporter):
    """Keeps nothing: appends and clears, so memory stays flat."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.spans.extend(spans)
        if len(self.spans) > 10_000:
            self.spans.clear()
        return SpanExportResult.SUCCESS


def variant(allocated: bool, sampled: bool) -> tuple[Any, Any, Any]:
    """A provider, a processor and an isolated runtime for one variant (the decorated function is built per call)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ListSink()))
    runtime = IsolatedRuntime(tracer_provider=provider)
    runtime.__enter__()
    options: dict[str, Any] = {"queue_size": 1_000_000, "max_pending_traces": 1_000_000}
    if allocated:
        options["max_evaluations_per_minute"] = 1e9
    processor = ContextPrecisionProcessor(FakeJudge(), tracer_provider=provider,
                                          sample_rate=1.0 if sampled or allocated else 0.0, **options)
    if allocated:
        processor.sampler.install({"kb": 1.0 if sampled else 0.0}, 1.0 if sampled else 0.0)
    provider.add_span_processor(processor)
    return provider, processor, runtime


def main() -> None:
    """Interleave the four variants and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short run (3 rounds of 100 calls)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.calls = 3, 100
    blocked = block_network()  # the judge is a FakeJudge: nothing is reached

    @cp_observe.retriever(name="kb")
    def search(question: str) -> list[str]:
        return CONTEXTS

    names = [("flat", False), ("allocated", False), ("flat", True), ("allocated", True)]
    timings: dict[tuple[str, bool], list[float]] = {n: [] for n in names}
    rng = random.Random(38)
    for _ in range(args.rounds):
        order = names[:]
        rng.shuffle(order)
        for name, sampled in order:
            provider, processor, runtime = variant(name == "allocated", sampled)
            try:
                for i in range(50):
                    search(f"warm {i}")
                began = time.perf_counter()
                for i in range(args.calls):
                    search(f"what is the capital of France? {i}")
                timings[(name, sampled)].append((time.perf_counter() - began) / args.calls * 1e6)
                processor.force_flush(60_000)
            finally:
                processor.shutdown()
                runtime.__exit__(None, None, None)
                provider.shutdown()
    print(machine_line())
    print(f"{args.rounds} rounds of {args.calls} calls, interleaved\n")
    rows = []
    for name, sampled in names:
        median = statistics.median(timings[(name, sampled)])
        base = statistics.median(timings[("flat", sampled)])
        rows.append([f"{name}, {'sampled' if sampled else 'unsampled'}", f"{median:.1f}", f"{median / base:.2f}x"])
    print(markdown_table(["variant", "µs per call (median)", "against flat, same sampling"], rows))
    print(f"\nNon-loopback network attempts refused during the run: {blocked.total}")


if __name__ == "__main__":
    main()
