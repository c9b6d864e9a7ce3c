"""Whether this thread is running a garbage collection right now (so code of ours is a finalizer's).

A decorated generator the host abandons in a reference cycle is closed by the collector, and its span ends
there. Making the span current around that close would set and reset a context variable inside the
collection, and CPython frees a context's variables under a ``ContextVar.set`` that the collection
interrupted when a finalizer sets a variable of the same context (python/cpython gh-148891, open upstream,
reproduced on 3.10 and 3.11; ``benchmarks/request_path/stress_gc.py`` crashed that way): a use-after-free that crashes
the host later, anywhere. So the decorators ask ``in_collection()`` before
touching the context on the paths a collection can run (a generator or coroutine closed, a call started
from a finalizer) and leave the context alone there.

The answer comes from a ``gc.callbacks`` hook, which the interpreter calls in the collecting thread at the
start and the end of every collection; only one collection runs at a time. It costs two calls of a small
function per collection, and nothing on the request path but one list read.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

__all__ = ["COLLECTING", "in_collection"]

#: The ident of the thread running a collection, else None (written only by the collector's callback).
COLLECTING: list[int | None] = [None]
_get_ident = threading.get_ident


def _track(phase: str, info: dict[str, Any]) -> None:
    COLLECTING[0] = _get_ident() if phase == "start" else None


def in_collection() -> bool:
    """True when this thread is inside a garbage collection (running finalizers and weakref callbacks)."""
    collecting = COLLECTING[0]
    return collecting is not None and collecting == _get_ident()


if _track not in gc.callbacks:
    gc.callbacks.append(_track)
