"""The app side of tests/serve/test_serve_rerank.py: decorated spans exported over OTLP/HTTP, nothing scored here.

``python -m tests.serve.rerank_app {reorder|truncate|variant} --otlp URL`` (``variant``: reorders, and the
retrieval span alone carries ``retriever.version=v2``). A process of its own, so the service under
test has none of the app's memory (no payload): it judges what the spans' attributes carry.
"""

from __future__ import annotations

import argparse

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import cp_observe
from tests.processing.test_rerank_lift import ANSWER, DOCS, QUESTION, RERANKED


def main(argv: list[str] | None = None) -> int:
    """Run one turn: retriever, reranker (reordering, or only keeping the head) and agent."""
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=("reorder", "truncate", "variant"))
    parser.add_argument("--otlp", required=True)
    args = parser.parse_args(argv)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=args.otlp + "/v1/traces")))
    trace.set_tracer_provider(provider)

    @cp_observe.retriever(name="products")
    def search(query: str) -> list[str]:
        if args.scenario == "variant":
            trace.get_current_span().set_attribute("retriever.version", "v2")
        return list(DOCS)

    @cp_observe.reranker(name="cross-encoder")
    def rerank(query: str, documents: list[str]) -> list[str]:
        return documents[:2] if args.scenario == "truncate" else RERANKED

    @cp_observe.agent(name="shop")
    def answer(question: str) -> str:
        rerank(question, search(question))
        return ANSWER

    answer(QUESTION)
    provider.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
