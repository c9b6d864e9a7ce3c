"""Fixtures the processing tests share: the loopback judge server their LLM judges call."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cp_observe.testing import JudgeServer


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    """The test kit's loopback judge: answers like a judge until a test sets its ``default``; records each request."""
    with JudgeServer() as judge_server:
        yield judge_server
