"""The one registry of fork hooks: everything cp-observe must redo in a forked child, run in one place.

A lock held by another thread at fork time stays locked forever in the child, and a worker thread does not
survive the fork. Each module that owns such state registers a hook here; the registry asks the interpreter
once (``os.register_at_fork``) and runs the hooks in the child in the order they were registered. Hooks of
objects (a processor, a cache, a sink) are held weakly and forgotten once their object is gone, so making and
dropping processors does not grow the registry. No hook runs *before* the fork: ``os.fork()`` never waits
for cp-observe.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["at_fork", "at_fork_method"]

_hooks: list[Callable[[], Any] | weakref.WeakMethod[Callable[[], Any]]] = []
_lock = threading.Lock()  # guards _hooks (registration may happen on any thread)


def at_fork(hook: Callable[[], Any]) -> None:
    """Run the module-level function ``hook`` in every forked child."""
    with _lock:
        _hooks.append(hook)


def at_fork_method(method: Callable[[], Any]) -> None:
    """Run the bound ``method`` in every forked child while its object lives (held weakly)."""
    with _lock:
        _hooks[:] = [h for h in _hooks if not (isinstance(h, weakref.WeakMethod) and h() is None)]
        _hooks.append(weakref.WeakMethod(method))


def _run_in_child() -> None:
    global _lock  # noqa: PLW0603 - a fresh lock in the child: the parent's may be held by a dead thread
    _lock = threading.Lock()
    for hook in list(_hooks):
        target = hook() if isinstance(hook, weakref.WeakMethod) else hook
        if target is None:
            continue
        try:
            target()
        except Exception:  # noqa: BLE001 - one hook failing must not keep the others from running
            continue


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_run_in_child)
