"""Lazy access to litellm: importing it costs about 3.6 s and 200 MB, so only a judge's first call pays."""

from __future__ import annotations

import os
import threading
from types import ModuleType

from cp_observe._names import ENV_LITELLM_LOCAL_COST_MAP

__all__ = ["load_litellm"]

_lock = threading.Lock()
_module: ModuleType | None = None


def load_litellm() -> ModuleType:
    """Import litellm once, without letting it fetch its remote cost map unless the user asked for that."""
    global _module  # noqa: PLW0603 - a process-wide lazy singleton, guarded by _lock
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            os.environ.setdefault(ENV_LITELLM_LOCAL_COST_MAP, "True")
            import litellm

            # Keep litellm quiet: its banners and "give feedback" lines would land in the host's output.
            litellm.suppress_debug_info = True
            litellm.telemetry = False
            _module = litellm
    return _module
