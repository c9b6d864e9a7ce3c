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

from typing import TYPE_CHECKING

from cp_observe._exports import lazy_exports

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

_MODULES: dict[str, tuple[str, ...]] = {  # where each public name is defined
    "_behaviours": ("Behaviour", "Policy", "delay", "fixed", "good", "raw", "reset", "status", "word_overlap_policy"),
    "_capture": ("EvaluationCapture",),
    "_fake_judge": ("FakeJudge", "JudgeCall", "word_overlap"),
    "_isolation": ("IsolatedRuntime",),
    "_judge_server": ("JudgeServer", "RecordedRequest"),
    "_labels": ("HumanLabels", "LabelAgreement"),
    "_probe": ("ProcessorProbe",),
}
__getattr__, __dir__ = lazy_exports(__name__, _MODULES, __all__)

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
