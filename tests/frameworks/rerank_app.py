"""A LlamaIndex query engine with a real reranker, instrumented by OpenInference: run by tests/integration.

``python -m tests.frameworks.rerank_app --judge URL --otlp URL`` in ``.venv-frameworks``.

The engine is LlamaIndex's ``RetrieverQueryEngine`` over a retriever that returns ``DOCS`` in a fixed order, with
LlamaIndex's own ``StructuredLLMRerank`` node postprocessor (top 3). The reranker's LLM is a scripted
``CustomLLM`` (no network) that ranks documents 2, 1, 3 of its prompt, and answers ``ANSWER`` to the synthesis
prompt. ``openinference-instrumentation-llama-index`` turns the reranker's ``ReRankStartEvent``/``ReRankEndEvent``
into a ``RERANKER`` span with ``reranker.query`` and ``reranker.{input,output}_documents.*``: nothing here writes a
span attribute. As in ``tests/frameworks/apps.py``, the app's provider has a ``ContextPrecisionProcessor`` judging
through litellm at ``--judge`` (in process) and the real OTLP/HTTP exporter to ``cp-observe serve`` at ``--otlp``.

It prints one JSON line: the processor's counts, the evaluation spans, the app's spans and their trace ids.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.frameworks.apps import _span_json

DOCS = [
    "Bananas are yellow.",
    "Paris is the capital of France.",
    "Apples grow on trees.",
    "France is in Europe.",
    "Mountains are tall.",
]
ANSWER = "Paris is the capital of France, in Europe."
QUESTION = "Where is Paris?"
#: What the scripted reranker LLM answers: documents 2, 1 and 3 of its prompt (1-based), most relevant first.
RANKING = [{"document_number": 2, "relevance": 9}, {"document_number": 1, "relevance": 5},
           {"document_number": 3, "relevance": 4}]


def _engine() -> Any:
    from llama_index.core import QueryBundle, Settings
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
    from llama_index.core.llms.callbacks import llm_completion_callback
    from llama_index.core.postprocessor import StructuredLLMRerank
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    class ScriptedLLM(CustomLLM):
        """Ranks like ``RANKING`` when asked for relevance scores; otherwise answers ``ANSWER``."""

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="scripted")

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            if "relevance score" in prompt:
                return CompletionResponse(text=json.dumps({"documents": RANKING}))
            return CompletionResponse(text=ANSWER)

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise NotImplementedError

    class FixedRetriever(BaseRetriever):
        """Returns ``DOCS`` in their order, scores descending."""

        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            return [NodeWithScore(node=TextNode(text=t, id_=f"d{i}"), score=1.0 - i / 10) for i, t in enumerate(DOCS)]

    Settings.llm = ScriptedLLM()
    reranker = StructuredLLMRerank(llm=ScriptedLLM(), top_n=3)
    return RetrieverQueryEngine.from_args(FixedRetriever(), node_postprocessors=[reranker])


def main(argv: list[str] | None = None) -> int:
    """Run one query through the engine; print one JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--judge", required=True)
    parser.add_argument("--otlp", required=True)
    args = parser.parse_args(argv)
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    import cp_observe

    provider = TracerProvider()
    app_spans = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(app_spans))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=args.otlp + "/v1/traces")))
    evaluations = InMemorySpanExporter()
    scorer_provider = TracerProvider()
    scorer_provider.add_span_processor(SimpleSpanProcessor(evaluations))
    judge = cp_observe.LLMJudge("openai/judge", api_base=args.judge, api_key="sk-test", timeout=10)
    processor = cp_observe.ContextPrecisionProcessor(judge, tracer_provider=scorer_provider, turn_timeout_s=30,
                                                     concurrency=4)
    provider.add_span_processor(processor)
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    answer = str(_engine().query(QUESTION))
    if not processor.force_flush(300_000):  # the first judgement imports litellm: slow on a loaded machine
        raise SystemExit(f"the judgements did not finish in time: {processor.stats()}")
    stats = processor.stats()
    spans = [_span_json(s) for s in app_spans.get_finished_spans()]
    out = {
        "answer": answer,
        "stats": {k: stats[k] for k in ("sampled", "scored", "failed", "dropped", "skipped")},
        "evaluations": [_span_json(s) for s in evaluations.get_finished_spans()],
        "spans": spans,
        "traces": sorted({s["trace_id"] for s in spans}),
    }
    processor.shutdown()
    provider.shutdown()  # returns once the exporter's last POST was answered
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
