"""cp-observe's pytest plugin (registered as the ``pytest11`` entry point ``cp_observe``).

Fixtures for users' own tests, so they can assert that their retriever is scored:

- ``cp_observe_judge``: a ``FakeJudge`` (word overlap by default); override the fixture to answer otherwise.
- ``cp_observe_evaluations``: an ``EvaluationCapture`` scoring every decorated call with that judge.
- ``cp_observe_runtime``: an open ``IsolatedRuntime``: whatever the test installs in cp-observe's process-wide
  state (a tracer provider, capture settings, ``configure()``) is undone after it.

Example::

    def test_my_retriever_is_scored(cp_observe_evaluations):
        my_rag_app.answer("what is the refund window?")
        (evaluation,) = cp_observe_evaluations.evaluations()
        assert evaluation.score > 0.5

The plugin imports nothing heavy until a fixture is used.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cp_observe.testing._capture import EvaluationCapture
from cp_observe.testing._fake_judge import FakeJudge
from cp_observe.testing._isolation import IsolatedRuntime

__all__ = ["cp_observe_evaluations", "cp_observe_judge", "cp_observe_runtime"]


@pytest.fixture
def cp_observe_judge() -> FakeJudge:
    """The judge ``cp_observe_evaluations`` uses: a ``FakeJudge`` answering by word overlap."""
    return FakeJudge()


@pytest.fixture
def cp_observe_evaluations(cp_observe_judge: FakeJudge) -> Iterator[EvaluationCapture]:
    """Every decorated call of the test is scored in memory by ``cp_observe_judge``; read ``.evaluations()``."""
    with EvaluationCapture(cp_observe_judge) as capture:
        yield capture


@pytest.fixture
def cp_observe_runtime() -> Iterator[IsolatedRuntime]:
    """cp-observe's process-wide state, restored after the test; ``.install(...)`` changes its settings."""
    with IsolatedRuntime() as runtime:
        yield runtime
