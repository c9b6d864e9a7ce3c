"""Small RAG apps on the real frameworks and instrumentors, run by tests/test_frameworks.py in ``.venv-frameworks``.

``python -m tests.frameworks.apps SCENARIO --judge URL [--otlp URL]``

Each app instruments a real framework (LangChain, LlamaIndex, Haystack, Chroma) with a real instrumentor
(OpenInference, OpenLLMetry), with fake embeddings and fake chat models (no network), on an SDK provider:

- without ``--otlp``: ``ContextPrecisionProcessor`` is on the app's provider, judging through litellm over HTTP
  at ``--judge``; the app prints one JSON line: the processor's stats and the evaluation spans it emitted.
- with ``--otlp``: the app only exports its spans with the real OTLP/HTTP exporter to ``cp-observe serve``
  at that URL (the test runs the service and reads the evaluations there); it prints the spans it exported.
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


def lc_bare(flavour: str, provider: TracerProvider) -> None:
    """A bare retriever, no chain: judged against its query."""
    _instrument_langchain(flavour, provider)
    _lc_retriever().invoke(QUESTION)


def lc_chain(flavour: str, provider: TracerProvider) -> None:
    """An LCEL chain: the retriever is judged against the chain's answer."""
    _instrument_langchain(flavour, provider)
    _lc_chain(_lc_retriever()).invoke(QUESTION)


def lc_decorated(flavour: str, provider: TracerProvider) -> None:
    """A decorated retrieval function calling an instrumented retriever: one retrieval, named by the decorator."""
    import cp_observe

    _instrument_langchain(flavour, provider)
    retriever = _lc_retriever()

    @cp_observe.retriever(name="capitals")
    def search(question: str) -> list[Any]:
        return list(retriever.invoke(question))

    search(QUESTION)


# --- LlamaIndex ---------------------------------------------------------------------------------------------------
def _li_index(provider: TracerProvider) -> Any:
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    Settings.embed_model = MockEmbedding(embed_dim=8)
    Settings.llm = MockLLM(max_tokens=8)
    return VectorStoreIndex.from_documents([Document(text=t, doc_id=str(i)) for i, t in enumerate(TEXTS)])


def li_retrieve(flavour: str, provider: TracerProvider) -> None:
    """``retrieve()`` emits two nested RETRIEVER spans, the inner one without documents: one retrieval."""
    _li_index(provider).as_retriever(similarity_top_k=2).retrieve(QUESTION)


def li_query(flavour: str, provider: TracerProvider) -> None:
    """A query engine: the retrieval is judged against the engine's answer (its root span's output)."""
    _li_index(provider).as_query_engine(similarity_top_k=2).query(QUESTION)


# --- Haystack -----------------------------------------------------------------------------------------------------
def hs_pipeline(flavour: str, provider: TracerProvider) -> None:
    """A Haystack pipeline with a BM25 retriever, instrumented by OpenInference."""
    from haystack import Document, Pipeline
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from openinference.instrumentation.haystack import HaystackInstrumentor

    HaystackInstrumentor().instrument(tracer_provider=provider)
    store = InMemoryDocumentStore()
    store.write_documents([Document(content=t, id=str(i)) for i, t in enumerate(TEXTS)])
    pipeline = Pipeline()
    pipeline.add_component("retriever", InMemoryBM25Retriever(store, top_k=2))
    pipeline.run({"retriever": {"query": QUESTION}})


# --- Chroma (OpenLLMetry's vector-DB instrumentation: db.query.result events) ---------------------------------------
def chroma_agent(flavour: str, provider: TracerProvider) -> None:
    """A Chroma query inside a decorated agent: judged against the agent's answer, named ``chroma``."""
    import chromadb
    from opentelemetry.instrumentation.chromadb import ChromaInstrumentor

    import cp_observe

    ChromaInstrumentor().instrument(tracer_provider=provider)
    collection = chromadb.EphemeralClient().create_collection("capitals", embedding_function=None)
    collection.add(ids=["a", "b", "c"], documents=TEXTS, embeddings=[[1, 0, 0], [0, 1, 0], [0.9, 0.1, 0]])

    @cp_observe.agent(name="geo")
    def answer(question: str) -> str:
        collection.query(query_embeddings=[[1, 0, 0]], n_results=2)
        return ANSWER

    answer(QUESTION)


SCENARIOS: dict[str, tuple[Callable[[str, TracerProvider], None], str]] = {
    "oi-lc-bare": (lc_bare, "openinference"),
    "oi-lc-chain": (lc_chain, "openinference"),
    "oi-lc-decorated": (lc_decorated, "openinference"),
    "ll-lc-bare": (lc_bare, "openllmetry"),
    "ll-lc-chain": (lc_chain, "openllmetry"),
    "ll-lc-decorated": (lc_decorated, "openllmetry"),
    "oi-li-retrieve": (li_retrieve, "openinference"),
    "oi-li-query": (li_query, "openinference"),
    "oi-hs-pipeline": (hs_pipeline, "openinference"),
    "ll-chroma-agent": (chroma_agent, "openllmetry"),
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
    """Run one scenario; print one JSON line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--judge", required=True)
    parser.add_argument("--otlp")
    args = parser.parse_args(argv)
    import cp_observe

    run, flavour = SCENARIOS[args.scenario]
    provider = TracerProvider()
    app_spans = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(app_spans))
    trace.set_tracer_provider(provider)
    out: dict[str, Any] = {}
    if args.otlp:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        cp_observe.configure(capture_only=True, tracer_provider=provider)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=args.otlp + "/v1/traces")))
        run(flavour, provider)
        provider.shutdown()
    else:
        evaluations = InMemorySpanExporter()
        scorer_provider = TracerProvider()
        scorer_provider.add_span_processor(SimpleSpanProcessor(evaluations))
        judge = cp_observe.LLMJudge("openai/judge", api_base=args.judge, api_key="sk-test", timeout=10)
        processor = cp_observe.ContextPrecisionProcessor(judge, tracer_provider=scorer_provider, turn_timeout_s=30)
        provider.add_span_processor(processor)
        run(flavour, provider)
        processor.force_flush(30_000)
        out["stats"] = processor.stats()
        out["evaluations"] = [_span_json(s) for s in evaluations.get_finished_spans()]
        processor.shutdown()
    out["spans"] = [_span_json(s) for s in app_spans.get_finished_spans()]
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
