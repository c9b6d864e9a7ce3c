"""Admission: a whole OTLP request goes into the processor, or none of it does and the sender retries.

The processor's queue drops (and counts) what it cannot take. A service must not: data it answered "OK"
for is gone from the sender, so the decision is taken *before* any span of a request reaches ``on_end``,
for the request as a whole, and refused requests get a retryable status that leaves the data with the
Collector's retry and sending queue.

The rule, with ``Q`` = ``queue_size`` and ``n`` = the items the request will put in the queue:

- ``n`` counts the spans ``on_end`` would hand over: retrievals, answer spans (agents, LLM calls; see
  ``_conventions.role``) and local roots of sampled (or
  forced) traces. Spans of unsampled traces cost nothing; a request with ``n == 0`` is always accepted.
- ``occupancy`` is an upper bound on what the evaluator holds, from ``processor.stats()``:
  ``pending`` (its queue plus its load) plus the targets counted sampled but not finished. The core's
  ``depth()`` can lag while the evaluator thread moves items from its queue into turn assembly; the second
  term covers that window. It counts the evaluator's load (retrievals waiting for their answer, judgements
  in flight) twice, which errs on the side of refusing; the strict ``<`` covers the one target the evaluator
  may have taken from its queue but not yet counted. A public admission hook on the processor, reporting
  its queue and load in one read, would make the bound exact.
- Accept when ``occupancy + n < Q``, or when the scorer is idle (``occupancy == 0``) and ``n < 2Q``, so a
  batch larger than the queue still gets in once the queue is empty. A request with ``n >= 2Q`` can never
  be taken and is refused for good (HTTP 413 / ``INVALID_ARGUMENT``): keep the Collector's
  ``send_batch_max_size`` below ``queue_size``.
- Refusals while draining say ``UNAVAILABLE`` / 503; refusals for a full queue ``RESOURCE_EXHAUSTED`` / 429.

Under this rule the evaluator never holds more than ``2Q`` items, and its own depth reading never exceeds
``4Q``; the service gives the processor a queue of ``4Q + 1``, so the processor's drop path is unreachable
for accepted work. ``offer`` holds one lock from the check to the last ``on_end`` of the request, so
concurrent requests cannot both pass the check on the same free space (``on_end`` is O(1): the lock is
held for microseconds per span).

With durable intake (``_intake``), ``offer`` is given a ``persist`` step: the decision and a reservation of the
request's items are taken under the lock; the spans are written to the store outside it (so concurrent
requests share one group commit), then fed; the reservation counts in ``occupancy`` until the last ``on_end``.
A store refusal is a ``BUSY`` decision with its own ``reason``.

Spans the application marked ``context_precision.sampled = true`` in traces the scorer's ratio would not
pick (``force_evaluation()`` in the app) are added to the forced traces first, so the app's forced
decision holds here too.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opentelemetry.sdk.trace import ReadableSpan

from cp_observe import _names as n
from cp_observe._capture._conventions import ROLE_RETRIEVER, reranks_nothing, role
from cp_observe._config._sampling import FORCED, TraceIdRatio, sample_key, sampling_reason
from cp_observe._processing._processor import ContextPrecisionProcessor

__all__ = ["Admission", "Decision", "Offer", "Persist", "evaluator_queue_size"]



class Decision(enum.Enum):
    """What became of one request."""

    ACCEPTED = "accepted"
    BUSY = "busy"  # queue full: retry later (429 / RESOURCE_EXHAUSTED)
    DRAINING = "draining"  # shutting down: retry (elsewhere) (503 / UNAVAILABLE)
    TOO_LARGE = "too_large"  # more sampled items than the queue can ever take (413 / INVALID_ARGUMENT)


@dataclass(frozen=True, slots=True)
class Offer:
    """The decision on one request, the queue items it carried and the occupancy seen when deciding."""

    decision: Decision
    items: int
    occupancy: int
    reason: str = ""  # why a BUSY came from the durable store (store_full, store_age, store_error)


#: Writes the admitted spans durably; returns ``("", spans to feed)`` or ``(refusal reason, ())``.
Persist = Callable[[Sequence[ReadableSpan]], tuple[str, Sequence[ReadableSpan]]]


def evaluator_queue_size(queue_size: int) -> int:
    """The processor's own queue bound for a service admitting up to ``queue_size`` (see the module docstring)."""
    return 4 * queue_size + 1


class Admission:
    """Decides and feeds, one request at a time, into one ``ContextPrecisionProcessor``."""

    def __init__(self, processor: ContextPrecisionProcessor, queue_size: int) -> None:
        if queue_size < 1:
            raise ValueError("queue_size must be >= 1")
        self.processor = processor
        self.queue_size = queue_size
        self._lock = threading.Lock()  # guards _draining, _reserved, _persisting; spans check to last on_end
        self._idle = threading.Condition(self._lock)  # notified when the last persisting request is fed
        self._draining = False
        self._reserved = 0  # items of requests being persisted: decided, not yet fed
        self._persisting = 0  # such requests

    @property
    def draining(self) -> bool:
        """True once ``drain()`` was called: every request is refused."""
        return self._draining

    def occupancy(self) -> int:
        """An upper bound on the items the evaluator holds (queued, waiting for an answer, being judged)."""
        stats = self.processor.stats()
        finished = stats["scored"] + stats["failed"] + stats["dropped"] + stats["skipped"]
        return int(stats["pending"]) + max(0, int(stats["sampled"]) - int(finished)) + self._reserved

    def takes(self, span: ReadableSpan) -> bool:
        """Whether ``on_end`` will queue ``span``: a retrieval, an answer or a local root of a sampled trace."""
        context = span.context
        if context is None:
            return False
        parent = span.parent
        # The processor's own classification (one code path): retrievals and answers of every convention.
        kind = role(span.attributes, span)
        interesting = parent is None or parent.is_remote or kind is not None
        key = sample_key(span.attributes, kind == ROLE_RETRIEVER)  # the data source's rate, as on_end reads it
        return interesting and sampling_reason(context.trace_id, self.processor.sampler, key) is not None

    @staticmethod
    def reranks_nothing(span: ReadableSpan) -> bool:
        """A RERANKER span that reorders nothing: queued by ``on_end``, then folded, never an evaluation."""
        return reranks_nothing(span.attributes or {})

    def items(self, spans: Sequence[ReadableSpan]) -> int:
        """How many of ``spans`` ``on_end`` will queue: never fewer (admission's guarantee rests on it)."""
        takes = self.takes
        return sum(1 for span in spans if takes(span))

    def mark_forced(self, spans: Sequence[ReadableSpan]) -> None:
        """Add the traces the application forced (marked sampled, outside the ratio) to the forced traces."""
        # The application marks at the ceiling (sample_rate); a paced or allocated rate below it here is no sign
        # of forcing, so the ceiling's ratio decides what the application forced.
        sampler = TraceIdRatio(self.processor.options.sample_rate)
        for span in spans:
            context = span.context
            attributes = span.attributes
            marked = context is not None and attributes is not None and attributes.get(n.CP_SAMPLED) is True
            if marked and context is not None and not sampler(context.trace_id):
                FORCED.add(context.trace_id)  # the application forced this trace

    def offer(self, spans: Sequence[ReadableSpan], persist: Persist | None = None) -> Offer:
        """Feed all of ``spans`` to ``processor.on_end`` (in order) or none of them; ``persist`` first if given."""
        self.mark_forced(spans)
        items = self.items(spans)
        with self._lock:
            if self._draining:
                return Offer(Decision.DRAINING, items, -1)
            occupancy = self.occupancy() if items else 0
            if items and not (occupancy + items < self.queue_size or (occupancy == 0 and items < 2 * self.queue_size)):
                decision = Decision.TOO_LARGE if items >= 2 * self.queue_size else Decision.BUSY
                return Offer(decision, items, occupancy)
            if persist is None:
                on_end = self.processor.on_end
                for span in spans:
                    on_end(span)
                return Offer(Decision.ACCEPTED, items, occupancy)
            self._reserved += items
            self._persisting += 1
        try:
            reason, feed = persist(spans)
            if reason:
                return Offer(Decision.BUSY, items, occupancy, reason)
            on_end = self.processor.on_end
            for span in feed:
                on_end(span)
            return Offer(Decision.ACCEPTED, items, occupancy)
        finally:
            with self._lock:
                self._reserved -= items
                self._persisting -= 1
                if not self._persisting:
                    self._idle.notify_all()

    def drain(self, timeout_s: float = 30.0) -> None:
        """Refuse every later request; returns once no request is being fed (or after ``timeout_s``)."""
        with self._lock:
            self._draining = True
            self._idle.wait_for(lambda: not self._persisting, timeout_s)
