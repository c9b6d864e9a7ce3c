"""The peers' decorators for the hot-path benchmark, each ending in an in-process sink, and what they record.

Each builder sets a peer up offline and returns one ``Peer`` per decorator style: how it decorates a
retriever and an agent, how to empty its pipeline between batches, and how to read what it kept (to say in
the table what content the peer records for each shape). A builder raises ``ImportError`` when its package
is not installed (the main ``.venv``); the benchmark then shows "not installed".
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import _common as c
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

__all__ = ["BUILDERS", "GROUPS", "Peer", "describe"]

Fn = Callable[[str], Any]

#: The benchmark groups a peer has a row in: a retriever, an agent and the two-span turn. The other groups
#: (a decorated generator, ``@reranker``) compare cp_observe's own decorators, since no peer has those shapes;
#: a group added to the benchmark reaches the peers only once it is listed here and every peer names it.
GROUPS = ("retrieve", "agent", "turn")


@dataclass
class Peer:
    """One peer decorator style.

    Attributes:
        names: the row label per benchmark group, one for each of ``GROUPS``.
        decorate: ``(function, role)`` -> the decorated function; ``role`` is ``"retriever"`` or ``"agent"``.
        drain: empty the pipeline (outside the timing).
        kept: flush, then the spans the pipeline kept since the last ``drain``.
        note: how the peer's pipeline ends in the sink, when it is not a plain span processor.
    """

    names: dict[str, str]
    decorate: Callable[[Fn, str], Fn]
    drain: Callable[[], None]
    kept: Callable[[], Sequence[ReadableSpan]]
    note: str = ""


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """Peers print banners on set-up; keep stdout for the table."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        yield buffer


def _names(retriever: str, agent: str, prefix: str = "") -> dict[str, str]:
    return {"retrieve": prefix + retriever, "agent": prefix + agent, "turn": f"{prefix}{agent} ⊃ {retriever}"}


def _openinference() -> list[Peer]:
    from openinference.instrumentation import OITracer, TraceConfig

    provider, sink = TracerProvider(), c.ListSink()
    provider.add_span_processor(sink)
    tracer = OITracer(provider.get_tracer("bench.openinference"), config=TraceConfig())

    def kept() -> list[ReadableSpan]:
        return sink.spans

    def by_role(fn: Fn, role: str) -> Fn:
        return tracer.retriever(fn) if role == "retriever" else tracer.agent(fn)  # type: ignore[no-any-return]

    return [
        Peer(_names("OITracer.chain", "OITracer.chain", "openinference "), lambda f, r: tracer.chain(f), sink.clear,
             kept),
        Peer(_names("OITracer.retriever", "OITracer.agent", "openinference "), by_role, sink.clear, kept),
    ]


def _traceloop() -> list[Peer]:
    from traceloop.sdk import Traceloop
    from traceloop.sdk.decorators import agent, task

    sink = c.ListSink()
    with _quiet():
        Traceloop.init(app_name="bench", processor=sink, telemetry_enabled=False, instruments=set(),
                       disable_batch=True)

    def decorate(fn: Fn, role: str) -> Fn:
        return task(name="retrieve")(fn) if role == "retriever" else agent(name="assistant")(fn)  # type: ignore[no-any-return]

    return [Peer(_names("@task", "@agent", "traceloop-sdk "), decorate, sink.clear, lambda: sink.spans)]


def _langfuse() -> list[Peer]:
    from langfuse import Langfuse, observe

    exporter = c.ListExporter()
    with _quiet():
        client = Langfuse(tracer_provider=TracerProvider(), span_exporter=exporter, base_url="http://127.0.0.1:9")

    def drain() -> None:
        client.flush()
        exporter.clear()

    def kept() -> list[ReadableSpan]:
        client.flush()
        return exporter.spans

    def decorate(fn: Fn, role: str) -> Fn:
        return observe(as_type="retriever" if role == "retriever" else "agent")(fn)  # type: ignore[no-any-return]

    return [Peer(_names('@observe(as_type="retriever")', '@observe(as_type="agent")', "langfuse "), decorate, drain,
                 kept, note="its own BatchSpanProcessor → ListExporter")]


def _logfire() -> list[Peer]:
    import logfire

    sink = c.ListSink()
    with _quiet():
        logfire.configure(send_to_logfire=False, console=False, metrics=False, additional_span_processors=[sink],
                          service_name="bench", inspect_arguments=False)

    def args_only(fn: Fn, role: str) -> Fn:
        return logfire.instrument("retrieve {query}" if role == "retriever" else "answer {query}")(fn)

    def with_return(fn: Fn, role: str) -> Fn:
        template = "retrieve {query}" if role == "retriever" else "answer {query}"
        return logfire.instrument(template, record_return=True)(fn)

    def kept() -> list[ReadableSpan]:
        return sink.spans

    return [
        Peer(_names("@instrument (args)", "@instrument (args)", "logfire "), args_only, sink.clear, kept),
        Peer(_names("@instrument(record_return=True)", "@instrument(record_return=True)", "logfire "), with_return,
             sink.clear, kept),
    ]


class _MlflowSink(c.ListExporter):
    """Where MLflow's own exporter would log the finished trace: take it from the trace manager and keep it."""

    def export(self, spans: Any) -> Any:
        from mlflow.tracing.trace_manager import InMemoryTraceManager

        manager = InMemoryTraceManager.get_instance()
        for span in spans:
            if span.parent is None:
                manager.pop_trace(span.context.trace_id)
        return super().export(spans)


def _mlflow() -> list[Peer]:
    import mlflow
    from mlflow.entities.trace_location import MlflowExperimentLocation
    from mlflow.tracing import provider as mlflow_provider

    with _quiet():
        # An explicit experiment avoids the tracking-server look-up; the processor is then built at once and
        # its exporter swapped for an in-process one before any trace is exported.
        mlflow.tracing.set_destination(MlflowExperimentLocation(experiment_id="0"))
        mlflow_provider._get_tracer("bench")
        processor = mlflow_provider._get_span_processor()
    if processor is None or not hasattr(processor, "span_exporter"):
        raise RuntimeError("no MLflow span processor to attach an in-process exporter to")
    sink = _MlflowSink()
    processor.span_exporter = sink

    def decorate(fn: Fn, role: str) -> Fn:
        return mlflow.trace(span_type="RETRIEVER" if role == "retriever" else "AGENT")(fn)  # type: ignore[no-any-return]

    return [Peer(_names('@mlflow.trace(span_type="RETRIEVER")', '@mlflow.trace(span_type="AGENT")', "mlflow-tracing "),
                 decorate, sink.clear, lambda: sink.spans, note="MLflow's span processor → in-process exporter")]


#: (name for "not installed" rows, builder), in table order.
BUILDERS: tuple[tuple[str, Callable[[], list[Peer]]], ...] = (
    ("openinference OITracer", _openinference),
    ("traceloop-sdk", _traceloop),
    ("langfuse @observe", _langfuse),
    ("logfire @instrument", _logfire),
    ("mlflow-tracing @mlflow.trace", _mlflow),
)

# --- what a peer recorded ---------------------------------------------------------------------------------------

_REPR_MARKS = ("page_content=", "NodeWithScore(", "TextNode(", "Document(id=")


def _expected(group: str, payload: str) -> dict[str, list[str]]:
    """The pieces of content cp_observe records for a shape, by field: each must appear on the peer's spans."""
    if group == "agent":
        parts = c.agent_payload("list") if payload == "list" else [c.ANSWER]
        return {"answer": parts}
    fields = {"content": list(c.CONTEXTS)}
    if group == "retrieve" and payload != "str":
        fields["metadata"] = [str(meta["source"]) for meta in c.METADATA]
    if payload in ("llamaindex", "haystack"):
        fields["id"] = list(c.IDS)
        fields["score"] = [repr(score) for score in c.SCORES]
    if group == "turn":
        fields["answer"] = [c.ANSWER]
    return fields


def describe(group: str, payload: str, spans: Sequence[ReadableSpan]) -> tuple[str, bool]:
    """Which of cp_observe's recorded content the peer's spans hold, and where; and whether they hold all of it.

    A piece counts as recorded when its text appears in some attribute value (JSON or not). The note names the
    attribute holding the first piece and its form: per-document attributes, as cp_observe records them, or one
    JSON value of the whole return value (escaped again when "double-encoded"); "as repr" means the documents
    appear as their Python ``repr`` rather than as fields.
    """
    items: list[tuple[str, str]] = []
    for span in spans:
        for key, value in (span.attributes or {}).items():
            if isinstance(value, tuple):
                items.extend((key, str(v)) for v in value)
            else:
                items.append((key, str(value)))
    text = "\n".join(value for _, value in items)
    expected = _expected(group, payload)
    have = [name for name, pieces in expected.items() if all(piece in text for piece in pieces)]
    missing = [name for name in expected if name not in have]
    if not have:
        return "records no returned content", False
    note = "records " + ", ".join(have) + (f"; not {', '.join(missing)}" if missing else "")
    first = next(iter(expected.values()))[0]
    key, value = next(((k, v) for k, v in items if first in v), ("", ""))
    if ".document." in key:
        note += " (per-document attributes)"
    elif key:
        form = "JSON of the whole return value" if value[:1] in "[{" else "text"
        note += f" ({form} in {key}{', double-encoded' if chr(92) + chr(34) in value else ''})"
    if any(mark in text for mark in _REPR_MARKS):
        note += " (as repr)"
    return note, not missing
