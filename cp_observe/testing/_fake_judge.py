"""``FakeJudge``: an in-process judge for tests, answering through a function you give it (like httpx's MockTransport).

No HTTP, no litellm: ``judge()`` calls ``handler(query, reference, contexts)`` and wraps its booleans as verdicts.
Every call is recorded, so a test can check what reached the judge.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cp_observe._types import Judgement, Usage, Verdict

__all__ = ["FakeJudge", "JudgeCall", "word_overlap"]

Handler = Callable[[str, str, Sequence[str]], Sequence[bool]]


@dataclass(frozen=True, slots=True)
class JudgeCall:
    """One call that reached the fake judge."""

    query: str
    reference: str
    contexts: tuple[str, ...]


def word_overlap(query: str, reference: str, contexts: Sequence[str]) -> list[bool]:
    """The default handler: a context is relevant when it shares a word of five or more letters with the reference."""
    del query
    words = {w.strip(".,;:!?\"'()").lower() for w in reference.split()}
    words = {w for w in words if len(w) >= 5}
    return [any(w in context.lower() for w in words) for context in contexts]


class FakeJudge:
    """A judge that answers with ``handler`` and records every call.

    Args:
        handler: ``(query, reference, contexts) -> one bool per context``; default ``word_overlap``. If it
            raises, the evaluation fails as it would with a failing real judge.
        model: the model name recorded on evaluations.
        usage: what each judgement reports it spent (default: one call, no tokens), for tests of the token
            metrics.
        cost_usd: what each judgement reports it cost (default ``None``: unknown), for tests of the daily
            budget and the cost metric.
    """

    def __init__(self, handler: Handler | None = None, *, model: str = "fake-judge", usage: Usage | None = None,
                 cost_usd: float | None = None) -> None:
        if cost_usd is not None and cost_usd < 0:
            raise ValueError(f"cost_usd must be at least 0, got {cost_usd}")
        self._handler = handler or word_overlap
        self._model = model
        self._usage = usage if usage is not None else Usage(calls=1)
        self._cost_usd = cost_usd
        self._lock = threading.Lock()  # guards _calls: the evaluator thread appends, the test reads
        self._calls: list[JudgeCall] = []

    @property
    def model(self) -> str:
        """The model name recorded on evaluations."""
        return self._model

    @property
    def calls(self) -> list[JudgeCall]:
        """A copy of the calls so far, oldest first."""
        with self._lock:
            return list(self._calls)

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Judgement:
        """Judge ``contexts`` with the handler: one verdict per context, in rank order."""
        with self._lock:
            self._calls.append(JudgeCall(query, reference, tuple(contexts)))
        relevant = list(self._handler(query, reference, contexts))
        if len(relevant) != len(contexts):
            raise ValueError(f"handler returned {len(relevant)} verdicts for {len(contexts)} contexts")
        verdicts = tuple(Verdict(i, bool(r), "fake judge") for i, r in enumerate(relevant))
        return Judgement(verdicts=verdicts, model=self._model, usage=self._usage, cost_usd=self._cost_usd)
