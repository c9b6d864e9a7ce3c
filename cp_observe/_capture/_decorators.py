"""``@retriever``, ``@reranker`` and ``@agent``: each call becomes a span with the query, ranked contexts and answer.

The wrapper is built once, at decoration time, for the function's kind (sync, async, generator, async
generator); the query's argument position is resolved then too, so a call costs a span start, two
attribute batches and a span end. The user's code never runs inside our ``try``: its return value and
exceptions pass through untouched, and so does the generator protocol. Our own failures end our span and
become one log line and a count (``_internal``); a failing ``query=`` callable is a user error, recorded the
same way under its own name, and the call runs without a query.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Literal, TypeVar, overload

from cp_observe._capture import _spans
from cp_observe._capture._collecting import in_collection
from cp_observe._capture._spans import Call
from cp_observe._internal import USER_FAILED, report_user_error

__all__ = ["agent", "reranker", "retriever"]

F = TypeVar("F", bound=Callable[..., Any])
Kind = Literal["retriever", "reranker", "agent"]
QuerySpec = str | Callable[..., Any] | None
#: Argument names ``@reranker`` takes its input documents from when ``documents=`` is not given (first found).
DOCUMENT_ARGUMENTS = ("documents", "docs", "nodes", "contexts", "candidates", "passages", "hits", "results")
#: Argument names read as the number of documents asked for (first found), recorded as ``gen_ai.retrieval.top_k``
#: (``reranker.top_k`` on a reranker) when the call passes a whole number >= 0.
TOP_K_ARGUMENTS = ("k", "top_k", "limit")


@overload
def retriever(func: F, /) -> F: ...
@overload
def retriever(
    *,
    name: str | None = None,
    query: QuerySpec = None,
    context_extractor: Callable[[Any], Any] | None = None,
) -> Callable[[F], F]: ...
def retriever(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    query: QuerySpec = None,
    context_extractor: Callable[[Any], Any] | None = None,
) -> F | Callable[[F], F]:
    """Trace a retrieval function: its query and the contexts it returns, in rank order.

    The span follows both OpenInference and the GenAI retrieval convention. When the function has an argument
    named one of ``TOP_K_ARGUMENTS`` (``k``, ``top_k``, ``limit``; found at decoration time), the number a call
    passes there is recorded as ``gen_ai.retrieval.top_k``. With content capture on, documents that carry an id
    and a score are also recorded as ``gen_ai.retrieval.documents`` (ids and scores only).

    Args:
        func: the function (when used bare, as ``@retriever``).
        name: the data source id and span name suffix (default: the function's qualified name).
        query: the argument holding the query, by name, or a callable ``(*args, **kwargs) -> str``
            (default: the first argument other than ``self``/``cls``).
        context_extractor: ``(return value) -> contexts`` for shapes the default extraction does not know.

    Raises:
        ValueError: ``query`` names an argument the function does not have.
    """
    return _decorate("retriever", func, name=name, query=query, context_extractor=context_extractor, output=None)


@overload
def reranker(func: F, /) -> F: ...
@overload
def reranker(
    *,
    name: str | None = None,
    query: QuerySpec = None,
    documents: QuerySpec = None,
    context_extractor: Callable[[Any], Any] | None = None,
    model: str | None = None,
) -> Callable[[F], F]: ...
def reranker(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    query: QuerySpec = None,
    documents: QuerySpec = None,
    context_extractor: Callable[[Any], Any] | None = None,
    model: str | None = None,
) -> F | Callable[[F], F]:
    """Trace a reranker: its query, the documents it was given and the documents it returns, each in rank order.

    The span is an OpenInference ``RERANKER`` span (``reranker.query``, ``reranker.input_documents.{i}.document.*``,
    ``reranker.output_documents.{i}.document.*``). A sampled call is judged once over the union of both lists,
    and its evaluation carries the AP of the output order (the score, ``context_precision.stage=rerank``), the AP
    of the input order, the lift and the relevant documents the reranker cut. A call whose output is its input's
    leading documents in the same order reorders nothing and is not scored on its own.

    Args:
        func: the function (when used bare, as ``@reranker``).
        name: the span name suffix (default: the function's qualified name). The evaluation's data source is the
            retrieval whose documents it reranks, when that retrieval is scored in the same trace; else this name.
        query: the argument holding the query, by name, or a callable ``(*args, **kwargs) -> str``
            (default: the first argument other than ``self``/``cls``).
        documents: the argument holding the input documents, by name, or a callable ``(*args, **kwargs) -> docs``
            (default: the first argument named one of ``DOCUMENT_ARGUMENTS``, else the second argument other than
            ``self``/``cls``). They are read when the call starts, before the reranker can reorder them in place.
        context_extractor: ``(return value) -> contexts`` for output shapes the default extraction does not know.
        model: the reranking model, as a litellm-style model string when it is an LLM (``openai/gpt-4o-mini``),
            recorded as ``reranker.model_name``. When it is the judge's model or of its family, the evaluation
            says so (``context_precision.rerank.judge_is_reranker``): an LLM judge favours its own kind.

    Raises:
        ValueError: ``query`` or ``documents`` names an argument the function does not have, or no argument can
            hold the input documents; ``model`` is not a non-empty string.
    """
    if documents is not None and not (isinstance(documents, str) or callable(documents)):
        raise ValueError("documents must be an argument name or a callable")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ValueError("model must be a non-empty string")
    return _decorate("reranker", func, name=name, query=query, context_extractor=context_extractor, output=None,
                     documents=documents, model=model.strip() if model else None)


@overload
def agent(func: F, /) -> F: ...
@overload
def agent(
    *,
    name: str | None = None,
    query: QuerySpec = None,
    output: Callable[[Any], Any] | None = None,
    context_extractor: Callable[[Any], Any] | None = None,
) -> Callable[[F], F]: ...
def agent(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    query: QuerySpec = None,
    output: Callable[[Any], Any] | None = None,
    context_extractor: Callable[[Any], Any] | None = None,
) -> F | Callable[[F], F]:
    """Trace an answering agent: its question and answer. Retrievals inside it are judged against the answer.

    Args:
        func: the function (when used bare, as ``@agent``).
        name: the agent name (default: the function's qualified name).
        query: the argument holding the question, by name, or a callable ``(*args, **kwargs) -> str``.
        output: ``(return value) -> answer`` when the answer rule (a string; else the first of ``answer``,
            ``output``, ``content``, ... that gives a text; the last assistant message) does not find it.
        context_extractor: ``(return value) -> contexts``: also score the agent itself on the contexts it
            reports (for agents that retrieve without a decorated retriever).

    Raises:
        ValueError: ``query`` names an argument the function does not have.
    """
    return _decorate("agent", func, name=name, query=query, context_extractor=context_extractor, output=output)


def _decorate(
    kind: Kind,
    func: F | None,
    *,
    name: str | None,
    query: QuerySpec,
    context_extractor: Callable[[Any], Any] | None,
    output: Callable[[Any], Any] | None,
    documents: QuerySpec = None,
    model: str | None = None,
) -> F | Callable[[F], F]:
    for label, value in (("context_extractor", context_extractor), ("output", output)):
        if value is not None and not callable(value):
            raise ValueError(f"{label} must be callable")
    if query is not None and not (isinstance(query, str) or callable(query)):
        raise ValueError("query must be an argument name or a callable")

    def decorator(target: F) -> F:
        if isinstance(target, (staticmethod, classmethod)):
            inner: Any = decorator(target.__func__)  # type: ignore[arg-type]
            rewrapped: Any = type(target)(inner)
            return rewrapped  # type: ignore[no-any-return]
        if not callable(target):
            raise TypeError(f"@{kind} needs a function, got {type(target).__name__}")
        call = Call(
            kind=kind,
            name=name or str(getattr(target, "__qualname__", None) or getattr(target, "__name__", "call")),
            query=_query_getter(target, query),
            context_extractor=context_extractor,
            output=output,
            documents=_documents_getter(target, documents) if kind == "reranker" else None,
            top_k=_top_k_getter(target) if kind != "agent" else None,
            model=model,
        )
        return _wrap(target, call)

    if func is not None:
        return decorator(func)
    return decorator


def _documents_getter(
    func: Callable[..., Any], documents: QuerySpec
) -> Callable[[tuple[Any, ...], dict[str, Any]], Any]:
    """Resolve, once, where a reranker's input documents are (``reranker``'s ``documents=`` says the rule)."""
    if documents is None:
        params = _parameters(func)
        plain = [p.name for p in params
                 if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        documents = _first_named(params, DOCUMENT_ARGUMENTS) or (plain[1] if len(plain) > 1 else None)  # query, docs
        if documents is None:
            raise ValueError(
                f"@reranker: {getattr(func, '__qualname__', func)} has no argument for the input documents; "
                "pass documents= (an argument name or a callable)"
            )
    return _query_getter(func, documents, label="documents")


def _top_k_getter(func: Callable[..., Any]) -> Callable[[tuple[Any, ...], dict[str, Any]], Any] | None:
    """Resolve, once, which argument says how many documents to return (``TOP_K_ARGUMENTS``); ``None``: none."""
    name = _first_named(_parameters(func), TOP_K_ARGUMENTS)
    return None if name is None else _query_getter(func, name, label="top_k")


def _parameters(func: Callable[..., Any]) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):  # a builtin or a callable without a signature: no arguments known
        return []


def _first_named(params: list[inspect.Parameter], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` that is an argument (not ``*args`` or ``**kwargs``) of the function."""
    declared = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return next((name for name in names if name in declared), None)


def _query_getter(
    func: Callable[..., Any], query: QuerySpec, *, label: str = "query"
) -> Callable[[tuple[Any, ...], dict[str, Any]], Any]:
    """Resolve where the query (or ``label``'s argument) is, once; the getter is a tuple index or a dict lookup."""
    if callable(query) and not isinstance(query, str):
        spec = query

        def from_callable(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            try:
                return spec(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the user's callback: a user error, never raised
                report_user_error(label, exc)
                return USER_FAILED

        return from_callable
    params = _parameters(func)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if query is None:
        candidates = [p for p in params if p.name not in ("self", "cls")]
        if not candidates or candidates[0].kind in (candidates[0].VAR_POSITIONAL, candidates[0].VAR_KEYWORD):
            return lambda args, kwargs: None
        target = candidates[0]
    else:
        matches = [p for p in params if p.name == query]
        if not matches:
            if any(p.kind is p.VAR_KEYWORD for p in params):
                return lambda args, kwargs: kwargs.get(query)
            where = getattr(func, "__qualname__", func)
            raise ValueError(f"{label}={query!r}: {where} has no argument named {query!r}")
        target = matches[0]
    name = target.name
    default = None if target.default is target.empty else target.default
    if target.kind is target.KEYWORD_ONLY:
        return lambda args, kwargs: kwargs.get(name, default)
    position = positional.index(target)
    if position == 0 and params and params[0].name in ("self", "cls") and target is params[0]:
        return lambda args, kwargs: None

    def getter(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if len(args) > position:
            return args[position]
        return kwargs.get(name, default)

    return getter


def _wrap(func: F, call: Call) -> F:
    """Build the wrapper for the function's kind, once (a callable object: by its ``__call__``'s kind)."""
    probe: Any = func
    if not inspect.isfunction(func) and not inspect.ismethod(func):
        probe = getattr(type(func), "__call__", func)  # noqa: B004 - the class's __call__, to read its kind
    if inspect.isasyncgenfunction(probe):
        return _wrap_async_generator(func, call)
    if inspect.isgeneratorfunction(probe):
        return _wrap_generator(func, call)
    if inspect.iscoroutinefunction(probe):
        return _wrap_coroutine(func, call)
    return _wrap_function(func, call)


# The generator wrappers drive the user's generator by hand, so every protocol step passes through unchanged:
# ``send`` values, ``throw`` (the very exception object, ``GeneratorExit`` from ``close`` included, so the
# user's ``finally`` and ``except`` clauses see what they would undecorated), the return value and
# collection of an unfinished generator (collection closes the wrapper, which closes the user's generator).
# The span ends exactly once: on exhaustion (ok), on close or collection (ok, ``context_precision.partial``),
# or when the generator raises (error). Only the first ``State.keep`` items are kept, and only while the span
# records: that is all that can be recorded or judged. Closed by the garbage collector, the user's generator is
# closed without making our span current (``quiet``): no context variable is set inside a collection
# (``_collecting`` says why).


def _wrap_async_generator(func: F, call: Call) -> F:
    start, finish, fail, enter, leave = _spans.start, _spans.finish, _spans.fail, _spans.enter, _spans.leave

    @functools.wraps(func)
    async def agen_wrapper(*args: Any, **kwargs: Any) -> Any:
        generator = func(*args, **kwargs)
        state = start(call, args, kwargs)
        keep = state.keep if state is not None else 0
        items: list[Any] = []
        count = 0
        value: Any = None
        thrown: BaseException | None = None
        closing = quiet = False
        while True:
            token = enter(state) if state is not None and not quiet else None
            try:
                if thrown is None:
                    item = await generator.asend(value)
                else:
                    item = await generator.athrow(thrown)
            except StopAsyncIteration:
                if state is not None:
                    leave(token)
                    finish(state, items, partial=closing, yielded=count)
                return
            except GeneratorExit:
                if state is not None:
                    leave(token)
                    finish(state, items, partial=True, yielded=count)
                raise
            except BaseException as exc:
                if state is not None:
                    leave(token)
                    fail(state, exc)
                raise
            if state is not None:
                leave(token)
            thrown = None
            count += 1
            if count <= keep:
                items.append(item)
            try:
                value = yield item
            except BaseException as exc:  # noqa: BLE001 - athrow / aclose: passed on to the user's generator as is
                thrown, value = exc, None
                closing = isinstance(exc, GeneratorExit)
                quiet = closing and in_collection()

    return agen_wrapper  # type: ignore[return-value]


def _wrap_generator(func: F, call: Call) -> F:
    start, finish, fail, enter, leave = _spans.start, _spans.finish, _spans.fail, _spans.enter, _spans.leave

    @functools.wraps(func)
    def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
        generator = func(*args, **kwargs)
        state = start(call, args, kwargs)
        if state is None:
            return (yield from generator)
        keep = state.keep
        items: list[Any] = []
        count = 0
        send = generator.send
        value: Any = None
        thrown: BaseException | None = None
        closing = quiet = False
        while True:
            token = None if quiet else enter(state)
            try:
                item = send(value) if thrown is None else generator.throw(thrown)
            except StopIteration as stop:
                leave(token)
                finish(state, items, partial=closing, yielded=count)
                return stop.value
            except GeneratorExit:
                leave(token)
                finish(state, items, partial=True, yielded=count)
                raise
            except BaseException as exc:
                leave(token)
                fail(state, exc)
                raise
            leave(token)
            thrown = None
            count += 1
            if count <= keep:
                items.append(item)
            try:
                value = yield item
            except BaseException as exc:  # noqa: BLE001 - throw / close: passed on to the user's generator as is
                thrown, value = exc, None
                closing = isinstance(exc, GeneratorExit)
                quiet = closing and in_collection()

    return gen_wrapper  # type: ignore[return-value]


def _wrap_coroutine(func: F, call: Call) -> F:
    start, finish, fail, attach, detach = _spans.start, _spans.finish, _spans.fail, _spans.attach, _spans.detach

    @functools.wraps(func)
    async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
        state = start(call, args, kwargs)
        if state is None:
            return await func(*args, **kwargs)
        token = attach(state.ctx)  # _spans.enter, inlined: a call saved on every call
        try:
            result = await func(*args, **kwargs)
        except BaseException as exc:
            # Also when the collector closes it: the token may belong to this thread's own context (a coroutine
            # driven by hand), which would otherwise keep our span current for good. Under asyncio it belongs to
            # the dead task's context, and the reset is refused before it touches any variable.
            detach(token)
            fail(state, exc)
            raise
        detach(token)
        finish(state, result)
        return result

    return async_wrapper  # type: ignore[return-value]


def _wrap_function(func: F, call: Call) -> F:
    start, finish, fail, attach, detach = _spans.start, _spans.finish, _spans.fail, _spans.attach, _spans.detach

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        state = start(call, args, kwargs)
        if state is None:
            return func(*args, **kwargs)
        token = attach(state.ctx)  # _spans.enter, inlined: a call saved on every call
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            detach(token)
            fail(state, exc)
            raise
        detach(token)
        finish(state, result)
        return result

    return wrapper  # type: ignore[return-value]
