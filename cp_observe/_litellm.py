"""Lazy access to litellm: importing it costs about 3.6 s and 200 MB, so only a judge's first call pays."""

from __future__ import annotations

import logging
import os
import threading
from types import ModuleType

from cp_observe._names import ENV_LITELLM_LOCAL_COST_MAP

__all__ = ["load_litellm"]

_lock = threading.Lock()  # guards the one-time import
_module: ModuleType | None = None
if hasattr(os, "register_at_fork"):
    # The import takes seconds under the lock; a child forked meanwhile must not inherit it locked.
    os.register_at_fork(before=_lock.acquire, after_in_parent=_lock.release, after_in_child=_lock.release)


def load_litellm() -> ModuleType:
    """Import litellm once, without letting it fetch its remote cost map unless the user asked for that."""
    global _module  # noqa: PLW0603 - a process-wide lazy singleton, guarded by _lock
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            os.environ.setdefault(ENV_LITELLM_LOCAL_COST_MAP, "True")
            import litellm

            # Keep litellm quiet: its banners and "give feedback" lines would land in the host's output, and at
            # DEBUG it logs whole prompts, i.e. captured content. The host can still lower the level itself.
            litellm.suppress_debug_info = True
            litellm.telemetry = False
            for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
                log = logging.getLogger(name)
                if log.level == logging.NOTSET or log.level < logging.WARNING:
                    log.setLevel(logging.WARNING)
            _module = litellm
    return _module
