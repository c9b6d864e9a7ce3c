"""Small RAG apps on the real frameworks and instrumentors, run in ``.venv-frameworks``.

Run by tests/integration/test_frameworks.py.

``python -m tests.frameworks.apps FAMILY --judge URL --otlp URL``

A family is one instrumentor on one framework (instrumentors patch their framework once per process); its
scenarios run one after the other, each in its own trace, with fake embeddings and fake chat models (no
network). On the app's SDK provider, at once:

- ``ContextPrecisionProcessor``, judging through litellm over HTTP at ``--judge`` (in process);
- the real OTLP/HTTP exporter, sending every span to ``cp-observe serve`` at ``--otlp`` (over the wire).

It prints one JSON line: per scenario, the processor's counts for it, the evaluation spans it emitted and the
trace ids of its spans (the test matches the service's evaluations to scenarios by trace id).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

TEXTS = ["Paris is the capital of France.", "Bananas are yellow.", "France is in Europe."]
QUESTION = "What is the capital of France?"
ANSWER = "The capital of France is Paris."


# --- LangChain ----------------------------------------------------------------------------------------------------
def _lc_retriever() -> Any:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_texts(TEXTS, ids=["a", "b", "c"])
    return store.as_retriever(search_kwargs={"k": 2})


def _lc_chain(retriever: Any) -> Any:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough

    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
    return {"context": retriever, "question": RunnablePassthrough()} | prompt | FakeListChatModel(
        responses=[ANSWER]) | StrOutputParser()


def _instrument_langchain(flavour: str, provider: TracerProvider) -> None:
    if flavour == "openinference":
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=provider)
    else:
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        LangchainInstrumentor().instrument(tracer_provider=provider)


def lc_bare() -> None:
    """A bare retriever, no chain: judged against its query."""
    _lc_retriever().invoke(QUESTION)


def lc_chain() -> None:
    """An LCEL chain: the retriever is judged against the chain's answer."""
    _lc_chain(_lc_retriever()).invoke(QUESTION)


def lc_decorated() -> None:
    """A decorated retrieval function calling an instrumented retriever: one retrieval, named by the decorator."""
    import cp_observe

    retriever = _lc_retriever()

    @cp_observe.retriever(name="capitals")
    def search(question: str) -> list[Any]:
        return list(retriever.invoke(question))

    search(QUESTION)


# --- LlamaIndex ---------------------------------------------------------------------------------------------------
def _instrument_llama_index(flavour: str, provider: TracerProvider) -> None:
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument(tracer_provider=provider)


def _li_index() -> Any:
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM

    Settings.embed_model = MockEmbedding(embed_dim=8)
    Settings.llm = MockLLM(max_tokens=8)
    return VectorStoreIndex.from_documents([Document(text=t, doc_id=str(i)) for i, t in enumerate(TEXTS)])


def li_retrieve() -> None:
    """``retrieve()`` emits two nested RETRIEVER spans, the inner one without documents: one retrieval."""
    _li_index().as_retriever(similarity_top_k=2).retrieve(QUESTION)


def li_query() -> None:
    """A query engine: the retrieval is judged against the engine's answer (its root span's output)."""
    _li_index().as_query_engine(similarity_top_k=2).query(QUESTION)


# --- Haystack -----------------------------------------------------------------------------------------------------
def _instrument_haystack(flavour: str, provider: TracerProvider) -> None:
    from openinference.instrumentation.haystack import HaystackInstrumentor

    HaystackInstrumentor().instrument(tracer_provider=provider)


def hs_pipeline() -> None:
    """A Haystack pipeline with a BM25 retriever, instrumented by OpenInference."""
    from haystack import Document, Pipeline
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    store = InMemoryDocumentStore()
    store.write_documents([Document(content=t, id=str(i)) for i, t in enumerate(TEXTS)])
    pipeline = Pipeline()
    pipeline.add_component("retriever", InMemoryBM25Retriever(store, top_k=2))
    pipeline.run({"retriever": {"query": QUESTION}})


# --- Chroma (OpenLLMetry's vector-DB instrumentation: db.query.result events) ---------------------------------------
def _instrument_chroma(flavour: str, provider: TracerProvider) -> None:
    from opentelemetry.instrumentation.chromadb import ChromaInstrumentor

    ChromaInstrumentor().instrument(tracer_provider=provider)


def chroma_agent() -> None:
    """A Chroma query inside a decorated agent: judged against the agent's answer, named ``chroma``."""
    import chromadb

    import cp_observe

    collection = chromadb.EphemeralClient().create_collection("capitals", embedding_function=None)
    collection.add(ids=["a", "b", "c"], documents=TEXTS, embeddings=[[1, 0, 0], [0, 1, 0], [0.9, 0.1, 0]])

    @cp_observe.agent(name="geo")
    def answer(question: str) -> str:
        collection.query(query_embeddings=[[1, 0, 0]], n_results=2)
        return ANSWER

    answer(QUESTION)


Scenario = Callable[[], None]
#: family -> (how to instrument, flavour, {scenario: app})
FAMILIES: dict[str, tuple[Callable[[str, TracerProvider], None], str, dict[str, Scenario]]] = {
    "oi-langchain": (_instrument_langchain, "openinference",
                     {"oi-lc-bare": lc_bare, "oi-lc-chain": lc_chain, "oi-lc-decorated": lc_decorated}),
    "ll-langchain": (_instrument_langchain, "openllmetry",
                     {"ll-lc-bare": lc_bare, "ll-lc-chain": lc_chain, "ll-lc-decorated": lc_decorated}),
    "oi-llama-index": (_instrument_llama_index, "openinference",
                       {"oi-li-retrieve": li_retrieve, "oi-li-query": li_query}),
    "oi-haystack": (_instrument_haystack, "openinference", {"oi-hs-pipeline": hs_pipeline}),
    "ll-chroma": (_instrument_chroma, "openllmetry", {"ll-chroma-agent": chroma_agent}),
}


def _span_json(span: ReadableSpan) -> dict[str, Any]:
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": format(span.context.trace_id, "032x") if span.context else "",
        "span_id": format(span.context.span_id, "016x") if span.context else "",
        "parent_span_id": format(parent.span_id, "016x") if parent else "",
        "attributes": {k: (list(v) if isinstance(v, tuple) else v) for k, v in (span.attributes or {}).items()},
    }


def main(argv: list[str] | None = None) -> int:
    """Run one family's scenarios; print one JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("family", choices=sorted(FAMILIES))
    parser.add_argument("--judge", required=True)
    parser.add_argument("--otlp", required=True)
    args = parser.parse_args(argv)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    import cp_observe

    instrument, flavour, scenarios = FAMILIES[args.family]
    provider = TracerProvider()
    trace.set_tracer_provider(provider)  # the decorators record here too
    app_spans = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(app_spans))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=args.otlp + "/v1/traces")))
    evaluations = InMemorySpanExporter()
    scorer_provider = TracerProvider()
    scorer_provider.add_span_processor(SimpleSpanProcessor(evaluations))
    judge = cp_observe.LLMJudge("openai/judge", api_base=args.judge, api_key="sk-test", timeout=10)
    processor = cp_observe.ContextPrecisionProcessor(judge, tracer_provider=scorer_provider, turn_timeout_s=30)
    provider.add_span_processor(processor)
    instrument(flavour, provider)
    out: dict[str, Any] = {}
    for name, scenario in scenarios.items():
        before = processor.stats()
        scenario()
        if not processor.force_flush(300_000):  # the first judgement imports litellm: slow on a loaded machine
            raise SystemExit(f"{name}: the judgements did not finish in time: {processor.stats()}")
        after = processor.stats()
        out[name] = {
            "stats": {k: after[k] - before[k] for k in ("sampled", "scored", "failed", "dropped", "skipped")},
            "evaluations": [_span_json(s) for s in evaluations.get_finished_spans()],
            "traces": sorted({_span_json(s)["trace_id"] for s in app_spans.get_finished_spans()}),
        }
        evaluations.clear()
        app_spans.clear()
    processor.shutdown()
    provider.shutdown()  # returns once the exporter's last POST was answered
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
