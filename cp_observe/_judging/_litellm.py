"""Lazy access to litellm: importing it costs about 3.6 s and 200 MB, so only a judge's first call pays."""

from __future__ import annotations

import logging
import os
import sys
import threading
from types import ModuleType
from typing import Any

from cp_observe._fork import at_fork
from cp_observe._names import ENV_LITELLM_LOCAL_COST_MAP

__all__ = ["load_litellm"]

_lock = threading.Lock()  # guards the one-time import
_module: ModuleType | None = None
_importing = False  # True while a thread imports litellm (under _lock)
_forked_mid_import = False  # this process was forked while another thread was importing litellm


def _after_fork_in_child() -> None:
    """A fresh lock in the child; no handler runs *before* the fork, so ``os.fork()`` never waits for us.

    A child forked while a thread of the parent was importing litellm inherits that import half-done, with
    the import system's module locks held by a thread that does not exist in the child. Its first
    ``load_litellm`` forgets the half-imported modules and their locks first, then imports afresh.
    """
    global _lock, _forked_mid_import  # noqa: PLW0603 - process-wide state, reset once in the new child
    _forked_mid_import = _forked_mid_import or (_importing and _module is None)
    _lock = threading.Lock()


at_fork(_after_fork_in_child)


def _forget_half_imported() -> None:
    """Drop the modules whose import a thread of the parent had not finished, with their import locks."""
    global _forked_mid_import  # noqa: PLW0603 - guarded by _lock
    import importlib._bootstrap as bootstrap

    module_locks: Any = getattr(bootstrap, "_module_locks", {})
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if spec is not None and getattr(spec, "_initializing", False):
            sys.modules.pop(name, None)
            module_locks.pop(name, None)
    _forked_mid_import = False


def load_litellm() -> ModuleType:
    """Import litellm once, without letting it fetch its remote cost map unless the user asked for that."""
    global _module, _importing  # noqa: PLW0603 - a process-wide lazy singleton, guarded by _lock
    if _module is not None:
        return _module
    with _lock:
        if _module is None and _forked_mid_import:
            _forget_half_imported()
        if _module is None:
            os.environ.setdefault(ENV_LITELLM_LOCAL_COST_MAP, "True")
            _importing = True
            try:
                import litellm
            finally:
                _importing = False

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
