"""Lazy access to litellm: importing it costs about 3.6 s and 200 MB, so only a judge's first call pays.

litellm also makes requests of its own that nobody configured: its cost map at import, its Anthropic
beta-headers config from GitHub on an Anthropic call, and more behind its offline switch. Behind a firewall
that drops packets each waits for its timeout; everywhere else it is an outbound request the user never asked
for. So before the import, ``keep_litellm_offline`` turns litellm's switches on unless the user set them.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from types import ModuleType
from typing import Any

from cp_observe._fork import at_fork
from cp_observe._names import (
    ENV_LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS,
    ENV_LITELLM_LOCAL_COST_MAP,
    ENV_LITELLM_OFFLINE_MODE,
)

__all__ = ["keep_litellm_offline", "load_litellm"]

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


def keep_litellm_offline() -> None:
    """Turn on litellm's offline switches, each only where the user left it unset.

    The offline switch also forces the local cost map, so it stays off when the user asked for the remote
    cost map (``LITELLM_LOCAL_MODEL_COST_MAP`` set to anything but true); the beta-headers switch is set then
    too, since the user asked for one fetch, not for all of them.
    """
    remote_cost_map = os.environ.get(ENV_LITELLM_LOCAL_COST_MAP, "true").strip().lower() != "true"
    os.environ.setdefault(ENV_LITELLM_LOCAL_COST_MAP, "True")
    os.environ.setdefault(ENV_LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS, "True")
    if not remote_cost_map:
        os.environ.setdefault(ENV_LITELLM_OFFLINE_MODE, "true")


def load_litellm() -> ModuleType:
    """Import litellm once, offline (``keep_litellm_offline``) unless the user asked otherwise."""
    global _module, _importing  # noqa: PLW0603 - a process-wide lazy singleton, guarded by _lock
    if _module is not None:
        return _module
    with _lock:
        if _module is None and _forked_mid_import:
            _forget_half_imported()
        if _module is None:
            keep_litellm_offline()
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
