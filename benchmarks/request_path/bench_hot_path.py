"""The decorators' request-path cost, against a hand-written OpenTelemetry wrapper and the peers' decorators.

Every variant of a shape decorates the same function, called with the same query and returning the same
value: in the "retrieve" group five contexts of 500 characters as ``list[str]``, LangChain-style dicts, and
the real LangChain ``Document``, LlamaIndex ``NodeWithScore`` and Haystack ``Document`` classes; in the
"agent" group one answer as a str, a dict, a list of str and chat messages; the "turn" group is an agent
calling a retriever (two spans); the "stream" group a decorated generator; the "rerank" group ``@reranker``
(five input documents in, the same five reordered out) against ``@retriever`` returning them, under each
pipeline: what a reranker's span costs beyond a retriever's. Each shape's baseline is a
hand-written OpenTelemetry wrapper that records the same content ``@cp_observe.retriever`` / ``.agent``
records for it (checked at set-up, span by span). Every OpenTelemetry-based pipeline ends in the same
in-process sink (``ListSink``: append the span). Variants run interleaved in one process, in a shuffled order
each round, ``--rounds`` rounds of ``--calls`` calls, each batch right after a batch of its baseline; the
tables show medians over rounds of wall-clock and calling-thread CPU µs per call, and of the paired ratios.

Run it from the bench venv (peers and frameworks installed) or from the main venv (they show as not
installed)::

    .venv-bench/bin/python benchmarks/request_path/bench_hot_path.py [--quick] [--only-cp] \
        [--shapes retrieve:haystack,agent]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _common and _peers
import _common as c
import _peers
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import Tracer

import cp_observe
from cp_observe import ContextPrecisionProcessor

Fn = Callable[[str], Any]
_QUEUE = 1_000_000  # large enough that the sampled variants never drop within a batch
GROUPS = ("retrieve", "agent", "turn", "stream", "rerank")
_UNSAMPLED, _SAMPLED = " + processor, unsampled", " + processor, sampled"
# The same sampled pipeline with two segments configured: one the decorated span carries (so a value
# is read), one it does not (so the enclosing span is tried, then "none"). Segments are resolved on the evaluator
# thread; this row shows what that costs the calling thread, beside the sampled row without segments.
_SEGMENTED = " + processor, sampled, segments"
_BENCH_SEGMENTS = "gen_ai.operation.name,retriever.version"
#: The rerank group's payloads name the pipeline both its rows run under (its baseline is @retriever there).
_RERANK_PIPES = {"no processor": "", "unsampled": _UNSAMPLED, "sampled": _SAMPLED}
_PAYLOADS = {"retrieve": c.RETRIEVE_SHAPES, "agent": c.AGENT_SHAPES, "turn": ("str",), "stream": ("str",),
             "rerank": tuple(_RERANK_PIPES)}


def _noop() -> None:
    return None


@dataclass
class Variant:
    """One row: a decorated function and what to do around its timed batch (outside the timing)."""

    group: str  # "retrieve", "agent" (one span each), "turn" (agent calling a retriever) or "stream" (a generator)
    name: str
    payload: str  # the shape of the return value: one of _PAYLOADS[group]
    mode: str  # "sync" or "async"
    fn: Fn | None
    before: Callable[[], None] = _noop
    after: Callable[[], None] = _noop
    baseline: bool = False
    note: str = ""
    peer: bool = False
    complete: bool = True  # a peer: records all the content cp_observe records for this shape
    wall_us: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)
    wall_ratio: list[float] = field(default_factory=list)  # to the baseline batch run right before this one
    cpu_ratio: list[float] = field(default_factory=list)


# --- the functions being decorated ------------------------------------------------------------------------------------


def _returning(value: Any, mode: str) -> Fn:
    if mode == "sync":

        def retrieve(query: str) -> Any:
            return value

        return retrieve

    async def aretrieve(query: str) -> Any:
        return value

    return aretrieve


def _turn(retrieve: Fn, mode: str) -> Fn:
    """An answering function that calls ``retrieve`` and answers with a fixed sentence."""
    if mode == "sync":

        def answer(query: str) -> str:
            retrieve(query)
            return c.ANSWER

        return answer

    async def aanswer(query: str) -> str:
        await retrieve(query)
        return c.ANSWER

    return aanswer


# --- the hand-written OpenTelemetry wrapper (the baseline) ------------------------------------------------------------
# What a careful engineer writes by hand for each shape: the same span name and attributes as cp_observe's
# decorators, reading the known class's fields directly and json.dumps-ing the metadata. It does not truncate,
# redact, guard against failures or write cp_observe's bookkeeping flag, so the decorators are charged for those.

_RETRIEVER_START = {
    "gen_ai.operation.name": "retrieval",
    "gen_ai.data_source.id": "kb",
    "openinference.span.kind": "RETRIEVER",
}
_AGENT_START = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.agent.name": "assistant",
    "openinference.span.kind": "AGENT",
}


def _docs_str(result: list[str]) -> dict[str, Any]:
    attributes: dict[str, Any] = {"context_precision.context.count": len(result)}
    for i, text in enumerate(result):
        attributes[f"retrieval.documents.{i}.document.content"] = text
    return attributes


def _docs_dict(result: list[dict[str, Any]]) -> dict[str, Any]:
    attributes: dict[str, Any] = {"context_precision.context.count": len(result)}
    for i, doc in enumerate(result):
        prefix = f"retrieval.documents.{i}.document."
        attributes[prefix + "content"] = doc["page_content"]
        attributes[prefix + "metadata"] = json.dumps(doc["metadata"])
    return attributes


def _docs_langchain(result: list[Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {"context_precision.context.count": len(result)}
    for i, doc in enumerate(result):
        prefix = f"retrieval.documents.{i}.document."
        attributes[prefix + "content"] = doc.page_content
        if doc.id is not None:
            attributes[prefix + "id"] = doc.id
        if doc.metadata:
            attributes[prefix + "metadata"] = json.dumps(doc.metadata)
    return attributes


def _docs_llamaindex(result: list[Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {"context_precision.context.count": len(result)}
    for i, scored in enumerate(result):
        node = scored.node
        prefix = f"retrieval.documents.{i}.document."
        attributes[prefix + "content"] = node.text
        attributes[prefix + "id"] = node.id_
        if scored.score is not None:
            attributes[prefix + "score"] = scored.score
        if node.metadata:
            attributes[prefix + "metadata"] = json.dumps(node.metadata)
    # The GenAI convention's document list: ids and scores (every document here has both).
    attributes["gen_ai.retrieval.documents"] = json.dumps(
        [{"id": scored.node.id_, "score": scored.score} for scored in result], ensure_ascii=False)
    return attributes


def _docs_haystack(result: list[Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {"context_precision.context.count": len(result)}
    for i, doc in enumerate(result):
        prefix = f"retrieval.documents.{i}.document."
        attributes[prefix + "content"] = doc.content
        attributes[prefix + "id"] = doc.id
        if doc.score is not None:
            attributes[prefix + "score"] = doc.score
        if doc.meta:
            attributes[prefix + "metadata"] = json.dumps(doc.meta)
    attributes["gen_ai.retrieval.documents"] = json.dumps(
        [{"id": doc.id, "score": doc.score} for doc in result], ensure_ascii=False)
    return attributes


#: The wrapper's after-call attributes, per retrieve shape.
DOCUMENTS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "str": _docs_str, "dict": _docs_dict, "langchain": _docs_langchain, "llamaindex": _docs_llamaindex,
    "haystack": _docs_haystack,
}


def _answer_chat(result: list[dict[str, str]]) -> str:
    return next(message["content"] for message in reversed(result) if message["role"] == "assistant")


#: The wrapper's ``output.value`` text, per agent shape (cp_observe's answer rule, written out for that shape).
ANSWERS: dict[str, Callable[[Any], str]] = {
    "str": lambda result: result,  # type: ignore[no-any-return]
    "dict": lambda result: result["answer"],  # type: ignore[no-any-return]
    "list": "\n".join,
    "chat": _answer_chat,
}


def wrapper_retriever(tracer: Tracer, func: Fn, mode: str, shape: str = "str") -> Fn:
    """The hand-written retriever span for a function returning ``shape``."""
    documents = DOCUMENTS[shape]
    if mode == "sync":

        @functools.wraps(func)
        def wrapped(query: str) -> Any:
            with tracer.start_as_current_span("retrieval kb", attributes=_RETRIEVER_START) as span:
                span.set_attributes({"input.value": query, "gen_ai.retrieval.query.text": query})
                result = func(query)
                span.set_attributes(documents(result))
                return result

        return wrapped

    @functools.wraps(func)
    async def awrapped(query: str) -> Any:
        with tracer.start_as_current_span("retrieval kb", attributes=_RETRIEVER_START) as span:
            span.set_attributes({"input.value": query, "gen_ai.retrieval.query.text": query})
            result = await func(query)
            span.set_attributes(documents(result))
            return result

    return awrapped


def wrapper_agent(tracer: Tracer, func: Fn, mode: str, shape: str = "str") -> Fn:
    """The hand-written agent span for a function returning ``shape``."""
    answer = ANSWERS[shape]
    if mode == "sync":

        @functools.wraps(func)
        def wrapped(query: str) -> Any:
            with tracer.start_as_current_span("invoke_agent assistant", attributes=_AGENT_START) as span:
                span.set_attribute("input.value", query)
                result = func(query)
                span.set_attribute("output.value", answer(result))
                return result

        return wrapped

    @functools.wraps(func)
    async def awrapped(query: str) -> Any:
        with tracer.start_as_current_span("invoke_agent assistant", attributes=_AGENT_START) as span:
            span.set_attribute("input.value", query)
            result = await func(query)
            span.set_attribute("output.value", answer(result))
            return result

    return awrapped


# --- pipelines --------------------------------------------------------------------------------------------------------


@dataclass
class Pipeline:
    """A tracer provider ending in a ``ListSink``, optionally with a ContextPrecisionProcessor."""

    provider: TracerProvider
    sink: c.ListSink
    processor: ContextPrecisionProcessor | None
    sample_rate: float

    def select(self) -> None:
        c.use_cp_provider(self.provider, self.sample_rate)

    def drain(self) -> None:
        if self.processor is not None:
            self.processor.force_flush(120_000)
        self.sink.clear()


def _pipeline(sample_rate: float | None, segments: str | None = None) -> Pipeline:
    provider, sink = TracerProvider(), c.ListSink()
    provider.add_span_processor(sink)
    processor = None
    if sample_rate is not None:
        eval_tracer, meter, logger = c.cp_providers()
        processor = ContextPrecisionProcessor(
            c.InstantJudge(),
            sample_rate=sample_rate,
            tracer_provider=eval_tracer,
            meter_provider=meter,
            logger_provider=logger,
            queue_size=_QUEUE,
            max_pending_traces=_QUEUE,
            **({"segments": segments} if segments else {}),
        )
        provider.add_span_processor(processor)
    return Pipeline(provider, sink, processor, sample_rate or 0.0)


# --- shapes -----------------------------------------------------------------------------------------------------------


def payload_value(group: str, payload: str) -> Any:
    """What the decorated function of a shape returns (``ImportError`` for a framework not installed)."""
    if group == "retrieve":
        return c.retrieve_payload(payload)
    if group == "agent":
        return c.agent_payload(payload)
    return c.CONTEXTS


def parse_shapes(spec: str | None) -> list[tuple[str, str]]:
    """The (group, payload) pairs ``--shapes`` selects: ``group``, ``group:payload`` or a payload of any group."""
    every = [(group, payload) for group in GROUPS for payload in _PAYLOADS[group]]
    if not spec:
        return every
    chosen: set[tuple[str, str]] = set()
    for token in (t.strip() for t in spec.split(",") if t.strip()):
        group, _, payload = token.partition(":")
        if payload:
            matched = [(g, p) for g, p in every if g == group and p == payload]
        elif token in GROUPS:
            matched = [(g, p) for g, p in every if g == token]
        else:
            matched = [(g, p) for g, p in every if p == token]
        if not matched:
            choices = ", ".join(f"{g}:{p}" for g, p in every)
            raise ValueError(f"--shapes: {token!r} matches no shape (groups: {', '.join(GROUPS)}; shapes: {choices})")
        chosen.update(matched)
    return [shape for shape in every if shape in chosen]


def _missing(group: str, payload: str, exc: ImportError) -> list[Variant]:
    note = f"not installed ({exc.name}); use .venv-bench"
    return [Variant(group, "every variant", payload, mode, None, note=note) for mode in ("sync", "async")]


# --- variants: bare, wrapper, cp_observe ------------------------------------------------------------------------------


def _single_variants(group: str, payload: str, pipes: dict[str, Pipeline], wrapper_pipe: Pipeline) -> list[Variant]:
    """A one-span shape: bare call, the hand-written wrapper, and the decorator with each pipeline."""
    tracer = wrapper_pipe.provider.get_tracer("bench.wrapper")
    value = payload_value(group, payload)
    hand = wrapper_retriever if group == "retrieve" else wrapper_agent
    decorator = cp_observe.retriever(name="kb") if group == "retrieve" else cp_observe.agent(name="assistant")
    label = "@cp_observe.retriever" if group == "retrieve" else "@cp_observe.agent"
    out: list[Variant] = []
    for mode in ("sync", "async"):
        fn = _returning(value, mode)
        out.append(Variant(group, "bare call", payload, mode, fn))
        out.append(Variant(group, "hand-written OTel wrapper", payload, mode, hand(tracer, fn, mode, payload),
                           after=wrapper_pipe.sink.clear, baseline=True))
        decorated = decorator(fn)
        for suffix, pipe in pipes.items():
            out.append(Variant(group, label + suffix, payload, mode, decorated, before=pipe.select, after=pipe.drain))
    return out


def _turn_fns(tracer: Tracer, mode: str) -> tuple[Fn, Fn]:
    """The hand-written turn and the decorated one."""
    fn = _returning(c.CONTEXTS, mode)
    hand = wrapper_agent(tracer, _turn(wrapper_retriever(tracer, fn, mode), mode), mode)
    return hand, cp_observe.agent(name="assistant")(_turn(cp_observe.retriever(name="kb")(fn), mode))


def _turn_variants(pipes: dict[str, Pipeline], wrapper_pipe: Pipeline) -> list[Variant]:
    tracer = wrapper_pipe.provider.get_tracer("bench.wrapper")
    out: list[Variant] = []
    for mode in ("sync", "async"):
        hand, cp_turn = _turn_fns(tracer, mode)
        out.append(Variant("turn", "hand-written OTel wrapper", "str", mode, hand, after=wrapper_pipe.sink.clear,
                           baseline=True))
        for suffix, pipe in pipes.items():
            out.append(Variant("turn", f"@cp_observe.agent ⊃ @retriever{suffix}", "str", mode, cp_turn,
                               before=pipe.select, after=pipe.drain))
    return out


_STREAM_ITEMS = 100  # items per call of the "stream" group: per-item cost = per-call cost / _STREAM_ITEMS


def _stream(mode: str) -> Callable[[str], Any]:
    """A retriever that streams ``_STREAM_ITEMS`` rows (the same strings each time), sync or async."""
    rows = [f"row {i}: {c.CONTEXTS[i % len(c.CONTEXTS)][:80]}" for i in range(_STREAM_ITEMS)]
    if mode == "sync":

        def stream(query: str) -> Any:
            yield from rows

        return stream

    async def astream(query: str) -> Any:
        for row in rows:
            yield row

    return astream


def _consume(gen_fn: Callable[[str], Any], mode: str) -> Fn:
    """One call: create the generator and read it to its end, as a streaming caller does."""
    if mode == "sync":

        def run(query: str) -> None:
            for _ in gen_fn(query):
                pass

        return run

    async def arun(query: str) -> None:
        async for _ in gen_fn(query):
            pass

    return arun


def _stream_variants(pipes: dict[str, Pipeline]) -> list[Variant]:
    """A decorated generator against the same generator undecorated: the per-item cost of the wrapper."""
    out: list[Variant] = []
    note = f"{_STREAM_ITEMS} items per call"
    for mode in ("sync", "async"):
        plain = _stream(mode)
        out.append(Variant("stream", "undecorated generator", "str", mode, _consume(plain, mode), baseline=True,
                           note=note))
        decorated = cp_observe.retriever(name="kb")(plain)
        for suffix, pipe in pipes.items():
            out.append(Variant("stream", f"@cp_observe.retriever{suffix}", "str", mode, _consume(decorated, mode),
                               before=pipe.select, after=pipe.drain, note=note))
    return out


def _rerank_variants(payload: str, pipes: dict[str, Pipeline]) -> list[Variant]:
    """``@reranker`` (reads five input documents, returns them reordered) against ``@retriever`` (returns five)."""
    suffix = _RERANK_PIPES[payload]
    pipe = pipes[suffix]
    reordered = list(reversed(c.CONTEXTS))
    out: list[Variant] = []
    for mode in ("sync", "async"):
        retrieve = cp_observe.retriever(name="kb")(_returning(c.CONTEXTS, mode))
        if mode == "sync":

            def rerank(query: str, documents: list[str] = c.CONTEXTS) -> list[str]:
                return reordered

            fn: Fn = cp_observe.reranker(name="ce")(rerank)
        else:

            async def arerank(query: str, documents: list[str] = c.CONTEXTS) -> list[str]:
                return reordered

            fn = cp_observe.reranker(name="ce")(arerank)
        out.append(Variant("rerank", f"@cp_observe.retriever{suffix}", payload, mode, retrieve, before=pipe.select,
                           after=pipe.drain, baseline=True))
        out.append(Variant("rerank", f"@cp_observe.reranker{suffix}", payload, mode, fn, before=pipe.select,
                           after=pipe.drain, note="5 documents in, 5 out"))
    return out


def rerank_lines(variants: list[Variant]) -> list[str]:
    """The reranker's cost per call over the retriever decorator's, per pipeline and mode."""
    lines = []
    for v in variants:
        if v.group == "rerank" and not v.baseline and v.wall_us:
            wall, cpu = _ratios(v)
            lines.append(f"{v.payload} {v.mode}: @reranker {_fmt(c.median(v.wall_us))} µs, {wall:.2f}x wall and "
                         f"{cpu:.2f}x thread CPU of @retriever")
    return lines


def stream_lines(variants: list[Variant]) -> list[str]:
    """Per-item cost of each decorated generator over the undecorated one."""
    base = {v.mode: c.median(v.wall_us) for v in variants if v.group == "stream" and v.baseline and v.wall_us}
    lines = []
    for v in variants:
        if v.group == "stream" and not v.baseline and v.wall_us and v.mode in base:
            per_item = (c.median(v.wall_us) - base[v.mode]) / _STREAM_ITEMS
            lines.append(f"{v.mode} {v.name}: {per_item:+.3f} µs per item over an undecorated generator "
                         f"({c.median(v.wall_us) / _STREAM_ITEMS:.3f} vs {base[v.mode] / _STREAM_ITEMS:.3f} µs)")
    return lines


def cp_variants(shapes: list[tuple[str, str]], pipes: dict[str, Pipeline], wrapper_pipe: Pipeline) -> list[Variant]:
    """The wrapper, bare and cp_observe rows of every selected shape; "not installed" rows for missing frameworks."""
    out: list[Variant] = []
    for group, payload in shapes:
        if group in ("retrieve", "agent"):
            try:
                out += _single_variants(group, payload, pipes, wrapper_pipe)
            except ImportError as exc:
                out += _missing(group, payload, exc)
        elif group == "turn":
            out += _turn_variants(pipes, wrapper_pipe)
        elif group == "rerank":
            out += _rerank_variants(payload, pipes)
        else:
            out += _stream_variants(pipes)
    return out


# --- the same content: cp_observe's spans against the wrapper's -------------------------------------------------------

_BOOKKEEPING = frozenset({"context_precision.sampled"})  # cp_observe's flag; the wrapper does not write it


def _spans_of(pipe: Pipeline, fn: Fn) -> list[tuple[str, dict[str, Any]]]:
    pipe.select()
    fn(c.QUERY)
    spans = sorted(((s.name, dict(s.attributes or {})) for s in pipe.sink.spans), key=lambda item: item[0])
    pipe.drain()
    return [(name, {k: _content(k, v) for k, v in attrs.items() if k not in _BOOKKEEPING}) for name, attrs in spans]


def _content(key: str, value: Any) -> Any:
    """An attribute's content: a metadata JSON string by the value it encodes (its spacing is not content).

    The wrapper writes ``json.dumps`` (``", "`` and ``": "`` between items); cp_observe writes compact JSON.
    """
    if key.endswith(".metadata") and isinstance(value, str):
        try:
            return ("json", json.loads(value))
        except ValueError:
            return value
    return value


def same_content(shapes: list[tuple[str, str]], pipe: Pipeline, wrapper_pipe: Pipeline) -> list[str]:
    """For each shape, whether the wrapper's spans hold exactly the attributes cp_observe's do (but its flag)."""
    tracer = wrapper_pipe.provider.get_tracer("bench.check")
    lines = []
    for group, payload in shapes:
        if group in ("stream", "rerank"):  # no hand-written wrapper: the rerank group compares two decorators
            continue
        try:
            if group == "turn":
                hand, decorated = _turn_fns(tracer, "sync")
            else:
                fn = _returning(payload_value(group, payload), "sync")
                wrap = wrapper_retriever if group == "retrieve" else wrapper_agent
                hand = wrap(tracer, fn, "sync", payload)
                decorated = (cp_observe.retriever(name="kb") if group == "retrieve"
                             else cp_observe.agent(name="assistant"))(fn)
        except ImportError:
            continue
        theirs, ours = _spans_of(wrapper_pipe, hand), _spans_of(pipe, decorated)
        if theirs == ours:
            keys = sum(len(attrs) for _, attrs in ours)
            lines.append(f"same {group}/{payload}: {len(ours)} span(s), {keys} attributes")
            continue
        diff = [] if len(theirs) == len(ours) else [f"{len(theirs)} vs {len(ours)} spans"]
        for (name_a, a), (name_b, b) in zip(theirs, ours, strict=False):
            if name_a != name_b:
                diff.append(f"name {name_a!r} vs {name_b!r}")
            diff.extend(f"{k}: wrapper {str(a.get(k))[:40]!r} vs cp {str(b.get(k))[:40]!r}"
                        for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k))
        lines.append(f"DIFFERENT {group}/{payload}: " + "; ".join(diff))
    return lines


# --- variants: the peers ----------------------------------------------------------------------------------------------


def _importable(group: str, payload: str) -> bool:
    try:
        payload_value(group, payload)
    except ImportError:
        return False
    return True


def _peer_shape_fns(peer: _peers.Peer, group: str, payload: str) -> dict[str, Fn]:
    if group == "turn":
        return {mode: peer.decorate(_turn(peer.decorate(_returning(c.CONTEXTS, mode), "retriever"), mode), "agent")
                for mode in ("sync", "async")}
    role = "retriever" if group == "retrieve" else "agent"
    value = payload_value(group, payload)
    return {mode: peer.decorate(_returning(value, mode), role) for mode in ("sync", "async")}


def _probe(peer: _peers.Peer, group: str, payload: str, fn: Fn) -> tuple[str, bool]:
    """Call the peer's sync function once and say what its spans recorded."""
    peer.drain()
    fn(c.QUERY)
    described = _peers.describe(group, payload, peer.kept())
    peer.drain()
    return described


def peer_variants(shapes: list[tuple[str, str]]) -> list[Variant]:
    """Every peer in every selected shape of the groups peers have (``_peers.GROUPS``), with what it records there.

    The other groups (the generator, ``@reranker``) have no peer rows: no peer decorates those shapes.
    """
    shapes = [(g, p) for g, p in shapes if g in _peers.GROUPS and _importable(g, p)]  # a missing framework: own rows
    out: list[Variant] = []
    for name, build in _peers.BUILDERS:
        try:
            peers = build()
        except ImportError as exc:
            out += [Variant(g, name, p, m, None, peer=True, note=f"not installed ({exc.name}); use .venv-bench")
                    for g, p in shapes for m in ("sync", "async")]
            continue
        except Exception as exc:  # noqa: BLE001 - a peer that cannot be set up offline is reported, not faked
            reason = f"could not run offline: {type(exc).__name__}: {str(exc)[:80]}"
            out += [Variant(g, name, p, m, None, peer=True, note=reason) for g, p in shapes for m in ("sync", "async")]
            continue
        for peer in peers:
            for group, payload in shapes:
                label = peer.names[group]
                try:
                    fns = _peer_shape_fns(peer, group, payload)
                    recorded, complete = _probe(peer, group, payload, fns["sync"])
                except ImportError:
                    continue  # the framework is missing: the shape's own rows say so
                except Exception as exc:  # noqa: BLE001 - a peer failing on a shape is a finding, shown as such
                    reason = f"failed: {type(exc).__name__}: {str(exc)[:80]}"
                    out += [Variant(group, label, payload, m, None, peer=True, note=reason) for m in ("sync", "async")]
                    continue
                note = "; ".join(part for part in (recorded, peer.note) if part)
                out += [Variant(group, label, payload, mode, fn, after=peer.drain, peer=True, note=note,
                                complete=complete) for mode, fn in fns.items()]
    return out


# --- timing -----------------------------------------------------------------------------------------------------------


async def _drive_async(fn: Fn, calls: int) -> tuple[int, int]:
    query = c.QUERY
    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    for _ in range(calls):
        await fn(query)
    return time.perf_counter_ns() - wall, time.thread_time_ns() - cpu


def _drive_sync(fn: Fn, calls: int) -> tuple[int, int]:
    query = c.QUERY
    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    for _ in range(calls):
        fn(query)
    return time.perf_counter_ns() - wall, time.thread_time_ns() - cpu


def _batch(variant: Variant, calls: int, loop: asyncio.AbstractEventLoop) -> tuple[float, float]:
    assert variant.fn is not None
    variant.before()
    gc.collect()
    if variant.mode == "sync":
        wall, cpu = _drive_sync(variant.fn, calls)
    else:
        wall, cpu = loop.run_until_complete(_drive_async(variant.fn, calls))
    variant.after()
    return wall / calls / 1000, cpu / calls / 1000


def measure(variants: list[Variant], rounds: int, calls: int, seed: int) -> None:
    """Run every runnable variant ``rounds`` times (plus a warm-up), in a new shuffled order each round.

    Each variant's batch is paired with a batch of its baseline (the wrapper of the same group, payload and
    mode) run right before it, and the ratio of the pair is kept: load from other processes changes over
    seconds, and a pair a few milliseconds apart sees the same load.
    """
    runnable = [v for v in variants if v.fn is not None]
    baselines = {(v.group, v.payload, v.mode): v for v in runnable if v.baseline}
    rng = random.Random(seed)
    loop = asyncio.new_event_loop()
    try:
        started = time.perf_counter()
        gc.collect()
        gc.freeze()  # the set-up's objects: otherwise each warm-up batch's collection walks them all (~0.2 s each)
        for variant in runnable:  # warm-up: imports, caches, first-call paths
            _batch(variant, max(10, calls // 10), loop)
        gc.collect()
        gc.freeze()  # the peers' modules and our set-up stay out of every later collection
        print(f"  warm-up done ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
        for done in range(rounds):
            rng.shuffle(runnable)
            for variant in runnable:
                base = baselines[(variant.group, variant.payload, variant.mode)]
                base_wall, base_cpu = _batch(base, calls, loop)
                base.wall_us.append(base_wall)
                base.cpu_us.append(base_cpu)
                if variant is base:
                    continue
                wall, cpu = _batch(variant, calls, loop)
                variant.wall_us.append(wall)
                variant.cpu_us.append(cpu)
                variant.wall_ratio.append(wall / base_wall)
                variant.cpu_ratio.append(cpu / base_cpu)
            print(f"  round {done + 1}/{rounds} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr,
                  flush=True)
    finally:
        loop.close()


# --- on_end alone -----------------------------------------------------------------------------------------------------


def _ended_span(pipe: Pipeline, fn: Fn) -> ReadableSpan:
    pipe.select()
    fn(c.QUERY)
    span = pipe.sink.spans[-1]
    pipe.sink.clear()
    return span


def measure_on_end(rounds: int, calls: int) -> list[tuple[str, float, float]]:
    """Median ns (wall, thread CPU) of one ``on_end`` call on an ended span, unsampled processor and a plain sink.

    Thread CPU is the steadier figure on a shared machine: it leaves out the time other processes held the core.
    """
    pipe = _pipeline(0.0)
    assert pipe.processor is not None
    ret = cp_observe.retriever(name="kb")(_returning(c.CONTEXTS, "sync"))
    agt = cp_observe.agent(name="assistant")(_returning(c.ANSWER, "sync"))
    retriever_span, agent_span = _ended_span(pipe, ret), _ended_span(pipe, agt)
    tracer = pipe.provider.get_tracer("bench.other")
    with tracer.start_as_current_span("parent"), tracer.start_as_current_span("GET /search"):
        pass
    other_span = pipe.sink.spans[0]  # a child span no retriever or agent: returned from at once
    pipe.sink.clear()
    # Other instrumentations' spans, as they emit them (names spelled here, not imported from cp_observe, so this
    # table also runs against older versions of the library: PYTHONPATH=<an older checkout> ... --on-end-only).
    foreign = {
        "OpenInference RETRIEVER span": {"openinference.span.kind": "RETRIEVER", "input.value": c.QUERY,
                                         **{f"retrieval.documents.{i}.document.content": t
                                            for i, t in enumerate(c.CONTEXTS)}},
        "OpenInference CHAIN span (non-target)": {"openinference.span.kind": "CHAIN", "input.value": c.QUERY},
        "OpenLLMetry vector_db_retrieve span": {"gen_ai.operation.name": "vector_db_retrieve",
                                                "traceloop.entity.output": "{}"},
        "SQL client span, db.system (non-target)": {"db.system": "postgresql", "db.statement": "SELECT 1"},
    }
    foreign_spans = {}
    for label, attributes in foreign.items():
        with tracer.start_as_current_span("parent"), tracer.start_as_current_span(label, attributes=attributes):
            pass
        foreign_spans[label] = pipe.sink.spans[0]
        pipe.sink.clear()
    cases: list[tuple[str, Callable[[ReadableSpan], None], ReadableSpan]] = [
        ("ContextPrecisionProcessor.on_end, unsampled retriever span", pipe.processor.on_end, retriever_span),
        ("ContextPrecisionProcessor.on_end, unsampled agent span", pipe.processor.on_end, agent_span),
        ("ContextPrecisionProcessor.on_end, other (non-target, non-root) span", pipe.processor.on_end, other_span),
        *((f"ContextPrecisionProcessor.on_end, unsampled {label}", pipe.processor.on_end, span)
          for label, span in foreign_spans.items()),
        ("ListSink.on_end (list append), for scale", c.ListSink().on_end, retriever_span),
    ]
    results = []
    for label, on_end, span in cases:
        samples, cpu_samples = [], []
        for _ in range(rounds):
            start, cpu_start = time.perf_counter_ns(), time.thread_time_ns()
            for _ in range(calls):
                on_end(span)
            cpu_samples.append((time.thread_time_ns() - cpu_start) / calls)
            samples.append((time.perf_counter_ns() - start) / calls)
        results.append((label, c.median(samples), c.median(cpu_samples)))
    return results


# --- report -----------------------------------------------------------------------------------------------------------


def _fmt(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _ratios(v: Variant) -> tuple[float, float]:
    """Median paired ratios (wall, CPU) to the baseline; 1.0 for the baseline itself."""
    return (c.median(v.wall_ratio) if v.wall_ratio else 1.0, c.median(v.cpu_ratio) if v.cpu_ratio else 1.0)


def report(variants: list[Variant]) -> tuple[str, list[str]]:
    """The detailed markdown table and the lines saying whether cp_observe met its targets."""
    rows, verdicts = [], []
    for v in variants:
        head = [v.group, v.payload, v.mode, v.name]
        if v.fn is None:
            rows.append([*head, "n/a", "n/a", "n/a", "n/a", v.note])
            continue
        ratio_wall, ratio_cpu = _ratios(v)
        rows.append([*head, _fmt(c.median(v.wall_us)), f"{ratio_wall:.2f}x", _fmt(c.median(v.cpu_us)),
                     f"{ratio_cpu:.2f}x", v.note])
        if v.name.startswith("@cp_observe") and "processor" in v.name and v.group not in ("stream", "rerank"):
            ok = ratio_wall <= 1.1 and ratio_cpu <= 1.1  # met only when both clocks agree
            verdicts.append(f"{'MET ' if ok else 'MISSED'} {v.group}/{v.payload}/{v.mode} {v.name}: "
                            f"{ratio_wall:.2f}x wall, {ratio_cpu:.2f}x thread CPU (target ≤ 1.10x on both)")
    headers = ["group", "payload", "mode", "variant", "µs/call (wall)", "x wrapper", "µs/call (thread CPU)",
               "x wrapper (CPU)", "note"]
    return c.markdown_table(headers, rows), verdicts


def summary(variants: list[Variant]) -> tuple[str, list[str]]:
    """One row per shape and mode: the wrapper's CPU µs, cp_observe's ratios, the fastest peer and the margin.

    The fastest peer is the fastest of those recording all the content cp_observe records for the shape
    (marked * when none does, and the fastest of all is shown); "cp vs fastest peer" is that peer's CPU ratio
    over cp_observe's unsampled CPU ratio, both to the same wrapper: how many times faster cp_observe is.
    """
    rows, verdicts = [], []
    keys = list(dict.fromkeys((v.group, v.payload, v.mode) for v in variants if v.group not in ("stream", "rerank")))
    for key in keys:
        same = [v for v in variants if (v.group, v.payload, v.mode) == key and v.fn is not None and v.cpu_us]
        base = next((v for v in same if v.baseline), None)
        unsampled = next((v for v in same if v.name.startswith("@cp") and v.name.endswith(_UNSAMPLED)), None)
        sampled = next((v for v in same if v.name.startswith("@cp") and v.name.endswith(_SAMPLED)), None)
        if base is None or unsampled is None:
            missing = next((v.note for v in variants if (v.group, v.payload, v.mode) == key and v.fn is None), "n/a")
            rows.append([*key, missing, "", "", "", "", "", ""])
            continue
        u_wall, u_cpu = _ratios(unsampled)
        row: list[object] = [*key, _fmt(c.median(base.cpu_us)), f"{u_wall:.2f}x / {u_cpu:.2f}x"]
        if sampled is not None:
            s_wall, s_cpu = _ratios(sampled)
            row += [f"{s_cpu:.2f}x", f"{s_wall:.2f}x"]
        else:
            row += ["n/a", "n/a"]
        peers = [v for v in same if v.peer]
        complete = [v for v in peers if v.complete]
        pool, mark = (complete, "") if complete else (peers, " *")
        if pool:
            fastest = min(pool, key=lambda v: _ratios(v)[1])
            peer_cpu = _ratios(fastest)[1]
            margin = peer_cpu / u_cpu
            row += [fastest.name + mark, f"{peer_cpu:.2f}x", f"{margin:.2f}x"]
            verdicts.append(f"{'MET ' if margin >= 2.0 else 'MISSED'} {'/'.join(key)}: cp_observe unsampled "
                            f"{margin:.2f}x faster than {fastest.name}{mark} (thread CPU; target ≥ 2.0x)")
        else:
            absent = any(v.peer and v.fn is None for v in variants if (v.group, v.payload, v.mode) == key)
            row += ["none ran (see the notes)" if absent else "n/a", "n/a", "n/a"]
        rows.append(row)
    headers = ["group", "payload", "mode", "wrapper µs (CPU)", "cp unsampled x (wall / CPU)", "cp sampled x (CPU)",
               "cp sampled x (wall)", "fastest peer", "its x (CPU)", "cp vs fastest peer (target ≥ 2.0)"]
    return c.markdown_table(headers, rows), verdicts


def _ordered(variants: list[Variant]) -> list[Variant]:
    """Table order: by group, payload, mode, then baseline, bare, cp_observe, peers (each in insertion order)."""

    def rank(v: Variant) -> tuple[int, int, bool, int]:
        kind = 0 if v.baseline else 1 if v.name == "bare call" else 2 if v.name.startswith("@cp") else 3
        payloads = _PAYLOADS.get(v.group, ())
        return (GROUPS.index(v.group), payloads.index(v.payload) if v.payload in payloads else 0, v.mode != "sync",
                kind)

    return sorted(variants, key=rank)


def _on_end_table(rows: list[tuple[str, float, float]]) -> str:
    return c.markdown_table(["what", "ns/call (median)", "thread CPU ns/call (median)"],
                            [[label, f"{ns:.0f}", f"{cpu:.0f}"] for label, ns, cpu in rows])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (5 rounds of 100 calls)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 11, --quick 5)")
    parser.add_argument("--calls", type=int, default=None, help="calls per batch (default 200, --quick 100)")
    parser.add_argument("--seed", type=int, default=20_251_201)
    parser.add_argument("--only-cp", action="store_true", help="skip the peers")
    parser.add_argument("--shapes", default=None,
                        help="comma-separated: a group (retrieve, agent, turn, stream, rerank), group:payload "
                             "(retrieve:haystack, agent:chat) or a payload of any group (dict); default all")
    parser.add_argument("--on-end-only", action="store_true", help="only the on_end table")
    parser.add_argument("--segments", action="store_true",
                        help="add the sampled pipeline with segments configured beside the others")
    return parser


def _print_report(variants: list[Variant], checks: list[str], on_end: list[tuple[str, float, float]],
                  heading: str) -> None:
    ordered = _ordered(variants)
    table, verdicts = report(ordered)
    overview, peer_verdicts = summary(ordered)
    print(heading)
    print("### Summary: each shape against its hand-written wrapper and the fastest peer recording the same "
          "content (* none does: the fastest of all)\n")
    print(overview)
    print("\n### Same content: the wrapper's spans against @cp_observe's (but its context_precision.sampled flag)\n")
    for line in checks:
        print(f"- {line}")
    print("\n### Every variant\n")
    print(table)
    print("\n### on_end alone\n")
    print(_on_end_table(on_end))
    print("\n### Targets (cp_observe with the processor ≤ 1.1x the wrapper; ≥ 2x faster than the fastest peer; "
          "on_end unsampled ≈ a couple of µs)\n")
    for line in verdicts + peer_verdicts:
        print(f"- {line}")
    if any(v.group == "rerank" for v in variants):
        print("\n### @reranker against @retriever (x: median paired ratio to @retriever under the same pipeline)\n")
        for line in rerank_lines(variants):
            print(f"- {line}")
    if any(v.group == "stream" for v in variants):
        print("\n### A decorated generator, per item\n")
        for line in stream_lines(variants):
            print(f"- {line}")
    print()
    unsampled = on_end[0][1] / 1000
    print(f"- {'MET ' if unsampled <= 2.0 else 'MISSED'} on_end, unsampled retriever span: {unsampled:.2f} µs")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rounds = args.rounds or (5 if args.quick else 11)
    # 200 calls, not 300: the peers and the framework shapes tripled the variants, and a full run grew too long
    calls = args.calls or (100 if args.quick else 200)
    try:
        shapes = parse_shapes(args.shapes)
    except ValueError as exc:
        parser.error(str(exc))
    c.offline_env()
    blocked = c.block_network()
    if args.on_end_only:
        rows = measure_on_end(rounds, 20_000 if not args.quick else 5_000)
        print(f"### on_end alone ({cp_observe.__file__})\n")
        print(_on_end_table(rows))
        return 0

    pipes = {"": _pipeline(None), _UNSAMPLED: _pipeline(0.0), _SAMPLED: _pipeline(1.0)}
    if args.segments:
        pipes[_SEGMENTED] = _pipeline(1.0, _BENCH_SEGMENTS)
    wrapper_pipe = _pipeline(None)
    checks = same_content(shapes, pipes[""], wrapper_pipe)
    variants = cp_variants(shapes, pipes, wrapper_pipe)
    if not args.only_cp:
        variants += peer_variants(shapes)
    print(f"hot path: {rounds} rounds x {calls} calls, {len(variants)} variants; set up in "
          f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
    measure(variants, rounds, calls, args.seed)
    on_end = measure_on_end(rounds, 20_000 if not args.quick else 5_000)
    _print_report(variants, checks, on_end, (
        f"## Hot path: µs per call (median of {rounds} interleaved rounds x {calls} calls); "
        "ratios: median of each batch over its baseline batch run just before it\n\n"
        f"Machine: {c.machine_line()}; cp_observe from {cp_observe.__file__}; "
        f"{time.perf_counter() - started:.0f} s\n"))
    print(f"\nNon-loopback network attempts refused during the run: {blocked.total} {blocked.attempts or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
