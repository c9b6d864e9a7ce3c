"""A model's prices per token, from litellm's price table, looked up once per model without importing litellm.

One reply's bill is ``Price.cost(usage, tier)``: the uncached prompt tokens at the input price, the cache reads
at the cache-read price, the cache writes at the cache-creation price, the completion tokens at the output
price (reasoning tokens at the reasoning price where the table has one), each price taken from the table's
entry for the tier the reply ran on. The keys are litellm's own: ``input_cost_per_token``,
``output_cost_per_token``, ``cache_read_input_token_cost``, ``cache_creation_input_token_cost`` and
``output_cost_per_reasoning_token``, and for a tier their ``_flex``, ``_batches`` and ``_priority`` variants.
The arithmetic is this module's, not litellm's ``completion_cost`` (which has had bugs with cached tokens).

Where the table lacks a price, the nearest one that does not under-count is used: a tier without its own
variant is charged the standard price (for flex and batch, an upper bound), cache reads without a cache-read
price are charged as uncached prompt tokens, cache writes without a cache-creation price at the input price,
and reasoning tokens without a reasoning price at the output price. Prices that rise with the prompt's length
(the ``_above_<n>k_tokens`` keys) are not applied: a judge prompt is bounded far below those sizes.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar, cast

from cp_observe._errors import ConfigurationError
from cp_observe._names import ENV_LITELLM_LOCAL_COST_MAP
from cp_observe._types import Usage

__all__ = ["TIERS", "Price", "Rates", "Tier", "batch_price_of", "billed_usd", "cost_of", "model_price",
           "price_from_entry", "price_of", "require_prices", "table_entry", "tier_of"]

Tier = Literal["standard", "flex", "batch", "priority"]
#: The tiers a reply can be billed on, each priced from its own variant of litellm's keys.
TIERS: Final[tuple[Tier, ...]] = ("standard", "flex", "batch", "priority")
_SUFFIX: Final[Mapping[str, str]] = {"standard": "", "flex": "_flex", "batch": "_batches", "priority": "_priority"}
# What providers write as the tier a reply ran on, to the tier it is billed on. OpenAI answers "default",
# "flex", "priority" or "scale" (a reserved-capacity contract, billed outside per-token prices); Anthropic's
# usage.service_tier is "standard", "priority" or "batch". Anything else is billed as standard.
_REPLY_TIERS: Final[Mapping[str, Tier]] = {"flex": "flex", "priority": "priority", "batch": "batch",
                                           "batches": "batch"}

_TABLE_FILE = "model_prices_and_context_window_backup.json"
_lock = threading.Lock()  # one read of the table at a time (evaluator threads of several processors)
_found: dict[tuple[str, str], Price | None] = {}  # bounded by the judges a process builds
_MAX_FOUND = 256
_MISSING: Final = object()
_K = TypeVar("_K")
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per token of each kind on one tier (``None``: the table has no price of that kind on any tier)."""

    input: float
    output: float
    cache_read: float | None = None
    cache_creation: float | None = None
    reasoning: float | None = None


@dataclass(frozen=True, slots=True)
class Price:
    """A model's per-token prices on each tier, as litellm's table has them.

    Attributes:
        standard: the standard tier's rates (the table's unsuffixed keys).
        tiers: the rates of the other tiers (``flex``, ``batch``, ``priority``); a tier the table has no
            variant for is charged the standard rates.
    """

    standard: Rates
    tiers: Mapping[str, Rates]

    def rates(self, tier: Tier = "standard") -> Rates:
        """The rates a reply on ``tier`` is charged."""
        return self.tiers.get(tier, self.standard)

    def cost(self, usage: Usage, tier: Tier = "standard") -> float:
        """The USD one reply's ``usage`` costs on ``tier``.

        ``usage.prompt_tokens`` counts every prompt token, cache reads and writes among them;
        ``usage.completion_tokens`` counts every completion token, reasoning tokens among them (the readers in
        `_judging/_usage.py` normalise each provider's usage to this). Counts that exceed their total are
        clamped to it, so no token is charged twice.
        """
        rates = self.rates(tier)
        prompt = max(usage.prompt_tokens, 0)
        read = min(max(usage.cache_read_tokens, 0), prompt)
        write = min(max(usage.cache_creation_tokens, 0), prompt - read)
        completion = max(usage.completion_tokens, 0)
        reasoning = min(max(usage.reasoning_tokens, 0), completion)
        read_rate = rates.input if rates.cache_read is None else rates.cache_read
        write_rate = rates.input if rates.cache_creation is None else rates.cache_creation
        reasoning_rate = rates.output if rates.reasoning is None else rates.reasoning
        return ((prompt - read - write) * rates.input + read * read_rate + write * write_rate
                + (completion - reasoning) * rates.output + reasoning * reasoning_rate)


def tier_of(reply_tier: object) -> Tier:
    """The tier a reply is billed on, from the ``service_tier`` it reported (``None`` or unknown: standard)."""
    if isinstance(reply_tier, str):
        return _REPLY_TIERS.get(reply_tier.strip().lower(), "standard")
    return "standard"


def cost_of(model: str, usage: Usage, tier: Tier = "standard") -> float | None:
    """The USD of one reply's ``usage`` for ``model`` (``provider/name`` as litellm takes it) on ``tier``.

    ``None`` when the table has no price for the model. The function batch judging and tier pricing build on:
    ``cost_of("openai/gpt-5-mini", Usage(1, 1000, 20, cache_read_tokens=800), "flex")``.
    """
    price = model_price(model)
    return price.cost(usage, tier) if price is not None else None


def billed_usd(error: BaseException) -> float | None:
    """What the replies a failed judgement received cost (``JudgeError.cost_usd``); ``None`` when not known.

    A reply that could not be parsed, and the corrective and per-context calls after it, are billed whether or
    not a verdict came of them; an error of another kind (a timeout cancelling the calls) carries no cost.
    """
    cost = getattr(error, "cost_usd", None)
    return float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None


def model_price(model: str) -> Price | None:
    """The price of a litellm model string: ``provider/name``, or a bare name whatever its provider."""
    provider, slash, name = model.partition("/")
    return price_of(provider, name) if slash and name else price_of("", model)


def require_prices(*judges: object, setting: str = "daily_budget_usd") -> None:
    """Refuse a budget over a model whose price is unknown, since its calls would spend nothing against it.

    ``judges``: the judges the budget governs (``None`` entries skipped). A judge with a ``price`` property
    (``LLMJudge``) is checked; any other judge reports its own ``cost_usd`` and is taken at its word.

    Raises:
        ConfigurationError: naming each model litellm's price table has no price for.
    """
    unpriced = [getattr(judge, "model", "?") for judge in judges
                if isinstance(getattr(type(judge), "price", None), property)
                and judge.price is None]  # type: ignore[attr-defined]
    if unpriced:
        names = ", ".join(repr(model) for model in unpriced)
        raise ConfigurationError(
            f"{setting} is set, but litellm's price table has no price for the judge model {names}: its calls "
            "would spend nothing against the budget. Register the model's price with litellm.register_model "
            "(before configuring), price it under a model name the table has, or leave the budget unset.")


def price_of(provider: str, name: str) -> Price | None:
    """The price of ``provider/name`` as litellm's table has it, or ``None`` (cost unknown, as with litellm).

    ``provider`` empty: a bare model name, looked up as it is whatever its provider.
    """
    return _once(_found, (provider, name), lambda: _lookup(_table(), provider, name))


def _once(cache: dict[_K, _V], key: _K, find: Callable[[], _V]) -> _V:
    """``cache[key]``, found once under the lock that evaluator threads share; a full cache is cleared first."""
    value = cache.get(key, _MISSING)
    if value is not _MISSING:
        return cast(_V, value)
    with _lock:
        value = cache.get(key, _MISSING)
        if value is _MISSING:
            if len(cache) >= _MAX_FOUND:
                cache.clear()
            value = cache[key] = find()
        return cast(_V, value)


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


def _lookup(table: Mapping[str, Any], provider: str, name: str) -> Price | None:
    """``provider/name`` first, then ``name`` when its entry is the same provider's (as litellm resolves it).

    The same provider includes litellm's variants of its name (``cohere`` prices as ``cohere_chat``,
    ``vertex_ai`` as ``vertex_ai-language-models``).
    """
    keys = (f"{provider}/{name}", name) if provider else (name,)
    for key in keys:
        entry = table.get(key)
        if not isinstance(entry, dict):
            continue
        owner = entry.get("litellm_provider")
        if provider and isinstance(owner, str) and not owner.startswith(provider):
            continue
        return price_from_entry(entry)
    return None


def price_from_entry(entry: Mapping[str, Any]) -> Price | None:
    """A ``Price`` from one entry of litellm's table, or ``None`` when it has no input and output price."""
    standard = _rates(entry, "")
    if standard is None:
        return None
    tiers = {tier: rates for tier in TIERS[1:] if (rates := _rates(entry, _SUFFIX[tier], standard)) is not None}
    return Price(standard, tiers)


def _rates(entry: Mapping[str, Any], suffix: str, standard: Rates | None = None) -> Rates | None:
    """The rates under ``suffix``; a kind the tier has no key for keeps the standard rate."""
    def number(key: str) -> float | None:
        value = entry.get(key + suffix)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    found = (number("input_cost_per_token"), number("output_cost_per_token"), number("cache_read_input_token_cost"),
             number("cache_creation_input_token_cost"), number("output_cost_per_reasoning_token"))
    if standard is None:
        if found[0] is None or found[1] is None:
            return None
        return Rates(found[0], found[1], found[2], found[3], found[4])
    if all(value is None for value in found):
        return None
    base = (standard.input, standard.output, standard.cache_read, standard.cache_creation, standard.reasoning)
    merged = [mine if mine is not None else theirs for mine, theirs in zip(found, base, strict=True)]
    return Rates(merged[0], merged[1], merged[2], merged[3], merged[4])  # type: ignore[arg-type]


def batch_price_of(provider: str, name: str) -> Price | None:
    """The price of ``provider/name`` when the table has a batch-API variant of it (``*_batches``), else ``None``.

    Batch judging checks its budget against the batch price and refuses a model without one; its costs are
    ``price.cost(usage, "batch")``.
    """
    price = price_of(provider, name)
    return price if price is not None and "batch" in price.tiers else None
_entries: dict[str, dict[str, Any] | None] = {}  # the table entries looked up, bounded like _found


def table_entry(model: str) -> dict[str, Any] | None:
    """The entry of litellm's table for a model string (``provider/name`` or a bare name), read once per model.

    ``provider/name`` first, then ``name`` when its entry is the same provider's; a bare name is looked up as
    it is (litellm then infers the provider from the entry). What the request parameters of a model are decided
    from (`_judging/_params.py`): whether it reasons, which reasoning efforts it takes.
    """
    return _once(_entries, model, lambda: _entry(_table(), model))


def _entry(table: Mapping[str, Any], model: str) -> dict[str, Any] | None:
    provider, slash, name = model.partition("/")
    for key, wanted in (((model, provider), (name, provider)) if slash else ((model, None),)):
        entry = table.get(key)
        if isinstance(entry, dict) and (wanted is None or entry.get("litellm_provider") in (wanted, None)
                                        or key == model):
            return entry
    return None
