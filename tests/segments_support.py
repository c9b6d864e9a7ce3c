"""Spans for the segment tests: four traces that exercise every place a segment value is read from.

- ``own``: the retrieval span itself carries ``retriever.version=v1`` (its agent says ``v2``: the retrieval wins);
- ``agent``: only the enclosing agent carries ``retriever.version=v2`` and ``tenant.tier=gold``;
- ``root``: a local root chain without an answer carries ``tenant.tier=silver``; the retrieval is judged against
  its query when the root ends;
- ``bare``: nothing carries either: ``none``.

Made by the real SDK, so the same spans feed the in-process processor, ``serve`` (as OTLP) and ``replay``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cp_observe import _names as n

SEGMENTS = "retriever.version,tenant.tier"
DOCS = ("Paris is the capital of France.", "Bananas are yellow.")
#: (data source, retriever_version, tenant_tier) each trace's evaluation is labelled with
EXPECTED = {
    ("own", "v1", "gold"),
    ("agent", "v2", "gold"),
    ("root", n.SEGMENT_NONE, "silver"),
    ("bare", n.SEGMENT_NONE, n.SEGMENT_NONE),
}


def _retrieval(source: str, **extra: Any) -> dict[str, Any]:
    return {
        n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL,
        n.GEN_AI_DATA_SOURCE_ID: source, n.INPUT_VALUE: "What is the capital of France?",
        n.document_attribute(0, "content"): DOCS[0], n.document_attribute(1, "content"): DOCS[1], **extra,
    }


def _agent(**extra: Any) -> dict[str, Any]:
    return {n.OPENINFERENCE_SPAN_KIND: n.KIND_AGENT, n.GEN_AI_OPERATION_NAME: n.OPERATION_INVOKE_AGENT,
            n.GEN_AI_AGENT_NAME: "helper", n.INPUT_VALUE: "What is the capital of France?",
            n.OUTPUT_VALUE: "Paris is the capital of France.", **extra}


def emit_traces(tracer_provider: Any) -> None:
    """The four traces, through ``tracer_provider`` (which may have the processor attached)."""
    tracer = tracer_provider.get_tracer("segments-test")
    own = _retrieval("own", **{"retriever.version": "v1", "tenant.tier": "gold"})
    with (tracer.start_as_current_span("invoke_agent helper", attributes=_agent(**{"retriever.version": "v2"})),
          tracer.start_as_current_span("retrieval own", attributes=own)):
        pass
    agent = _agent(**{"retriever.version": "v2", "tenant.tier": "gold"})
    with (tracer.start_as_current_span("invoke_agent helper", attributes=agent),
          tracer.start_as_current_span("retrieval agent", attributes=_retrieval("agent"))):
        pass
    with (tracer.start_as_current_span("chain", attributes={"tenant.tier": "silver"}),
          tracer.start_as_current_span("retrieval root", attributes=_retrieval("root"))):
        pass
    with tracer.start_as_current_span("retrieval bare", attributes=_retrieval("bare")):
        pass


def traces() -> list[ReadableSpan]:
    """The four traces as finished SDK spans (for OTLP and files)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    emit_traces(provider)
    return list(exporter.get_finished_spans())


def label_sets(points: Iterable[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(data source, retriever_version, tenant_tier) of metric points given as attribute dicts."""
    return {(str(p.get(n.GEN_AI_DATA_SOURCE_ID)), str(p.get("retriever_version")), str(p.get("tenant_tier")))
            for p in points}
