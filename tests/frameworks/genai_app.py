"""A retrieval through ``opentelemetry-util-genai``'s own retrieval handler, run in ``.venv-frameworks``.

Run by tests/integration/test_genai_retrieval.py.

``python -m tests.frameworks.genai_app --judge URL --otlp URL [--resolver]``

The handler writes the GenAI conventions' retrieval span: ``gen_ai.retrieval.top_k`` and
``gen_ai.retrieval.documents`` with each document's id and score and no text (its ``RetrievalDocument`` has no
other field). On the app's SDK provider, at once: ``ContextPrecisionProcessor`` judging through litellm over
HTTP at ``--judge`` (with ``--resolver``, given ``resolve`` below as its document resolver), and the real
OTLP/HTTP exporter sending every span to ``cp-observe serve`` at ``--otlp``. It prints one JSON line: the
processor's counts, its evaluation spans' attributes, the retrieval span's attributes and the trace id.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

#: The documents the retrieval names, by id: what a user's document store would hold.
CORPUS = {
    "doc-paris": "Paris is the capital of France.",
    "doc-banana": "Bananas are yellow.",
    "doc-europe": "France is in Europe.",
}
QUESTION = "What is the capital of France?"
TOP_K = 5


def resolve(document_id: str, data_source: str) -> str | None:
    """The document resolver: a document's text from its id (``serve`` imports it as ``module:function``)."""
    return CORPUS.get(document_id) if data_source == "wiki" else None


def main(argv: list[str] | None = None) -> int:
    """Run one retrieval through the handler; print the JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--judge", required=True)
    parser.add_argument("--otlp", required=True)
    parser.add_argument("--resolver", action="store_true")
    args = parser.parse_args(argv)
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"  # the handler records documents

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util.genai.handler import TelemetryHandler
    from opentelemetry.util.genai.types import RetrievalDocument

    import cp_observe

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{args.otlp}/v1/traces")))
    judge = cp_observe.LLMJudge("openai/judge", api_base=args.judge, api_key="sk-test", timeout=10)
    processor = cp_observe.ContextPrecisionProcessor(
        judge, tracer_provider=provider, turn_timeout_s=2.0,
        **({"document_resolver": resolve} if args.resolver else {}),
    )
    provider.add_span_processor(processor)

    handler = TelemetryHandler(tracer_provider=provider)
    with handler.retrieval(data_source_id="wiki", provider="in-memory") as invocation:
        invocation.query_text = QUESTION
        invocation.top_k = TOP_K
        invocation.documents = [RetrievalDocument(id=ident, score=1.0 - i / 10) for i, ident in enumerate(CORPUS)]
    assert processor.force_flush(30_000)
    finished = spans.get_finished_spans()
    out: dict[str, Any] = {
        "stats": processor.stats(),
        "evaluations": [dict(s.attributes or {}) for s in finished if s.name == "evaluation context_precision"],
        "retrieval": next(dict(s.attributes or {}) for s in finished if s.name.startswith("retrieval")),
        "trace": format(next(s for s in finished if s.name.startswith("retrieval")).context.trace_id, "032x"),
    }
    processor.shutdown()
    provider.shutdown()
    print(json.dumps(out, default=list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
