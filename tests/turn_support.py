"""The suite's test turn, written once: an ``@agent`` calling a ``@retriever`` on one question.

The ``turn`` fixture (``tests/conftest.py``) gives a fresh one per test; ``make_turn`` builds one with any part
changed (the documents, the answer, the names). Plain module, no pytest: the apps that run as child processes
(``tests/serve_support.py``) take the same turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cp_observe

#: The suite's test turn: a question, what the retriever returns for it, and the agent's answer. The shipped
#: ``FakeJudge`` (word overlap with the answer) finds the first and third documents relevant: AP 5/6, score 0.83.
TURN_QUERY = "What is the capital of France?"
TURN_DOCS = (
    "Paris is the capital of France and its largest city.",
    "Bananas are rich in potassium.",
    "France borders Spain, Italy and Germany.",
)
TURN_ANSWER = "Paris is the capital of France."
TURN_VERDICTS = (True, False, True)


@dataclass(frozen=True)
class Turn:
    """One agent turn, decorated: ``ask`` (``@agent``) calls ``search`` (``@retriever``) and returns ``answer``."""

    query: str
    docs: Any
    answer: Any
    search: Callable[[str], Any]
    ask: Callable[[str], Any]

    def run(self) -> Any:
        """Ask the turn's own question; returns the agent's answer, as the host would get it."""
        return self.ask(self.query)


def make_turn(*, docs: Any = None, answer: Any = TURN_ANSWER, query: str = TURN_QUERY, retriever: str = "kb",
              agent: str = "helper") -> Turn:
    """The test turn with any part changed, decorated afresh; the retriever and agent return exactly these objects.

    ``docs`` defaults to a new list of ``TURN_DOCS``; ``answer`` may be anything an agent returns (``None``: no
    answer).
    """
    returned = list(TURN_DOCS) if docs is None else docs

    @cp_observe.retriever(name=retriever)
    def search(question: str) -> Any:
        return returned

    @cp_observe.agent(name=agent)
    def ask(question: str) -> Any:
        search(question)
        return answer

    return Turn(query, returned, answer, search, ask)
