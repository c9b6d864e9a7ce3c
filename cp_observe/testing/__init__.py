"""Test helpers shipped with cp_observe, for this project's tests, users' tests and benchmarks.

``JudgeServer`` is a real OpenAI-compatible HTTP server on loopback: point litellm at ``server.url`` and script
what the "judge" answers (verdicts, raw text, HTTP errors, delays, connection resets) with the behaviour
factories below. Standard library only; nothing here imports litellm.

For users' own tests: ``FakeJudge`` judges in process through a function (no HTTP), and ``EvaluationCapture``
scores the decorated calls in memory and returns the evaluations. The pytest plugin
(``cp_observe.testing.pytest_plugin``, registered by the ``pytest11`` entry point) offers both as the fixtures
``cp_observe_judge`` and ``cp_observe_evaluations``.
"""

from __future__ import annotations

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
from cp_observe.testing._judge_server import JudgeServer, RecordedRequest

__all__ = [
    "Behaviour",
    "EvaluationCapture",
    "FakeJudge",
    "JudgeCall",
    "JudgeServer",
    "Policy",
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
