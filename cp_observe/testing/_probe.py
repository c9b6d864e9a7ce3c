"""``ProcessorProbe``: what a test may read of a ``ContextPrecisionProcessor``'s machinery, and one fake clock.

A processor's worker, queue, sinks and gates are private: tests that reached into them broke whenever the
processor was refactored, for reasons that had nothing to do with what they tested. The probe is the one
place that knows where those parts live, so a refactor changes it and no test::

    probe = ProcessorProbe(processor)
    probe.use_rate_clock(lambda: now[0])   # the rate cap, on a clock the test moves
    assert probe.queued == 0 and not probe.closed
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cp_observe._emission._sinks import SinkRunner
    from cp_observe._processing._processor import ContextPrecisionProcessor

__all__ = ["ProcessorProbe"]


class ProcessorProbe:
    """Read-only views of one processor's evaluator and sinks, and a fake clock for its rate cap.

    Args:
        processor: the ``ContextPrecisionProcessor`` to look into.
    """

    def __init__(self, processor: ContextPrecisionProcessor) -> None:
        self._processor = processor

    @property
    def queued(self) -> int:
        """Targets waiting in the evaluator's bounded queue (not yet assembled or judged)."""
        return len(self._processor._evaluator._queue)

    @property
    def event_loop(self) -> asyncio.AbstractEventLoop | None:
        """The evaluator thread's event loop (``None`` until that thread has made it)."""
        return self._processor._evaluator._loop

    @property
    def closed(self) -> bool:
        """True once shutdown has begun: from then on every target that arrives is counted dropped."""
        return self._processor._evaluator._closed

    @property
    def sinks(self) -> tuple[SinkRunner, ...]:
        """The runners of the evaluation sinks, one per sink, in the order they were given."""
        return self._processor._sinks

    def use_rate_clock(self, clock: Callable[[], float]) -> None:
        """Run the rate cap (``max_evaluations_per_minute``, same limit) on ``clock`` instead of the monotonic one.

        Its bucket starts full at the clock's current reading, as a new processor's does.
        """
        from cp_observe._processing._gates import RateLimiter

        evaluator = self._processor._evaluator
        evaluator.gates.rate = RateLimiter(evaluator.gates.rate.per_minute, clock=clock)
