"""Reading the few variables the request path needs, without building ``Settings`` (kept off the import path).

``Settings`` is the full configuration for ``configure()``; these helpers give the decorators
the same answers for the settings they read before anything was configured. Invalid values warn and yield
``None`` (the caller's default), as ``Settings`` does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from cp_observe._log import logger
from cp_observe._names import ENV_OTEL_CAPTURE_CONTENT, ENV_PREFIX

__all__ = ["capture_from_otel_env", "env_bool", "env_float", "env_int"]

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def capture_from_otel_env(env: Mapping[str, str]) -> bool | None:
    """Read the GenAI conventions' capture switch: 'false'/'NO_CONTENT' turn capture off."""
    raw = env.get(ENV_OTEL_CAPTURE_CONTENT)
    if raw is None:
        return None
    value = raw.strip().lower()
    if value in {"false", "0", "no", "no_content", "none", "off"}:
        return False
    if value in {"true", "1", "yes", "span_only", "span_and_event", "event_only", "on"}:
        return True
    return None


def _raw(name: str, env: Mapping[str, str] | None) -> str | None:
    value = (os.environ if env is None else env).get(ENV_PREFIX + name.upper())
    return value if value else None


def _invalid(name: str, raw: str) -> None:
    logger.warning("ignoring invalid environment value", variable=ENV_PREFIX + name.upper(), value=raw[:80])


def env_bool(name: str, env: Mapping[str, str] | None = None) -> bool | None:
    """``CP_OBSERVE_<NAME>`` as a boolean, or ``None`` when unset or invalid."""
    raw = _raw(name, env)
    if raw is None:
        return None
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    _invalid(name, raw)
    return None


def env_float(name: str, low: float, high: float, env: Mapping[str, str] | None = None) -> float | None:
    """``CP_OBSERVE_<NAME>`` as a float within ``[low, high]``, or ``None``."""
    raw = _raw(name, env)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not low <= value <= high:
        _invalid(name, raw)
        return None
    return value


def env_int(name: str, low: int, high: int, env: Mapping[str, str] | None = None) -> int | None:
    """``CP_OBSERVE_<NAME>`` as an integer within ``[low, high]``, or ``None``."""
    raw = _raw(name, env)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        _invalid(name, raw)
        return None
    if not low <= value <= high:
        _invalid(name, raw)
        return None
    return value
