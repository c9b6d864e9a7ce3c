"""Reading the few variables the request path needs, without building ``Settings`` (kept off the import path).

``Settings`` is the full configuration for ``configure()``; these helpers give the decorators
the same answers for the settings they read before anything was configured. Invalid values warn and yield
``None`` (the caller's default), as ``Settings`` does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeVar

from cp_observe._log import logger
from cp_observe._names import ENV_OTEL_CAPTURE_CONTENT, ENV_PREFIX

__all__ = ["capture_from_otel_env", "env_bool", "env_float", "env_int"]

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_N = TypeVar("_N", int, float)


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
    return _number(name, float, low, high, env)


def env_int(name: str, low: int, high: int, env: Mapping[str, str] | None = None) -> int | None:
    """``CP_OBSERVE_<NAME>`` as an integer within ``[low, high]``, or ``None``."""
    return _number(name, int, low, high, env)


def _number(name: str, parse: Callable[[str], _N], low: _N, high: _N, env: Mapping[str, str] | None) -> _N | None:
    """``CP_OBSERVE_<NAME>`` parsed and within ``[low, high]`` (NaN is not), else ``None`` (warned when set)."""
    raw = _raw(name, env)
    if raw is None:
        return None
    try:
        value: _N | None = parse(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        _invalid(name, raw)
        return None
    return value
