"""``ContextPrecisionProcessor``'s keywords are the field table's processor settings: same names, defaults, bounds."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import cp_observe
from cp_observe._config._settings import Settings
from cp_observe._errors import ConfigurationError
from cp_observe.testing import IsolatedRuntime

#: Keywords that are objects or wider forms, not (only) a setting of the table.
OBJECTS = {"judge", "tracer_provider", "meter_provider", "logger_provider", "export_processor", "sinks",
           "received_spans"}
#: Settings the processor also takes in a wider form (a callable, a list, a Judge, None for the runtime's).
WIDER = {"data_source": None, "segments": None, "cheap_judge": None, "capture_content": None,
         "document_resolver": None}

#: The processor's keywords and defaults when each was spelled in its signature; none may change or go.
#: (shutdown_timeout_s went from 30 s to 5 s on purpose: a process's exit waits at most that long for evaluations.)
PINNED: dict[str, Any] = {
    "sample_rate": 1.0, "max_evaluations_per_minute": None, "daily_budget_usd": None, "threshold": 0.5,
    "capture_content": None, "queue_size": 1000, "concurrency": 4, "turn_timeout_s": 60.0,
    "max_pending_traces": 1000, "max_judged_contexts": 50, "evaluation_timeout_s": 300.0, "circuit_failures": 5,
    "circuit_cooldown_s": 30.0, "shutdown_timeout_s": 5.0, "hold_timeout_s": 30.0, "max_held_spans": 2000,
    "sink_queue_size": 1000, "sink_batch_size": 100, "sink_max_retries": 5, "data_source": None,
    "calibration_rate": 0.0, "segments": None, "max_segment_values": 50, "cheap_judge": None, "llm_share": 1.0,
    "tracer_provider": None, "meter_provider": None, "logger_provider": None, "export_processor": None, "sinks": (),
    "document_resolver": None, "document_resolver_timeout_s": 5.0, "document_resolver_concurrency": 4,
    "received_spans": False,
}


def _keywords() -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(cp_observe.ContextPrecisionProcessor).parameters)


def test_the_keywords_are_the_objects_and_the_processor_settings() -> None:
    """The signature names the objects and every setting the table marks for the processor, and nothing else."""
    assert set(_keywords()) == OBJECTS | set(Settings.processor_fields())


def test_every_keyword_and_default_of_before_still_holds() -> None:
    """Each keyword the processor ever took is still there, keyword-only, with the same default."""
    keywords = _keywords()
    for name, default in PINNED.items():
        assert keywords[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert keywords[name].default == default, name


def test_the_defaults_are_the_tables() -> None:
    """A setting's keyword default is its field's default (the wider keywords: None, meaning the table's)."""
    fields = Settings.model_fields
    for name, parameter in _keywords().items():
        if name in OBJECTS:
            continue
        expected = WIDER[name] if name in WIDER else fields[name].default
        assert parameter.default == expected, name


def test_a_processor_without_keywords_runs_on_the_tables_defaults() -> None:
    """Its options object equals the table's defaults (capture_content: the runtime's)."""
    with IsolatedRuntime(capture_content=False):
        processor = cp_observe.ContextPrecisionProcessor(cp_observe.LexicalJudge())
        try:
            assert processor.options == Settings(capture_content=False)
        finally:
            processor.shutdown()


def _bounded() -> list[str]:
    fields = Settings.model_fields
    return [name for name in Settings.processor_fields()
            if any(getattr(fields[name], bound) is not None for bound in ("gt", "ge", "le", "check"))]


@pytest.mark.parametrize("name", _bounded())
def test_each_setting_is_taken_and_bounded_by_its_field(name: str) -> None:
    """A value the field refuses raises ConfigurationError naming the keyword; nothing is started."""
    field = Settings.model_fields[name]
    bad: Any = "gen_ai.data_source.id" if field.kind is str else -1  # a segment colliding with a library label
    if field.le is not None:
        bad = field.le + 1
    with pytest.raises(ConfigurationError, match=name):
        cp_observe.ContextPrecisionProcessor(cp_observe.LexicalJudge(), **{name: bad})


def test_a_setting_the_processor_does_not_take_is_a_type_error() -> None:
    """A configure()-only setting, or a misspelt one, is refused like any unknown keyword argument."""
    for name in ("max_value_length", "sample_rat"):
        with pytest.raises(TypeError, match=name):
            cp_observe.ContextPrecisionProcessor(cp_observe.LexicalJudge(), **{name: 1})
