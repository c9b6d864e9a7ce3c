"""``configure()``'s keyword arguments are the settings: same names, same types, and the reference lists them."""

from __future__ import annotations

import inspect
import re

import pytest

import cp_observe
from cp_observe._config import _bounds, _runtime
from cp_observe._config._settings import Settings
from cp_observe._errors import ConfigurationError
from tests.docs_support import page

NOT_SETTINGS = {"redact", "tracer_provider", "meter_provider", "logger_provider", "sinks", "unknown"}


def _keyword_settings() -> dict[str, inspect.Parameter]:
    signature = inspect.signature(cp_observe.configure)
    return {name: p for name, p in signature.parameters.items() if name not in NOT_SETTINGS}


def _reference_table() -> list[str]:
    """The library's settings table of the site's settings reference (generated from the field table)."""
    section = page("reference/settings.md").split("\n## The library", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)` \| `CP_OBSERVE_\w+` \|", section, flags=re.M)


def test_every_setting_is_a_keyword_argument() -> None:
    """configure() names every Settings field as a keyword argument, and no other setting."""
    assert sorted(_keyword_settings()) == sorted(Settings.model_fields)


def test_the_reference_table_is_the_settings() -> None:
    """The settings reference's library table has one row per setting, in the declaration order."""
    assert _reference_table() == list(Settings.model_fields)


def _plain(annotation: object) -> set[str]:
    text = str(annotation).replace("cp_observe._config._fields.Secret", "str")
    return {part.strip().removeprefix("<class '").removesuffix("'>") for part in text.split("|")} - {"None"}


def test_each_argument_takes_its_settings_type() -> None:
    """Each settings argument is typed as its field (a secret as plain str), and None means unset."""
    for name, parameter in _keyword_settings().items():
        if name in {"judge", "data_source", "document_resolver"}:
            continue  # wider on purpose: a Judge object, a callable or a list of attribute names
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
        assert parameter.default is None
        assert _plain(parameter.annotation) == _plain(Settings.model_fields[name].annotation), name


#: configure()'s keywords when each was spelled in its signature; none may go.
PINNED = (
    "judge", "redact", "tracer_provider", "meter_provider", "logger_provider", "sinks", "data_source",
    "judge_api_base", "judge_api_key", "judge_timeout_s", "judge_max_retries", "cheap_judge", "llm_share",
    "judge_transport", "sample_rate", "max_evaluations_per_minute", "daily_budget_usd", "threshold",
    "capture_content", "capture_only", "max_value_length", "max_contexts", "max_judged_contexts", "queue_size",
    "concurrency", "turn_timeout_s", "max_pending_traces", "hold_spans", "hold_timeout_s", "max_held_spans",
    "circuit_failures", "circuit_cooldown_s", "service_name", "otlp_endpoint", "metrics_port", "phoenix_url",
    "phoenix_api_key", "sink_queue_size", "sink_batch_size", "sink_max_retries", "sink_timeout_s",
    "calibration_rate", "segments", "max_segment_values",
)


def test_every_keyword_of_before_is_still_taken() -> None:
    """The settings now come from the field table; every keyword configure() took before is still one."""
    parameters = inspect.signature(cp_observe.configure).parameters
    assert [name for name in PINNED if name not in parameters] == []
    settings = {name: Settings.model_fields[name].default for name in PINNED if name in Settings.model_fields}
    assert Settings.resolve(settings, environ={}) == Settings()


def test_an_unknown_name_still_raises_configuration_error() -> None:
    """A misspelt setting is refused with ConfigurationError, before anything is set up."""
    with pytest.raises(ConfigurationError, match="sample_rat"):
        cp_observe.configure(sample_rat=0.5)  # type: ignore[arg-type]


BOUNDS = {"sample_rate": _bounds.SAMPLE_RATE, "max_value_length": _bounds.MAX_VALUE_LENGTH,
          "max_contexts": _bounds.MAX_CONTEXTS, "max_judged_contexts": _bounds.MAX_JUDGED_CONTEXTS}


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_settings_and_the_runtime_share_the_bounds(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An env value just outside a bound is ignored by both readers; the bound itself is taken by both."""
    low, high = BOUNDS[name]
    step = 0.5 if isinstance(low, float) else 1
    variable = f"CP_OBSERVE_{name.upper()}"
    default = getattr(_runtime.Runtime(), name, None)
    for value in (low - step, high + step):
        monkeypatch.setenv(variable, str(value))
        assert getattr(Settings.resolve(), name) == Settings.model_fields[name].default
        if default is not None:
            assert getattr(_runtime.from_environment(), name) == default
    for value in (low, high):
        monkeypatch.setenv(variable, str(value))
        assert getattr(Settings.resolve(), name) == value
        if default is not None:
            assert getattr(_runtime.from_environment(), name) == value
