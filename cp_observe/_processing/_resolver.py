"""The document resolver: the text of documents a retrieval names by id only, from the user's own function.

The newest GenAI conventions carry a retrieval's documents as ids and scores (``gen_ai.retrieval.documents``), with
no text for a judge to read. A user who can look a document up by id gives a resolver: a callable
``(document_id, data_source) -> text`` (plain or ``async``), or, for ``cp-observe serve`` and ``replay``, the
``module:function`` that names one. It runs on the evaluator thread, never on the request path:

- bounded in time: one retrieval's documents are resolved within ``timeout_s`` in all;
- bounded in concurrency: at most ``concurrency`` calls run at once, across all retrievals; a plain function runs
  each call on a daemon thread of its own (``cp-observe-resolver``). A call that overruns its time keeps its slot
  until it returns, so a resolver that hangs holds ``concurrency`` threads, never more, and, being daemon threads,
  they never keep the host's process from exiting (a thread pool's workers would be joined at exit);
- failures counted: a retrieval whose documents cannot all be resolved is skipped under the reason of the first
  failure (``resolver_error``: a call raised; ``resolver_timeout``; ``resolver_no_text``: a call returned no text),
  and each reason is logged once per resolver with the error's type, never its message (it may quote content).

A retrieval is judged only when every document has its text: dropping one would shift the ranks after it, and
marking it irrelevant would bias the score.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from cp_observe import _names as n
from cp_observe._capture._serialize import MAX_JUDGED_CHARS
from cp_observe._capture._spans import redact_foreign
from cp_observe._errors import ConfigurationError
from cp_observe._log import logger

__all__ = ["DocumentResolver", "load_resolver"]

Resolve = Callable[[str, str], Any]


def load_resolver(spec: str) -> Resolve:
    """The callable ``module:function`` names (``module.sub:Class.method`` too).

    Raises:
        ConfigurationError: the string is not ``module:function``, the module cannot be imported, or the name is
            missing or not callable.
    """
    module_name, colon, attribute = spec.strip().partition(":")
    if not colon or not module_name or not attribute:
        raise ConfigurationError(f"document_resolver={spec!r}: give module:function (an importable callable)")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is a configuration error naming the module
        raise ConfigurationError(
            f"document_resolver={spec!r}: cannot import {module_name!r} ({type(exc).__name__})") from None
    for part in attribute.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise ConfigurationError(f"document_resolver={spec!r}: {module_name!r} has no {attribute!r}")
    if not callable(found):
        raise ConfigurationError(f"document_resolver={spec!r}: {attribute!r} is not callable")
    return found  # type: ignore[no-any-return]


class DocumentResolver:
    """Resolves document ids to text on the evaluator's loop, bounded in time and concurrency."""

    def __init__(self, resolve: Resolve | str, *, timeout_s: float, concurrency: int) -> None:
        """Wrap ``resolve`` (a callable, or ``module:function``); the bounds are the settings' (checked there).

        Raises:
            ConfigurationError: ``resolve`` is neither callable nor an importable ``module:function``.
        """
        if isinstance(resolve, str):
            resolve = load_resolver(resolve)
        if not callable(resolve):
            raise ConfigurationError("document_resolver must be a callable (document_id, data_source) -> text")
        self._resolve = resolve
        call = getattr(resolve, "__call__", None)  # noqa: B004 - a callable object's async __call__ counts too
        self._async = inspect.iscoroutinefunction(resolve) or inspect.iscoroutinefunction(call)
        self.timeout_s = float(timeout_s)
        self.concurrency = int(concurrency)
        self._logged: set[str] = set()  # failure reasons already logged (evaluator thread only)
        self.after_fork()

    def after_fork(self) -> None:
        """Fresh state (at construction, and in a forked child, where the parent's threads do not exist)."""
        self._slots: asyncio.Semaphore | None = None  # made on the evaluator's loop, on first use

    async def texts(self, ids: Sequence[str], data_source: str) -> list[str] | str:
        """Each document's text in rank order, or the skip reason of the first document that failed."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.concurrency)
        deadline = time.monotonic() + self.timeout_s
        results = await asyncio.gather(*(self._one(i, data_source, deadline) for i in ids))
        for result in results:
            if result[0] is None:
                return result[1]
        return [text for text, _ in results if text is not None]

    async def _one(self, document_id: str, data_source: str, deadline: float) -> tuple[str | None, str]:
        slots = self._slots
        assert slots is not None  # set by texts()
        try:
            await asyncio.wait_for(slots.acquire(), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            return self._failed(n.SKIP_RESOLVER_TIMEOUT, "waiting for a free slot")
        try:
            if self._async:
                try:
                    value = await asyncio.wait_for(self._resolve(document_id, data_source),
                                                   max(0.0, deadline - time.monotonic()))
                finally:
                    slots.release()
            else:
                future = self._on_thread(document_id, data_source)
                future.add_done_callback(lambda _: slots.release())  # the slot is free when the thread is
                value = await asyncio.wait_for(asyncio.shield(future), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            return self._failed(n.SKIP_RESOLVER_TIMEOUT, "timed out")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's resolver failing is a counted outcome
            return self._failed(n.SKIP_RESOLVER_ERROR, type(exc).__name__)
        if not isinstance(value, str) or not value.strip():
            return self._failed(n.SKIP_RESOLVER_NO_TEXT, type(value).__name__)
        return redact_foreign(value[:MAX_JUDGED_CHARS]) or "", ""

    def _on_thread(self, document_id: str, data_source: str) -> asyncio.Future[Any]:
        """Run one call of a plain resolver on a daemon thread; its outcome settles the future on the loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        resolve = self._resolve

        def run() -> None:
            value: Any = None
            error: BaseException | None = None
            try:
                value = resolve(document_id, data_source)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop; a non-Exception becomes an error
                error = exc if isinstance(exc, Exception) else RuntimeError(type(exc).__name__)
            try:
                loop.call_soon_threadsafe(_settle, future, value, error)
            except RuntimeError:
                pass  # the evaluator's loop has closed (shutdown): nobody waits for this answer

        threading.Thread(target=run, name="cp-observe-resolver", daemon=True).start()
        return future

    def _failed(self, reason: str, what: str) -> tuple[None, str]:
        if reason not in self._logged:
            self._logged.add(reason)
            logger.warning("the document resolver failed; retrievals it cannot complete are skipped",
                           reason=reason, error=what, resolver=getattr(self._resolve, "__qualname__", "resolver"))
        return None, reason


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
