"""Test helpers shipped with cp_observe, for this project's tests, users' tests and benchmarks.

``JudgeServer`` is a real OpenAI-compatible HTTP server on loopback: point litellm at ``server.url`` and script
what the "judge" answers (verdicts, raw text, HTTP errors, delays, connection resets) with the behaviour
factories below. Standard library only; nothing here imports litellm.

For users' own tests: ``FakeJudge`` judges in process through a function (no HTTP), and ``EvaluationCapture``
scores the decorated calls in memory and returns the evaluations. The pytest plugin
(``cp_observe.testing.pytest_plugin``, registered by the ``pytest11`` entry point) offers both as the fixtures
``cp_observe_judge`` and ``cp_observe_evaluations``.

For tests that wire cp-observe themselves: ``IsolatedRuntime`` (the fixture ``cp_observe_runtime``) saves the
process-wide state the decorators and ``configure()`` keep and puts it back afterwards, and ``ProcessorProbe``
reads a processor's queue, event loop and sinks (and runs its rate cap on a fake clock) without reaching into
its private attributes.

The names load on first use (PEP 562): pytest loads the plugin in every session of an environment where
cp-observe is installed, and that must not cost the HTTP server's imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "Behaviour",
    "EvaluationCapture",
    "FakeJudge",
    "HumanLabels",
    "IsolatedRuntime",
    "JudgeCall",
    "JudgeServer",
    "LabelAgreement",
    "Policy",
    "ProcessorProbe",
    "RecordedRequest",
    "delay",
    "fixed",
    "good",
    "raw",
    "reset",
    "status",
    "word_overlap",
    "word_overlap_policy",
]

_WHERE: dict[str, str] = {
    "Behaviour": "_behaviours",
    "EvaluationCapture": "_capture",
    "FakeJudge": "_fake_judge",
    "HumanLabels": "_labels",
    "LabelAgreement": "_labels",
    "IsolatedRuntime": "_isolation",
    "JudgeCall": "_fake_judge",
    "JudgeServer": "_judge_server",
    "Policy": "_behaviours",
    "ProcessorProbe": "_probe",
    "RecordedRequest": "_judge_server",
    "delay": "_behaviours",
    "fixed": "_behaviours",
    "good": "_behaviours",
    "raw": "_behaviours",
    "reset": "_behaviours",
    "status": "_behaviours",
    "word_overlap": "_fake_judge",
    "word_overlap_policy": "_behaviours",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'cp_observe.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"cp_observe.testing.{module}"), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from cp_observe.testing._behaviours import (
        Behaviour,
        Policy,
        delay,
        fixed,
        good,
        raw,
        reset,
        status,
        word_overlap_policy,
    )
    from cp_observe.testing._capture import EvaluationCapture
    from cp_observe.testing._fake_judge import FakeJudge, JudgeCall, word_overlap
    from cp_observe.testing._isolation import IsolatedRuntime
    from cp_observe.testing._judge_server import JudgeServer, RecordedRequest
    from cp_observe.testing._labels import HumanLabels, LabelAgreement
    from cp_observe.testing._probe import ProcessorProbe
