"""The host is untouchable: decorated code behaves exactly as undecorated, differentially.

Every case runs the same user code twice, undecorated and decorated, through the same driver, and compares
what the host sees: the return value (the same object), the exception (the very object the user raised,
with the user's frame still in its traceback), the items yielded, and what the user's code itself observed
(values sent in, exceptions thrown in, ``finally`` clauses run). The cases cover every function kind, every
behaviour and every environment; hypothesis drives generators with random protocol scripts.

These run with internal errors swallowed, as in production (``production_errors``): the point is that
nothing reaches the host, whatever breaks inside cp-observe.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import subprocess
import sys
import textwrap
import tracemalloc
import types
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import cp_observe
from cp_observe import _internal
from cp_observe import _names as n
from cp_observe._config._sampling import TraceIdRatio
from cp_observe.testing import FakeJudge, IsolatedRuntime

KINDS = ("sync", "async", "generator", "async_generator", "method", "classmethod", "staticmethod", "callable_object")
BEHAVIOURS = ("return", "raise", "base_exception", "cancelled")
GENERATOR_BEHAVIOURS = ("exhaust", "send", "throw_caught", "throw_uncaught", "close", "break", "collect", "raise")
ENVIRONMENTS = ("no_sdk", "unsampled", "sampled", "capture_off", "raising_exporter", "raising_judge")
DECORATORS = ("retriever", "agent")


class Halt(BaseException):
    """A ``BaseException`` subclass of the user's own (like ``KeyboardInterrupt``)."""


class RaisingProcessor(SpanProcessor):
    """A span processor whose every hook raises: an exporter failing inside ``span.end()``."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("exporter on_start exploded")

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("exporter on_end exploded")


class RaisingJudge:
    """A judge that always raises."""

    model = "raising"

    async def judge(self, query: str, reference: str, contexts: Any) -> Any:
        raise RuntimeError("judge exploded")


_PIPELINES: dict[str, tuple[TracerProvider, InMemorySpanExporter, Any]] = {}


def _pipeline(name: str) -> tuple[TracerProvider, InMemorySpanExporter, Any]:
    """One provider, exporter and processor per environment, built once for the module (threads are costly)."""
    if name not in _PIPELINES:
        spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        if name == "raising_exporter":
            provider.add_span_processor(RaisingProcessor())
        judge: Any = RaisingJudge() if name == "raising_judge" else FakeJudge()
        processor = cp_observe.ContextPrecisionProcessor(judge, sample_rate=0.0 if name == "unsampled" else 1.0,
                                                         tracer_provider=provider)
        provider.add_span_processor(processor)
        _PIPELINES[name] = (provider, spans, processor)
    return _PIPELINES[name]


@pytest.fixture(scope="module", autouse=True)
def _shut_pipelines() -> Iterator[None]:
    """Shut the module's processors down at the end."""
    yield
    for _, _, processor in _PIPELINES.values():
        processor.shutdown()
    _PIPELINES.clear()


@contextlib.contextmanager
def environment(name: str) -> Iterator[InMemorySpanExporter]:
    """Install one environment for the decorators; restore everything after (``install`` changes it meanwhile)."""
    with IsolatedRuntime() as runtime:
        _ENVIRONMENT.append(runtime)
        try:
            if name == "no_sdk":
                runtime.install(tracer_provider=None, sampler=TraceIdRatio(1.0))
                spans = InMemorySpanExporter()
            else:
                provider, spans, processor = _pipeline(name)
                spans.clear()
                runtime.install(tracer_provider=provider, sampler=TraceIdRatio(0.0 if name == "unsampled" else 1.0),
                                capture_content=name != "capture_off")
            yield spans
            if name != "no_sdk":
                processor.force_flush(5_000)
        finally:
            _ENVIRONMENT.pop()


#: The open environments' isolations, innermost last.
_ENVIRONMENT: list[IsolatedRuntime] = []


def install(**settings: Any) -> None:
    """Change the runtime settings of the innermost open environment."""
    _ENVIRONMENT[-1].install(**settings)


@pytest.fixture(autouse=True)
def _production(production_errors: None) -> None:
    """Internal errors swallowed, as in production: this suite checks that nothing reaches the host."""


# --- user code -------------------------------------------------------------------------------------------------


@dataclass
class Seen:
    """What the user's code observed and did in one run."""

    events: list[Any] = field(default_factory=list)
    raised: BaseException | None = None
    returned: Any = None
    code: types.CodeType | None = None  # the user function's code, to find its frame in a traceback


def _exception(behaviour: str) -> BaseException:
    if behaviour == "base_exception":
        return Halt("halt")
    if behaviour == "cancelled":
        return asyncio.CancelledError()
    return ValueError("user error")


def make_plain(kind: str, behaviour: str, seen: Seen) -> Callable[..., Any]:
    """A function of ``kind`` (not a generator) doing ``behaviour``."""
    result = ["ctx one", "ctx two"]
    seen.returned = result

    def body(query: str) -> list[str]:
        seen.events.append(("called", query))
        if behaviour != "return":
            seen.raised = _exception(behaviour)
            raise seen.raised
        return result

    async def abody(query: str) -> list[str]:
        await asyncio.sleep(0)
        return body(query)

    seen.code = body.__code__
    return abody if kind == "async" else body


def make_generator(kind: str, behaviour: str, seen: Seen) -> Callable[..., Any]:
    """A generator (or async generator) function doing ``behaviour``."""
    returned = object()
    seen.returned = returned

    def gen(query: str) -> Iterator[Any]:
        seen.events.append(("started", query))
        try:
            for i in range(5):
                try:
                    sent = yield f"item {i}"
                    seen.events.append(("sent", sent))
                except ValueError as exc:
                    seen.events.append(("caught", exc))
                    yield "recovered"
                if behaviour == "raise" and i == 1:
                    seen.raised = ValueError("user error mid-stream")
                    raise seen.raised
        except GeneratorExit as exc:
            seen.events.append(("generator_exit", type(exc)))
            raise
        finally:
            seen.events.append("finally")
        return returned

    async def agen(query: str) -> AsyncIterator[Any]:
        seen.events.append(("started", query))
        try:
            for i in range(5):
                await asyncio.sleep(0)
                try:
                    sent = yield f"item {i}"
                    seen.events.append(("sent", sent))
                except ValueError as exc:
                    seen.events.append(("caught", exc))
                    yield "recovered"
                if behaviour == "raise" and i == 1:
                    seen.raised = ValueError("user error mid-stream")
                    raise seen.raised
        except GeneratorExit as exc:
            seen.events.append(("generator_exit", type(exc)))
            raise
        finally:
            seen.events.append("finally")

    seen.code = (agen if kind == "async_generator" else gen).__code__
    return agen if kind == "async_generator" else gen


def shaped(kind: str, func: Callable[..., Any], decorate: Callable[[Any], Any] | None) -> Callable[..., Any]:
    """Put ``func`` in the shape of ``kind`` (method, classmethod...), decorated or not; return a callable."""
    deco = decorate or (lambda f: f)
    if kind == "method":

        class Service:
            def run(self, query: str) -> Any:
                return func(query)

        Service.run = deco(Service.__dict__["run"])  # type: ignore[method-assign]
        return Service().run
    if kind == "classmethod":

        class Klass:
            @classmethod
            def run(cls, query: str) -> Any:
                return func(query)

        setattr(Klass, "run", deco(Klass.__dict__["run"]))  # noqa: B010 - the classmethod object itself
        return Klass.run  # type: ignore[no-any-return]
    if kind == "staticmethod":

        class Static:
            @staticmethod
            def run(query: str) -> Any:
                return func(query)

        setattr(Static, "run", deco(Static.__dict__["run"]))  # noqa: B010 - the staticmethod object itself
        return Static.run  # type: ignore[no-any-return]
    if kind == "callable_object":

        class CallMe:
            def __call__(self, query: str) -> Any:
                return func(query)

        return deco(CallMe())  # type: ignore[no-any-return]
    return deco(func)  # type: ignore[no-any-return]


def decorator_for(which: str) -> Callable[[Any], Any]:
    """The bare decorator."""
    return cp_observe.retriever if which == "retriever" else cp_observe.agent


# --- drivers ---------------------------------------------------------------------------------------------------


def frames_of(exc: BaseException) -> list[types.CodeType]:
    """The code objects of every frame in ``exc``'s traceback."""
    out = []
    tb = exc.__traceback__
    while tb is not None:
        out.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    return out


def outcome_of_call(call: Callable[[], Any], seen: Seen) -> tuple[Any, ...]:
    """Call; describe the result in terms comparable across the two runs."""
    try:
        value = call()
    except BaseException as exc:  # noqa: BLE001 - comparing every exception, BaseException included
        assert exc is seen.raised, "not the very exception object the user raised"
        assert seen.code in frames_of(exc), "the user's frame is missing from the traceback"
        return ("raised", type(exc), str(exc))
    assert value is seen.returned, "not the very object the user returned"
    return ("returned",)


def run_plain(kind: str, behaviour: str, which: str | None) -> tuple[tuple[Any, ...], list[Any]]:
    """Run a plain function kind once, decorated with ``which`` (or not)."""
    seen = Seen()
    inner = make_plain("async" if kind == "async" else "sync", behaviour, seen)
    func = shaped(kind, inner, decorator_for(which) if which else None)
    if kind == "async":
        outcome = outcome_of_call(lambda: asyncio.run(func("the query")), seen)
    else:
        outcome = outcome_of_call(lambda: func("the query"), seen)
    return outcome, seen.events


def drive_generator(gen: Any, script: list[tuple[str, Any]], seen: Seen) -> list[Any]:
    """Apply ``script`` (next / send / throw / close / drop) to ``gen``; record every result."""
    log: list[Any] = []
    for op, arg in script:
        try:
            if op == "next":
                log.append(("yield", next(gen)))
            elif op == "send":
                log.append(("yield", gen.send(arg)))
            elif op == "throw":
                log.append(("yield", gen.throw(arg)))
            elif op == "close":
                log.append(("closed", gen.close()))
            elif op == "drop":
                del gen
                gc.collect()
                log.append("dropped")
                return log
        except StopIteration as stop:
            assert stop.value is seen.returned or stop.value is None
            log.append(("stop", stop.value is seen.returned))
        except BaseException as exc:  # noqa: BLE001 - comparing every exception
            log.append(_raised(exc, arg, seen))
    return log


def _raised(exc: BaseException, thrown: Any, seen: Seen) -> tuple[Any, ...]:
    """An exception out of a protocol step: the user's own or the one thrown in must be that very object."""
    if type(exc) is type(seen.raised) and str(exc) == str(seen.raised):
        assert exc is seen.raised, "not the very exception object the user raised"
    if isinstance(thrown, BaseException) and type(exc) is type(thrown) and str(exc) == str(thrown):
        assert exc is thrown, "not the very exception object thrown in"
    return ("raised", type(exc), str(exc), exc is thrown)


async def drive_async_generator(agen: Any, script: list[tuple[str, Any]], seen: Seen) -> list[Any]:
    """The async ``drive_generator``: asend / athrow / aclose."""
    log: list[Any] = []
    for op, arg in script:
        try:
            if op == "next":
                log.append(("yield", await agen.__anext__()))
            elif op == "send":
                log.append(("yield", await agen.asend(arg)))
            elif op == "throw":
                log.append(("yield", await agen.athrow(arg)))
            elif op == "close":
                log.append(("closed", await agen.aclose()))
            elif op == "drop":
                del agen
                gc.collect()
                for _ in range(5):  # the loop's finaliser schedules aclose(); let it run
                    await asyncio.sleep(0)
                log.append("dropped")
                return log
        except StopAsyncIteration:
            log.append(("stop",))
        except BaseException as exc:  # noqa: BLE001 - comparing every exception
            log.append(_raised(exc, arg, seen))
    return log


def script_for(behaviour: str) -> list[tuple[str, Any]]:
    """The protocol steps that exercise ``behaviour``."""
    error = ValueError("thrown in")
    scripts: dict[str, list[tuple[str, Any]]] = {
        "exhaust": [("next", None)] * 7,
        "send": [("next", None), ("send", "a"), ("send", 42), ("next", None)],
        "throw_caught": [("next", None), ("throw", error), ("next", None), ("next", None)],
        "throw_uncaught": [("next", None), ("throw", KeyError("not caught")), ("next", None)],
        "close": [("next", None), ("next", None), ("close", None), ("next", None)],
        "break": [("next", None), ("drop", None)],
        "collect": [("next", None), ("next", None), ("drop", None)],
        "raise": [("next", None)] * 4,
    }
    return scripts[behaviour]


def run_generator(kind: str, script: list[tuple[str, Any]], behaviour: str, which: str | None) -> Any:
    """Run a generator kind through ``script``, decorated with ``which`` (or not)."""
    seen = Seen()
    base = "async_generator" if kind == "async_generator" else "generator"
    inner = make_generator(base, behaviour, seen)
    decorated = (decorator_for(which) if which else (lambda f: f))(inner)
    if kind == "async_generator":

        async def main() -> list[Any]:
            return await drive_async_generator(decorated("the query"), script, seen)

        log = asyncio.run(main())
    else:
        log = drive_generator(decorated("the query"), script, seen)
    gc.collect()
    return log, seen.events


# --- the differential suite ------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", ENVIRONMENTS)
@pytest.mark.parametrize("behaviour", BEHAVIOURS)
@pytest.mark.parametrize("kind", [k for k in KINDS if "generator" not in k])
@pytest.mark.parametrize("which", DECORATORS)
def test_call_behaves_as_undecorated(which: str, kind: str, behaviour: str, env: str) -> None:
    """Return value, the very exception object and the user's observations match the undecorated call."""
    expected = run_plain(kind, behaviour, None)
    with environment(env):
        actual = run_plain(kind, behaviour, which)
    assert actual == expected


@pytest.mark.parametrize("env", ENVIRONMENTS)
@pytest.mark.parametrize("behaviour", GENERATOR_BEHAVIOURS)
@pytest.mark.parametrize("kind", ["generator", "async_generator"])
@pytest.mark.parametrize("which", DECORATORS)
def test_generator_protocol_behaves_as_undecorated(which: str, kind: str, behaviour: str, env: str) -> None:
    """send / throw / close, the return value, early break and collection match the undecorated generator."""
    script = script_for(behaviour)
    expected = run_generator(kind, script, behaviour, None)
    with environment(env):
        actual = run_generator(kind, script_for(behaviour), behaviour, which)
    assert _comparable(actual) == _comparable(expected)


def _comparable(run: Any) -> Any:
    """Exceptions compare by type and message (each run raises its own objects; identity is asserted inside)."""

    def norm(value: Any) -> Any:
        if isinstance(value, BaseException):
            return (type(value), str(value))
        if isinstance(value, tuple):
            return tuple(norm(v) for v in value)
        if isinstance(value, list):
            return [norm(v) for v in value]
        return value

    return norm(run)


_OPS = st.one_of(
    st.just(("next", None)),
    st.builds(lambda v: ("send", v), st.integers() | st.text(max_size=3)),
    st.builds(lambda m: ("throw", ValueError(m)), st.text(max_size=3)),
    st.builds(lambda m: ("throw", KeyError(m)), st.text(max_size=3)),
    st.just(("close", None)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    script=st.lists(_OPS, max_size=12),
    kind=st.sampled_from(["generator", "async_generator"]),
    env=st.sampled_from(ENVIRONMENTS),
    which=st.sampled_from(DECORATORS),
    drop=st.booleans(),
)
def test_random_protocol_scripts_match(script: list[Any], kind: str, env: str, which: str, drop: bool) -> None:
    """Any sequence of next / send / throw / close (then maybe collection) gives the same results both ways."""
    steps = [*script, ("drop", None)] if drop else script
    expected = run_generator(kind, steps, "exhaust", None)
    with environment(env):
        actual = run_generator(kind, steps, "exhaust", which)
    assert _comparable(actual) == _comparable(expected)


# --- the span ends once, with a defined status ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "status", "partial"),
    [
        ("exhaust", StatusCode.UNSET, None),
        ("close", StatusCode.UNSET, True),
        ("break", StatusCode.UNSET, True),
        ("collect", StatusCode.UNSET, True),
        ("raise", StatusCode.ERROR, None),
        ("throw_uncaught", StatusCode.ERROR, None),
    ],
)
@pytest.mark.parametrize("kind", ["generator", "async_generator"])
def test_generator_span_ends_once_with_its_status(kind: str, behaviour: str, status: StatusCode, partial: Any) -> None:
    """Exhaustion is ok; close and collection are ok and partial; an error is an error: one span each time."""
    with environment("sampled") as spans:
        run_generator(kind, script_for(behaviour), behaviour, "retriever")
        gc.collect()
        finished = [s for s in spans.get_finished_spans() if s.name.startswith("retrieval")]
    assert len(finished) == 1
    [span] = finished
    assert span.status.status_code is status
    assert span.attributes.get(n.CP_PARTIAL) is partial


def test_generator_capture_is_bounded_but_count_is_whole() -> None:
    """A long stream keeps only what can be recorded or judged, and the span still counts every item."""

    @cp_observe.retriever(name="stream")
    def stream(query: str) -> Iterator[str]:
        for i in range(500):
            yield f"row {i}"

    with environment("sampled") as spans:
        install(max_contexts=5, max_judged_contexts=7)
        assert list(stream("q")) == [f"row {i}" for i in range(500)]
        [span] = [s for s in spans.get_finished_spans() if s.name == "retrieval stream"]
    assert span.attributes[n.CP_CONTEXT_COUNT] == 500
    assert span.attributes[n.document_attribute(4, "content")] == "row 4"
    assert n.document_attribute(5, "content") not in span.attributes


# --- user callbacks are outside our boundary ---------------------------------------------------------------------


def _boom(*_: Any, **__: Any) -> Any:
    raise RuntimeError("user callback exploded")


@pytest.mark.parametrize("callback", ["query", "context_extractor", "output", "redact"])
@pytest.mark.parametrize("switch", [False, True], ids=["production", "raise_switch_on"])
def test_failing_user_callback_never_reaches_the_host(callback: str, switch: bool) -> None:
    """A raising user callback is a counted user error: the result is unchanged, even with re-raising on."""
    result = {"answer": "Paris", "sources": ["Paris is in France."]}
    kwargs: dict[str, Any] = {}
    if callback in ("query", "context_extractor", "output"):
        kwargs[callback] = _boom
    if callback != "context_extractor":
        kwargs.setdefault("context_extractor", lambda r: r["sources"])

    @cp_observe.agent(name="rag", **kwargs)
    def rag(question: str) -> dict[str, Any]:
        return result

    _internal.set_raise_internal_errors(switch)
    try:
        with environment("sampled") as spans:
            if callback == "redact":
                install(redact=_boom)
            assert rag("capital?") is result
            [span] = [s for s in spans.get_finished_spans() if s.name == "invoke_agent rag"]
    finally:
        _internal.set_raise_internal_errors(False)
    counts = _internal.error_counts()
    assert counts.get(f"user:{callback}", 0) >= 1
    assert not any(key.startswith("internal:") for key in counts)
    if callback in ("query", "context_extractor", "output"):
        reason = "extractor_error" if callback == "context_extractor" else f"{callback}_error"
        assert span.attributes[n.CP_USER_ERROR] == reason


def test_pytest_being_imported_does_not_make_errors_raise() -> None:
    """Re-raising is an explicit switch: pytest in sys.modules (a user's test suite) does not turn it on."""
    assert "pytest" in sys.modules
    assert _internal.raise_internal_errors() is False
    with pytest.raises(RuntimeError):
        _internal.set_raise_internal_errors(True)
        try:
            _internal.report_internal_error("test site", RuntimeError("ours"))
        finally:
            _internal.set_raise_internal_errors(False)
    _internal.report_internal_error("test site", RuntimeError("ours"))  # swallowed: switch off
    assert _internal.error_counts()["internal:test site"] == 2


def test_iterator_returned_by_an_extractor_is_not_drained() -> None:
    """An extractor returning an iterator that lives on the host's result leaves it whole for the caller."""

    class Result:
        def __init__(self) -> None:
            self.docs = iter(["a", "b", "c"])

    @cp_observe.retriever(name="kb", context_extractor=lambda r: r.docs)
    def search(query: str) -> Result:
        return Result()

    with environment("sampled"):
        result = search("q")
    assert list(result.docs) == ["a", "b", "c"]


def test_answer_reads_only_documented_fields_once() -> None:
    """The answer rule reads each documented field at most once and no other property of the result."""
    reads: list[str] = []

    class Reply:
        def __getattribute__(self, name: str) -> Any:
            if not name.startswith("__"):
                reads.append(name)
            if name == "content":
                return "the answer"
            return object.__getattribute__(self, name)

        @property
        def secret(self) -> str:
            raise AssertionError("read beyond the documented fields")

    @cp_observe.agent(name="bot")
    def bot(question: str) -> Reply:
        return Reply()

    with environment("sampled") as spans:
        bot("q")
        [span] = [s for s in spans.get_finished_spans() if s.name == "invoke_agent bot"]
    assert span.attributes[n.OUTPUT_VALUE] == "the answer"
    assert reads == ["answer", "output", "content"]


# --- memory and fork -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", ["no_sdk", "unsampled"])
def test_half_consumed_generator_retains_almost_nothing(env: str) -> None:
    """A 20 000-item generator consumed half-way keeps under 2 MiB alive, with no SDK and unsampled."""

    @cp_observe.retriever(name="rows")
    def rows(query: str) -> Iterator[str]:
        for i in range(20_000):
            yield f"{i:08d}" + "x" * 1_000  # a fresh ~1 KB string per row: 10 MB if the wrapper kept them

    with environment(env):
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            stream = rows("q")
            for _, _row in zip(range(10_000), stream, strict=False):
                pass
            gc.collect()
            retained = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        stream.close()
    assert retained < 2 * 1024 * 1024, f"{retained / 1024 / 1024:.1f} MiB retained"


_FORK_TIMING = textwrap.dedent(
    """
    import os, sys, threading, time
    from cp_observe._judging import _litellm
    assert "litellm" not in sys.modules
    importer = threading.Thread(target=_litellm.load_litellm, daemon=True)
    importer.start()
    deadline = time.monotonic() + 30
    while not _litellm._importing and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.2)  # well inside the import, which takes seconds
    assert _litellm._importing, "the import finished before the fork"
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    elapsed = time.perf_counter() - start
    os.waitpid(pid, 0)
    print(f"{elapsed * 1000:.3f}")
    os._exit(0)
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_while_litellm_imports_returns_at_once() -> None:
    """os.fork() while another thread imports litellm returns in under 100 ms: no at-fork handler waits."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run([sys.executable, "-c", _FORK_TIMING], capture_output=True, text=True, timeout=120, env=env,
                         check=False)
    lines = out.stdout.strip().splitlines()
    assert lines, out.stderr[-2000:]
    assert float(lines[-1]) < 100.0, f"fork took {lines[-1]} ms"
