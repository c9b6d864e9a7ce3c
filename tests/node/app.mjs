// A LangChain JS RAG app instrumented by OpenInference, exporting its spans with the standard OTLP exporter.
// Usage: node app.mjs http|grpc URL   (tests/integration/test_node.py runs it against `cp-observe serve` on loopback)
// No network: a fake vector store with synthetic embeddings and a fake chat model, from @langchain/core.
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { OTLPTraceExporter as HttpExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { OTLPTraceExporter as GrpcExporter } from "@opentelemetry/exporter-trace-otlp-grpc";
import { LangChainInstrumentation } from "@arizeai/openinference-instrumentation-langchain";
import * as CallbackManagerModule from "@langchain/core/callbacks/manager";

const [protocol, otlp] = process.argv.slice(2);
// A generous export timeout: the tests share a loaded machine (the exporters' default is 10 s).
const exporter = protocol === "grpc"
  ? new GrpcExporter({ url: otlp, timeoutMillis: 60000 })
  : new HttpExporter({ url: `${otlp}/v1/traces`, timeoutMillis: 60000 });
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register();
const instrumentation = new LangChainInstrumentation();
instrumentation.setTracerProvider(provider);
instrumentation.manuallyInstrument(CallbackManagerModule);

const { FakeVectorStore, SyntheticEmbeddings, FakeListChatModel } = await import("@langchain/core/utils/testing");
const { Document } = await import("@langchain/core/documents");
const { ChatPromptTemplate } = await import("@langchain/core/prompts");
const { StringOutputParser } = await import("@langchain/core/output_parsers");
const { RunnablePassthrough, RunnableSequence } = await import("@langchain/core/runnables");

const TEXTS = ["Paris is the capital of France.", "Bananas are yellow.", "France is in Europe."];
const store = new FakeVectorStore(new SyntheticEmbeddings({ vectorSize: 8 }));
await store.addDocuments(TEXTS.map((t, i) => new Document({ pageContent: t, id: String(i) })));
const retriever = store.asRetriever({ k: 2 });

// 1. a bare retriever
await retriever.invoke("What is the capital of France?");
// 2. an LCEL chain whose root span carries the answer
const chain = RunnableSequence.from([
  { context: retriever, question: new RunnablePassthrough() },
  ChatPromptTemplate.fromTemplate("Context: {context}\nQuestion: {question}"),
  new FakeListChatModel({ responses: ["The capital of France is Paris."] }),
  new StringOutputParser(),
]);
await chain.invoke("What is the capital of France?");
await provider.forceFlush();
await provider.shutdown();
