"""Documents without text (the GenAI convention's ids and scores): counted under their own reason, said once in
the log with the remedy, or given their text by a document resolver, bounded in time and concurrency, with its
failures counted. Spans are written through the OTel API as the GenAI conventions state them (the real
``opentelemetry-util-genai`` handler is tested in tests/integration/test_genai_retrieval.py); the judge is
``LLMJudge`` over real HTTP at the loopback ``JudgeServer``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

import cp_observe
from cp_observe import _names as n
from cp_observe._errors import ConfigurationError
from cp_observe.testing import JudgeServer
from tests.conftest import Otel

CORPUS = {"d-paris": "Paris is the capital of France.", "d-banana": "Bananas are yellow.",
          "d-europe": "France is in Europe."}
QUESTION = "What is the capital of France?"


def _retrieve(otel: Otel, ids: list[str] | None = None, *, data_source: str = "wiki", key: str = "genai") -> None:
    """One GenAI retrieval span whose documents are ids and scores only (or OpenInference ids without content)."""
    ids = list(CORPUS) if ids is None else ids
    attributes: dict[str, Any] = {n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_DATA_SOURCE_ID: data_source,
                                  n.GEN_AI_RETRIEVAL_QUERY_TEXT: QUESTION, n.GEN_AI_RETRIEVAL_TOP_K: 4}
    if key == "genai":
        attributes[n.GEN_AI_RETRIEVAL_DOCUMENTS] = json.dumps([{"id": i, "score": 0.5} for i in ids])
    else:
        attributes[n.OPENINFERENCE_SPAN_KIND] = n.KIND_RETRIEVER
        attributes.update({n.document_attribute(k, "id"): i for k, i in enumerate(ids)})
    with otel.tracer_provider.get_tracer("genai-instrumentation").start_as_current_span(
            f"retrieval {data_source}", attributes=attributes):
        pass


def _processor(otel: Otel, server: JudgeServer, **kwargs: Any) -> cp_observe.ContextPrecisionProcessor:
    judge = cp_observe.LLMJudge("openai/judge", api_base=server.url, api_key="sk-test", timeout=10)
    return otel.processor(judge, **kwargs)


def _evaluations(otel: Otel) -> list[dict[str, Any]]:
    return [dict(s.attributes or {}) for s in otel.by_name(n.EVALUATION_SPAN_NAME)]


@pytest.mark.parametrize("key", ["genai", "openinference"])
def test_without_a_resolver_documents_without_text_are_counted_and_said_once(
    otel: Otel, server: JudgeServer, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two retrievals: both counted skipped/no_document_text (no judge call); one warning, naming the remedy."""
    caplog.set_level("WARNING", logger="cp_observe")
    processor = _processor(otel, server)
    _retrieve(otel, key=key)
    _retrieve(otel, key=key)
    assert processor.force_flush(30_000)
    stats = processor.stats()
    assert stats["sampled"] == stats["skipped"] == 2, stats
    assert stats["reasons"] == {f"{n.OUTCOME_SKIPPED}:{n.SKIP_NO_DOCUMENT_TEXT}": 2}
    assert server.calls == 0
    said = [r.getMessage() for r in caplog.records if "without text" in r.getMessage()]
    assert len(said) == 1 and "document_resolver" in said[0] and "module:function" in said[0], said
    skipped = [p for p in otel.metric_points(n.METRIC_EVALUATIONS) if p.attributes[n.REASON] == n.SKIP_NO_DOCUMENT_TEXT]
    assert sum(p.value for p in skipped) == 2


def test_a_span_without_documents_is_still_not_a_retrieval(otel: Otel, server: JudgeServer) -> None:
    """A retrieval span with no documents at all is not counted (unchanged): only documents without text are."""
    processor = _processor(otel, server)
    with otel.tracer_provider.get_tracer("x").start_as_current_span("retrieval wiki", attributes={
            n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_RETRIEVAL_QUERY_TEXT: QUESTION}):
        pass
    assert processor.force_flush(30_000)
    assert processor.stats()["sampled"] == 0


async def _async_resolve(document_id: str, data_source: str) -> str | None:
    await asyncio.sleep(0)
    return CORPUS.get(document_id)


@pytest.mark.parametrize("resolve", [lambda i, ds: CORPUS.get(i), _async_resolve], ids=["sync", "async"])
def test_a_resolver_gives_the_judge_the_text(otel: Otel, server: JudgeServer, resolve: Any) -> None:
    """Resolved on the evaluator: scored on the documents' text, in rank order, with k and the count returned."""
    seen: list[tuple[str, str, str]] = []

    def recording(document_id: str, data_source: str) -> Any:
        seen.append((document_id, data_source, threading.current_thread().name))
        return resolve(document_id, data_source)

    caller = threading.current_thread().name
    processor = _processor(otel, server, document_resolver=recording if resolve is not _async_resolve else resolve)
    _retrieve(otel)
    assert processor.force_flush(30_000)
    [evaluation] = _evaluations(otel)
    assert evaluation[n.CP_VERDICTS] == (True, False, True)
    assert (evaluation[n.CP_RETRIEVAL_TOP_K], evaluation[n.CP_RETRIEVAL_RETURNED]) == (4, 3)
    assert "Bananas are yellow." in json.dumps([r.body for r in server.requests])
    if seen:  # the plain function ran on the resolver's own threads, never the caller's
        assert {s[:2] for s in seen} == {(i, "wiki") for i in CORPUS}
        assert all(name.startswith("cp-observe-resolver") and name != caller for _, _, name in seen)


@pytest.mark.parametrize(
    ("resolve", "reason"),
    [
        (lambda i, ds: 1 / 0, n.SKIP_RESOLVER_ERROR),
        (lambda i, ds: None if i == "d-banana" else CORPUS[i], n.SKIP_RESOLVER_NO_TEXT),
        (lambda i, ds: "   ", n.SKIP_RESOLVER_NO_TEXT),
        (lambda i, ds: time.sleep(1.0) or CORPUS[i], n.SKIP_RESOLVER_TIMEOUT),
    ],
    ids=["raises", "none", "blank", "slow"],
)
def test_resolver_failures_are_counted(otel: Otel, server: JudgeServer, resolve: Any, reason: str) -> None:
    """A document the resolver cannot give skips the retrieval under the failure's reason; the judge is not called."""
    processor = _processor(otel, server, document_resolver=resolve, document_resolver_timeout_s=0.2)
    _retrieve(otel)
    assert processor.force_flush(30_000)
    stats = processor.stats()
    assert stats["reasons"] == {f"{n.OUTCOME_SKIPPED}:{reason}": 1}, stats
    assert server.calls == 0


def test_resolver_concurrency_is_bounded_even_when_it_hangs(otel: Otel, server: JudgeServer) -> None:
    """A resolver that hangs holds at most ``concurrency`` threads; every retrieval is still counted (timeout)."""
    release = threading.Event()
    running: list[int] = []
    most = [0]
    lock = threading.Lock()

    threads: set[int] = set()

    def hanging(document_id: str, data_source: str) -> str:
        with lock:
            threads.add(threading.get_ident())  # the hung threads stay alive until release: no ident reused
            running.append(1)
            most[0] = max(most[0], len(running))
        release.wait(10)
        with lock:
            running.pop()
        return CORPUS[document_id]

    processor = _processor(otel, server, document_resolver=hanging, document_resolver_timeout_s=0.3,
                           document_resolver_concurrency=2)
    for _ in range(4):
        _retrieve(otel)
    try:
        assert processor.force_flush(30_000)
        stats = processor.stats()
        assert stats["reasons"] == {f"{n.OUTCOME_SKIPPED}:{n.SKIP_RESOLVER_TIMEOUT}": 4}, stats
        assert most[0] == 2
        assert len(threads) == 2  # two threads ever ran it: a hung call keeps its slot, no new thread is started
    finally:
        release.set()


def test_a_missing_id_cannot_be_resolved(otel: Otel, server: JudgeServer) -> None:
    """A document without an id has nothing to look up: the retrieval is counted as documents without text."""
    processor = _processor(otel, server, document_resolver=lambda i, ds: CORPUS.get(i))
    with otel.tracer_provider.get_tracer("x").start_as_current_span("retrieval wiki", attributes={
            n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_RETRIEVAL_QUERY_TEXT: QUESTION,
            n.GEN_AI_RETRIEVAL_DOCUMENTS: json.dumps([{"id": "d-paris", "score": 1}, {"score": 0.5}])}):
        pass
    assert processor.force_flush(30_000)
    assert processor.stats()["reasons"] == {f"{n.OUTCOME_SKIPPED}:{n.SKIP_NO_DOCUMENT_TEXT}": 1}


@pytest.fixture
def resolver_module() -> Iterator[str]:
    """An importable module holding a resolver, as a user's package would."""
    module = types.ModuleType("cp_test_resolvers")
    module.lookup = lambda document_id, data_source: CORPUS.get(document_id)  # type: ignore[attr-defined]
    module.not_callable = 3  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module.__name__
    del sys.modules[module.__name__]


def test_configure_takes_module_function_and_the_callable(otel: Otel, server: JudgeServer,
                                                          resolver_module: str) -> None:
    """``configure(document_resolver="module:function")`` (as serve and replay take it) and a callable both work."""
    judge = cp_observe.LLMJudge("openai/judge", api_base=server.url, api_key="sk-test", timeout=10)
    for given in (f"{resolver_module}:lookup", lambda i, ds: CORPUS.get(i)):
        processor = cp_observe.configure(judge, tracer_provider=otel.tracer_provider,
                                         meter_provider=otel.meter_provider, logger_provider=otel.logger_provider,
                                         document_resolver=given)
        assert processor is not None
        otel.shut_down_after(processor)
        _retrieve(otel)
        assert processor.force_flush(30_000)
        assert processor.stats()["scored"] == 1, processor.stats()


@pytest.mark.parametrize(
    ("spec", "message"),
    [("no_colon", "module:function"), ("cp_no_such_module_x:f", "cannot import"),
     ("{module}:missing", "has no"), ("{module}:not_callable", "not callable")],
)
def test_a_bad_module_function_is_a_configuration_error(resolver_module: str, spec: str, message: str,
                                                        otel: Otel) -> None:
    """A resolver that cannot be loaded fails at configuration time, naming what is wrong."""
    with pytest.raises(ConfigurationError, match=message):
        cp_observe.configure("lexical", tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider,
                             logger_provider=otel.logger_provider, document_resolver=spec.format(module=resolver_module))


def test_the_resolver_never_runs_on_the_request_path(otel: Otel, server: JudgeServer) -> None:
    """The span ends while the resolver still waits for the test: resolving is not on the request path."""
    gate, done = threading.Event(), threading.Event()

    def gated(document_id: str, data_source: str) -> str:
        gate.wait(10)
        done.set()
        return CORPUS[document_id]

    processor = _processor(otel, server, document_resolver=gated)
    _retrieve(otel)  # the span ends here; a resolver on this path would still be waiting for the gate
    assert not done.is_set()
    gate.set()
    assert processor.force_flush(30_000)
    assert done.is_set() and processor.stats()["scored"] == 1


def test_a_hung_resolver_does_not_keep_the_process_from_exiting(tmp_path: Any) -> None:
    """A process whose resolver never returns still exits once the processor shuts down (daemon threads)."""
    import subprocess

    code = (
        "import json, threading, cp_observe\n"
        "from cp_observe import _names as n\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "provider = TracerProvider()\n"
        "p = cp_observe.ContextPrecisionProcessor('lexical', tracer_provider=provider,\n"
        "    document_resolver=lambda i, ds: threading.Event().wait(), document_resolver_timeout_s=0.2)\n"
        "provider.add_span_processor(p)\n"
        "with provider.get_tracer('t').start_as_current_span('retrieval kb', attributes={\n"
        "    n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL, n.GEN_AI_RETRIEVAL_QUERY_TEXT: 'q',\n"
        "    n.GEN_AI_RETRIEVAL_DOCUMENTS: json.dumps([{'id': 'a', 'score': 1.0}])}):\n"
        "    pass\n"
        "assert p.force_flush(10_000)\n"
        "print(p.stats()['reasons'])\n"
        "p.shutdown()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert n.SKIP_RESOLVER_TIMEOUT in done.stdout
