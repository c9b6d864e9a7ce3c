"""Test helpers shipped with cp_observe, for this project's tests, users' tests and benchmarks.

``JudgeServer`` is a real OpenAI-compatible HTTP server on loopback: point litellm at ``server.url`` and script
what the "judge" answers (verdicts, raw text, HTTP errors, delays, connection resets) with the behaviour
factories below. Standard library only; nothing here imports litellm.
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
from cp_observe.testing._judge_server import JudgeServer, RecordedRequest

__all__ = [
    "Behaviour",
    "JudgeServer",
    "Policy",
    "RecordedRequest",
    "delay",
    "fixed",
    "good",
    "raw",
    "reset",
    "status",
    "word_overlap_policy",
]
