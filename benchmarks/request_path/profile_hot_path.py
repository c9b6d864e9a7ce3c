"""Where the decorators' request-path time goes: stage-by-stage differences, parts alone, and a cProfile.

1. Stages, interleaved, median thread-CPU µs per call: the hand-written wrapper; the wrapper with the
   unsampled processor attached (its ``on_end`` on a span shaped like ours); the decorator alone; with the
   unsampled processor; with the sampled one (instant judge).
2. Parts alone, median ns per operation: what each piece of ``_spans.start``/``finish``/``on_end`` costs.
3. cProfile of the decorator with the processor: the functions with the most own time.
4. Sampled at 1.0, to the last score: CPU per call on the calling thread and on the evaluator's, which the
   request path hands its work to (in a burst it runs between ticks; under sustained load it shares the GIL).

``--payload`` picks the shape, as in ``bench_hot_path.py``: a retriever returning ``str`` (the default),
``dict``, ``langchain``, ``llamaindex`` or ``haystack`` documents (the frameworks from ``.venv-bench``), or an
agent returning ``agent:str``, ``agent:dict``, ``agent:list`` or ``agent:chat``.

    .venv/bin/python benchmarks/request_path/profile_hot_path.py [--quick] [--payload dict]
    .venv-bench/bin/python benchmarks/request_path/profile_hot_path.py --payload haystack
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _common and _peers
import _common as c
import bench_hot_path as hp

import cp_observe
from cp_observe import _names as n
from cp_observe._capture._answer import answer_text
from cp_observe._capture._extract import extract_contexts
from cp_observe._capture._serialize import metadata_json
from cp_observe._capture._payloads import PAYLOADS, Payload

_ROOT = str(Path(__file__).resolve().parents[2]) + "/"  # the checkout: cProfile rows show paths below it
_PAYLOADS = (*c.RETRIEVE_SHAPES, *(f"agent:{shape}" for shape in c.AGENT_SHAPES))


def _shape(payload: str) -> tuple[str, str, Any]:
    """(group, shape, return value) of a ``--payload`` choice."""
    group, _, shape = payload.rpartition(":")
    group = group or "retrieve"
    return group, shape, hp.payload_value(group, shape)


def _functions(payload: str, tracer: Any) -> tuple[Any, Any, Any]:
    """The undecorated function, the hand-written wrapper around it (on ``tracer``) and the cp_observe decorator."""
    group, shape, value = _shape(payload)
    fn = hp._returning(value, "sync")
    if group == "agent":
        return fn, hp.wrapper_agent(tracer, fn, "sync", shape), cp_observe.agent(name="assistant")
    return fn, hp.wrapper_retriever(tracer, fn, "sync", shape), cp_observe.retriever(name="kb")


def _thread_ns(fn: Callable[[], Any], calls: int) -> float:
    gc.collect()
    start = time.thread_time_ns()
    for _ in range(calls):
        fn()
    return (time.thread_time_ns() - start) / calls


def stages(rounds: int, calls: int, payload: str) -> list[list[str]]:
    """Median thread-CPU µs per call of each stage, interleaved and shuffled per round."""
    sink_only, unsampled, sampled = hp._pipeline(None), hp._pipeline(0.0), hp._pipeline(1.0)
    fn, wrapped, decorator = _functions(payload, sink_only.provider.get_tracer("w"))
    _, wrapped_u, _ = _functions(payload, unsampled.provider.get_tracer("w"))
    decorated = decorator(fn)
    label = "@agent" if payload.startswith("agent:") else "@retriever"
    cases: list[tuple[str, Callable[[str], Any], hp.Pipeline]] = [
        ("hand-written wrapper", wrapped, sink_only),
        ("hand-written wrapper + processor (unsampled)", wrapped_u, unsampled),
        (f"{label}, no processor", decorated, sink_only),
        (f"{label} + processor (unsampled)", decorated, unsampled),
        (f"{label} + processor (sampled, instant judge)", decorated, sampled),
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


def _shape_parts(payload: str) -> list[tuple[str, Callable[[], Any]]]:
    """What reading the payload costs: cp_observe's extraction (or answer rule) against the wrapper's own code."""
    group, shape, value = _shape(payload)
    if group == "agent":
        answer = hp.ANSWERS[shape]
        return [
            (f"answer_text({shape})", lambda: answer_text(value, 20_000)),
            (f"wrapper's own answer read ({shape}), for comparison", lambda: answer(value)),
        ]
    documents = hp.DOCUMENTS[shape]
    items: list[tuple[str, Callable[[], Any]]] = [
        (f"extract_contexts(5 {shape})", lambda: extract_contexts(value, max_items=50, max_chars=20_000)),
        (f"wrapper's own document loop (5 {shape}), for comparison", lambda: documents(value)),
    ]
    if shape != "str":
        extracted = extract_contexts(value, max_items=50, max_chars=20_000).contexts
        items.append((f"metadata_json of 5 {shape} metadata (after extraction)",
                      lambda: [metadata_json(item.metadata, 4096) for item in extracted]))
    return items


def parts(calls: int, payload: str) -> list[list[str]]:
    """Median ns of the pieces on the path, each alone."""
    pipe = hp._pipeline(0.0)
    assert pipe.processor is not None
    pipe.select()
    fn, _, decorator = _functions(payload, pipe.provider.get_tracer("unused"))
    decorator(fn)(c.QUERY)
    span = pipe.sink.spans[-1]
    pipe.sink.clear()
    tracer = pipe.provider.get_tracer("parts")
    live = tracer.start_span("scratch")
    small = {n.CP_SAMPLED: False, n.INPUT_VALUE: c.QUERY}
    docs = hp._docs_str(c.CONTEXTS)
    key = (1, 2)

    def payload_cycle() -> None:
        PAYLOADS.put(key, Payload(query=c.QUERY, contexts=list(c.CONTEXTS), answer=None))
        PAYLOADS.take(key)

    kind = "agent" if payload.startswith("agent:") else "retriever"
    items: list[tuple[str, Callable[[], Any]]] = [
        *_shape_parts(payload),
        ("span.set_attributes: the context_precision.sampled flag (+ input.value)", lambda: live.set_attributes(small)),
        ("span.set_attributes: 6 document attributes", lambda: live.set_attributes(docs)),
        (f"processor.on_end, unsampled {kind} span", lambda: pipe.processor.on_end(span)),  # type: ignore[union-attr]
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


def profile(calls: int, sample_rate: float, payload: str) -> str:
    """cProfile of the decorator with the processor at ``sample_rate``: top functions by own time."""
    pipe = hp._pipeline(sample_rate)
    pipe.select()
    fn, _, decorator = _functions(payload, pipe.provider.get_tracer("unused"))
    decorated = decorator(fn)
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
        where = filename.split("site-packages/")[-1].split(_ROOT)[-1]
        rows.append([f"{where}:{line} {name}", ncalls // calls if calls else ncalls,
                     f"{tottime / calls * 1e6:.2f}", f"{tottime / total * 100:.1f} %", f"{cumtime / calls * 1e6:.2f}"])
    return c.markdown_table(["function", "calls / call", "own µs / call (profiled)", "share of own time",
                             "cumulative µs / call"], rows)


def evaluator_cost(calls: int, payload: str) -> list[list[str]]:
    """CPU per sampled call on the calling thread, and on every other thread (the evaluator), to the last score.

    Each batch of sampled calls is followed by ``force_flush`` (every evaluation judged and emitted); the
    process's CPU time less the calling thread's is the evaluator's work for that batch, which at
    ``sample_rate=1.0`` in a process with no idle time shares the GIL with the application.
    """
    pipe = hp._pipeline(1.0)
    fn, _, decorate = _functions(payload, pipe.provider.get_tracer("evaluator"))
    decorated = decorate(fn)
    pipe.select()
    for _ in range(200):  # warm-up: first-call paths, the evaluator's loop
        decorated(c.QUERY)
    pipe.drain()
    caller, others = [], []
    for _ in range(5):
        gc.collect()
        process, thread = time.process_time_ns(), time.thread_time_ns()
        for _ in range(calls):
            decorated(c.QUERY)
        pipe.drain()
        spent_thread = time.thread_time_ns() - thread
        caller.append(spent_thread / calls / 1000)
        others.append((time.process_time_ns() - process - spent_thread) / calls / 1000)
    return [["calling thread (the call, on_end, the hand-over)", f"{c.median(caller):.1f}"],
            ["other threads (assembly, instant judge, MAP, evaluation span + event + metrics)",
             f"{c.median(others):.1f}"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--payload", choices=_PAYLOADS, default="str",
                        help="the return shape profiled (default: a retriever returning list[str])")
    args = parser.parse_args(argv)
    rounds, calls = (5, 500) if args.quick else (21, 2000)
    payload = args.payload
    try:
        _shape(payload)
    except ImportError as exc:
        parser.error(f"--payload {payload}: {exc.name} is not installed here; use .venv-bench")
    label = "@agent" if payload.startswith("agent:") else "@retriever"
    print(f"## Hot-path profile, {label} returning {payload.rpartition(':')[2]}\n")
    print(f"Machine: {c.machine_line()}\n")
    print(f"### Stages (median thread-CPU µs per call, {rounds} interleaved rounds x {calls} calls)\n")
    print(c.markdown_table(["stage", "µs/call", "vs wrapper (µs)", "x wrapper"], stages(rounds, calls, payload)))
    print("\n### Parts alone (median thread-CPU ns per operation)\n")
    print(c.markdown_table(["part", "ns"], parts(2_000 if args.quick else 20_000, payload)))
    print(f"\n### cProfile, {label} + processor (unsampled): top own time\n")
    print(profile(2_000 if args.quick else 20_000, 0.0, payload))
    print(f"\n### cProfile, {label} + processor (sampled, instant judge): top own time\n")
    print(profile(2_000 if args.quick else 20_000, 1.0, payload))
    evaluator_calls = 500 if args.quick else 3_000
    print(f"\n### Sampled at 1.0: CPU µs per call, median of 5 batches of {evaluator_calls} calls, each flushed\n")
    print(c.markdown_table(["where", "µs per call"], evaluator_cost(evaluator_calls, payload)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
