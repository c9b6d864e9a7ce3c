"""Where the decorators' request-path time goes: stage-by-stage differences, parts alone, and a cProfile.

1. Stages, interleaved, median thread-CPU µs per call: the hand-written wrapper; the wrapper with the
   unsampled processor attached (its ``on_end`` on a span shaped like ours); ``@retriever`` alone;
   ``@retriever`` with the unsampled processor; with the sampled one (instant judge).
2. Parts alone, median ns per operation: what each piece of ``_spans.start``/``finish``/``on_end`` costs.
3. cProfile of ``@retriever`` with the processor: the functions with the most own time.

    .venv/bin/python benchmarks/profile_hot_path.py [--quick]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import _common as c
import bench_hot_path as hp

import cp_observe
from cp_observe import _names as n
from cp_observe._capture._extract import extract_contexts
from cp_observe._config._runtime import PAYLOADS, Payload


def _thread_ns(fn: Callable[[], Any], calls: int) -> float:
    gc.collect()
    start = time.thread_time_ns()
    for _ in range(calls):
        fn()
    return (time.thread_time_ns() - start) / calls


def stages(rounds: int, calls: int) -> list[list[str]]:
    """Median thread-CPU µs per call of each stage, interleaved and shuffled per round."""
    sink_only, unsampled, sampled = hp._pipeline(None), hp._pipeline(0.0), hp._pipeline(1.0)
    fn = hp._returning(c.CONTEXTS, "sync")
    wrapped = hp.wrapper_retriever(sink_only.provider.get_tracer("w"), fn, "sync")
    wrapped_u = hp.wrapper_retriever(unsampled.provider.get_tracer("w"), fn, "sync")
    decorated = cp_observe.retriever(name="kb")(fn)
    cases: list[tuple[str, Callable[[str], Any], hp.Pipeline]] = [
        ("hand-written wrapper", wrapped, sink_only),
        ("hand-written wrapper + processor (unsampled)", wrapped_u, unsampled),
        ("@retriever, no processor", decorated, sink_only),
        ("@retriever + processor (unsampled)", decorated, unsampled),
        ("@retriever + processor (sampled, instant judge)", decorated, sampled),
    ]
    samples: dict[str, list[float]] = {label: [] for label, _, _ in cases}
    rng = random.Random(3)
    for _ in range(rounds + 1):
        rng.shuffle(cases)
        for label, call, pipe in cases:
            pipe.select()
            samples[label].append(_thread_ns(lambda f=call: f(c.QUERY), calls) / 1000)
            pipe.drain()
    base = c.median(samples["hand-written wrapper"][1:])
    rows = []
    for label in samples:
        value = c.median(samples[label][1:])
        rows.append([label, f"{value:.2f}", f"{value - base:+.2f}", f"{value / base:.2f}x"])
    return rows


def parts(calls: int) -> list[list[str]]:
    """Median ns of the pieces on the path, each alone."""
    pipe = hp._pipeline(0.0)
    assert pipe.processor is not None
    pipe.select()
    decorated = cp_observe.retriever(name="kb")(hp._returning(c.CONTEXTS, "sync"))
    decorated(c.QUERY)
    span = pipe.sink.spans[-1]
    pipe.sink.clear()
    tracer = pipe.provider.get_tracer("parts")
    live = tracer.start_span("scratch")
    small = {n.CP_SAMPLED: False, n.INPUT_VALUE: c.QUERY}
    docs = hp._document_attributes(c.CONTEXTS)
    key = (1, 2)

    def payload_cycle() -> None:
        PAYLOADS.put(key, Payload(query=c.QUERY, contexts=list(c.CONTEXTS), answer=None))
        PAYLOADS.take(key)

    items: list[tuple[str, Callable[[], Any]]] = [
        (
            "extract_contexts(5 str) (plain string lists now skip it)",
            lambda: extract_contexts(c.CONTEXTS, max_items=50, max_chars=20_000),
        ),
        ("extract_contexts(5 dict with metadata)", lambda: extract_contexts(c.DOCS, max_items=50, max_chars=20_000)),
        ("wrapper's own document loop (5 str), for comparison", lambda: hp._document_attributes(c.CONTEXTS)),
        ("wrapper's own document loop (5 dict, json.dumps metadata)", lambda: hp._document_attributes(c.DOCS)),
        ("span.set_attributes: the context_precision.sampled flag (+ input.value)", lambda: live.set_attributes(small)),
        ("span.set_attributes: 6 document attributes", lambda: live.set_attributes(docs)),
        ("processor.on_end, unsampled retriever span", lambda: pipe.processor.on_end(span)),  # type: ignore[union-attr]
        ("  PAYLOADS.take alone (dict pop, miss; on_end skips it for unmarked spans)", lambda: PAYLOADS.take(key)),
        ("  of which span.attributes (property)", lambda: span.attributes),
        ("  of which sampler(trace_id)", lambda: pipe.processor.sampler(span.context.trace_id)),  # type: ignore[union-attr]
        ("sampled only: PAYLOADS put + take", payload_cycle),
        ("tracer.start_span(3 attributes) + end, sink only", lambda: tracer.start_span("x", attributes=docs).end()),
    ]
    rows = []
    for label, fn in items:
        values = [_thread_ns(fn, calls) for _ in range(7)]
        rows.append([label, f"{c.median(values):.0f}"])
    live.end()
    pipe.sink.clear()
    return rows


def profile(calls: int, sample_rate: float) -> str:
    """cProfile of ``@retriever`` with the processor at ``sample_rate``: top functions by own time."""
    pipe = hp._pipeline(sample_rate)
    pipe.select()
    decorated = cp_observe.retriever(name="kb")(hp._returning(c.CONTEXTS, "sync"))
    for _ in range(200):
        decorated(c.QUERY)
    pipe.drain()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        decorated(c.QUERY)
    profiler.disable()
    pipe.drain()
    stats = pstats.Stats(profiler)
    total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
    rows = []
    ranked = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in ranked[:18]:
        where = filename.split("site-packages/")[-1].split("/work/main/")[-1]
        rows.append([f"{where}:{line} {name}", ncalls // calls if calls else ncalls,
                     f"{tottime / calls * 1e6:.2f}", f"{tottime / total * 100:.1f} %", f"{cumtime / calls * 1e6:.2f}"])
    return c.markdown_table(["function", "calls / call", "own µs / call (profiled)", "share of own time",
                             "cumulative µs / call"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    rounds, calls = (5, 500) if args.quick else (21, 2000)
    print("## Hot-path profile\n")
    print(f"Machine: {c.machine_line()}\n")
    print(f"### Stages (median thread-CPU µs per call, {rounds} interleaved rounds x {calls} calls)\n")
    print(c.markdown_table(["stage", "µs/call", "vs wrapper (µs)", "x wrapper"], stages(rounds, calls)))
    print("\n### Parts alone (median thread-CPU ns per operation)\n")
    print(c.markdown_table(["part", "ns"], parts(2_000 if args.quick else 20_000)))
    print("\n### cProfile, @retriever + processor (unsampled): top own time\n")
    print(profile(2_000 if args.quick else 20_000, 0.0))
    print("\n### cProfile, @retriever + processor (sampled, instant judge): top own time\n")
    print(profile(2_000 if args.quick else 20_000, 1.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
