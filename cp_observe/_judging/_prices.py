"""A model's price per token, from litellm's price table, looked up once per model without importing litellm.

litellm reads its bundled ``model_prices_and_context_window_backup.json`` when ``LITELLM_LOCAL_MODEL_COST_MAP``
is true, which cp-observe makes the default (`_judging/_litellm.py`). Then the same file is read here as a
file (litellm's package directory is found without importing it), and only the entries looked up are kept.
When the user asked for litellm's remote map (the variable set to anything else), or litellm is already
imported (prices registered with ``litellm.register_model`` live there), ``litellm.model_cost`` is used.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

from cp_observe._names import ENV_LITELLM_LOCAL_COST_MAP

__all__ = ["Price", "price_of", "table_entry"]

_TABLE_FILE = "model_prices_and_context_window_backup.json"
_lock = threading.Lock()  # one read of the table at a time (evaluator threads of several processors)
_found: dict[tuple[str, str], Price | None] = {}  # bounded by the judges a process builds
_MAX_FOUND = 256


@dataclass(frozen=True, slots=True)
class Price:
    """USD per prompt, completion and cache-read prompt token (``None``: the table has no cache price)."""

    input_per_token: float
    output_per_token: float
    cache_read_per_token: float | None = None

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        """The cost litellm computes: uncached prompt, cached prompt and completion tokens times their price.

        Cached tokens without a cache price in the table are charged as uncached (an upper bound, so a daily
        budget is never under-counted).
        """
        cached = min(max(cached_tokens, 0), prompt_tokens) if self.cache_read_per_token is not None else 0
        cost = (prompt_tokens - cached) * self.input_per_token + completion_tokens * self.output_per_token
        if cached:
            cost += cached * (self.cache_read_per_token or 0.0)
        return cost


def price_of(provider: str, name: str) -> Price | None:
    """The price of ``provider/name`` as litellm's table has it, or ``None`` (cost unknown, as with litellm)."""
    key = (provider, name)
    if key in _found:
        return _found[key]
    with _lock:
        if key not in _found:
            if len(_found) >= _MAX_FOUND:
                _found.clear()
            _found[key] = _lookup(_table(), provider, name)
        return _found[key]


def _table() -> dict[str, Any]:
    local = os.environ.get(ENV_LITELLM_LOCAL_COST_MAP, "true").strip().lower() == "true"
    if "litellm" in sys.modules or not local:
        from cp_observe._judging._litellm import load_litellm

        cost: dict[str, Any] = load_litellm().model_cost
        return cost
    spec = importlib.util.find_spec("litellm")  # a top-level package: found, not imported
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        from pathlib import Path  # read once per process, on the first judge call

        path = Path(location) / _TABLE_FILE
        if path.is_file():
            table: dict[str, Any] = json.loads(path.read_bytes())
            return table
    return {}


def _lookup(table: dict[str, Any], provider: str, name: str) -> Price | None:
    """``provider/name`` first, then ``name`` when its entry is the same provider's (as litellm resolves it)."""
    for key in (f"{provider}/{name}", name):
        entry = table.get(key)
        if not isinstance(entry, dict) or entry.get("litellm_provider") not in (provider, None):
            continue
        try:
            cache = entry.get("cache_read_input_token_cost")
            return Price(float(entry["input_cost_per_token"]), float(entry["output_cost_per_token"]),
                         float(cache) if isinstance(cache, (int, float)) else None)
        except (KeyError, TypeError, ValueError):
            return None
    return None


_entries: dict[str, dict[str, Any] | None] = {}  # the table entries looked up, bounded like _found


def table_entry(model: str) -> dict[str, Any] | None:
    """The entry of litellm's table for a model string (``provider/name`` or a bare name), read once per model.

    ``provider/name`` first, then ``name`` when its entry is the same provider's; a bare name is looked up as
    it is (litellm then infers the provider from the entry). What the request parameters of a model are decided
    from (`_judging/_params.py`): whether it reasons, which reasoning efforts it takes.
    """
    if model in _entries:
        return _entries[model]
    with _lock:
        if model not in _entries:
            if len(_entries) >= _MAX_FOUND:
                _entries.clear()
            table = _table()
            provider, slash, name = model.partition("/")
            found: dict[str, Any] | None = None
            for key, wanted in (((model, provider), (name, provider)) if slash else ((model, None),)):
                entry = table.get(key)
                if isinstance(entry, dict) and (wanted is None or entry.get("litellm_provider") in (wanted, None)
                                                or key == model):
                    found = entry
                    break
            _entries[model] = found
        return _entries[model]
