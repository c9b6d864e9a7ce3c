"""Evaluations that outlive the host's last line: finished at interpreter exit, before the exporters stop.

A short script (a batch job, a CLI, a serverless handler, a notebook kernel) ends while evaluations are still
queued or in flight. The SDK shuts a tracer provider down at exit with its own ``atexit`` hook, and the
provider shuts its span processors down *in the order they were added*: an exporting processor added before
ours has already stopped when our shutdown emits the last evaluation spans, so they were lost, and an
exporting processor added after ours received them. The outcome depended on an order the host may not control.

So the drain does not wait for the provider's shutdown. Each live processor is finished here, within its
``shutdown_timeout_s`` counted from the first exit hook, in two steps:

1. **threading's exit hook** (``threading._register_atexit``, the hook ``concurrent.futures`` itself uses, run
   when the main thread ends, before non-daemon threads are joined): the processor is *flushed* — queued
   targets judged, waiting retrievals judged against their queries, evaluations emitted — while thread pools
   still take work (asyncio's resolver runs on one: an LLM judge needs it for its first DNS lookup). It is
   registered after ``concurrent.futures.thread`` is imported, so it runs before that module stops its pools.
2. **``atexit``** (re-registered whenever a processor is created, so it comes after every provider that
   existed then and runs before their hooks, ``atexit`` being last-in first-out): the processor is *shut
   down* with what is left of the bound (spans that non-daemon threads ended meanwhile), so it emits into
   providers whose exporting processors are all still running, whichever order they were added in. Their
   own exit hooks then export what we emitted.

What does not finish in time is counted ``dropped`` with reason ``shutdown`` (and said once in a log line by
the processor). The host's exit never waits longer than the largest bound (plus the SDK's own export).
``os._exit`` and a signal that kills the process run no exit hook: see the guarantees page.

Processors are held weakly: a processor dropped by the host is not kept alive by being watched.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401 - imported first, so its exit hook is registered before ours
import threading
import time
import weakref
from typing import Protocol

from cp_observe._log import logger

__all__ = ["watch"]


class _Drains(Protocol):
    """What the exit hooks need of a processor."""

    shutdown_timeout_s: float

    def _exit_flush(self, deadline: float) -> None: ...

    def _shutdown_by(self, deadline: float) -> None: ...


_LIVE: weakref.WeakSet[_Drains] = weakref.WeakSet()
_START: list[float] = []  # the monotonic time of the first exit hook: every bound counts from it
_REGISTERED: list[bool] = [False]  # threading's hook is registered once (it has no unregister)


def watch(processor: _Drains) -> None:
    """Finish ``processor``'s evaluations at interpreter exit, before the exporting processors stop."""
    _LIVE.add(processor)
    if not _REGISTERED[0]:
        _REGISTERED[0] = True
        try:
            threading._register_atexit(_at_threading_exit)  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):  # an interpreter without it, or already shutting down
            logger.debug("threading exit hook unavailable; evaluations are finished at atexit only")
    # Moved to the end of atexit's list: it now runs before the hook of every provider created so far.
    atexit.unregister(_at_exit)
    atexit.register(_at_exit)


def _deadline(processor: _Drains) -> float:
    if not _START:
        _START.append(time.monotonic())
    return _START[0] + processor.shutdown_timeout_s


def _at_threading_exit() -> None:
    for processor in list(_LIVE):
        try:
            processor._exit_flush(_deadline(processor))
        except Exception as exc:  # noqa: BLE001 - the host's exit must go on
            logger.warning("finishing evaluations at exit failed", error_type=type(exc).__name__)


def _at_exit() -> None:
    for processor in list(_LIVE):
        try:
            processor._shutdown_by(_deadline(processor))
        except Exception as exc:  # noqa: BLE001 - see _at_threading_exit
            logger.warning("finishing evaluations at exit failed", error_type=type(exc).__name__)
