"""Evaluation sinks: carry each finished evaluation somewhere besides OpenTelemetry (Phoenix annotations, say).

A ``Sink`` sends a batch of ``EvaluationRecord`` and says, per record, whether it was delivered, should be tried
again, or was refused for good. A ``SinkRunner`` gives every sink the same guarantees:

- ``offer`` (called on the evaluator thread when an evaluation is emitted) is an append to a bounded deque; it
  never blocks and never raises. A full queue drops the record and counts it (``dropped``/``queue_full``).
- One daemon thread per sink (``cp-observe-sink-{name}``) sends batches, with instrumentation suppressed, so the
  sink's own HTTP calls are not traced. Neither the judge nor the host ever waits for a sink.
- A record to retry waits, without holding up the others, for an exponential backoff with jitter; after
  ``max_retries`` retries it is counted ``failed``/``retries_exhausted``. When a whole batch fails (the
  destination is down), the runner pauses sending for a backoff of its own and then probes with one batch.
- Every record ends in exactly one of ``context_precision.sink.{sent,failed,dropped}`` (labelled by sink), so
  ``offered == sent + failed + dropped`` once nothing is pending (``stats()``).
"""

from __future__ import annotations

import enum
import heapq
import itertools
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
from opentelemetry.metrics import MeterProvider
from opentelemetry.metrics import get_meter_provider as global_meter_provider

from cp_observe import _names as n
from cp_observe._config._settings import Settings
from cp_observe._fork import at_fork_method
from cp_observe._log import logger

__all__ = ["Delivery", "EvaluationRecord", "Sink", "SinkRunner", "recorded_documents"]

_SCOPE = "cp_observe"
_MAX_DOCUMENTS = 1000


@dataclass(frozen=True, slots=True)
class EvaluationRecord:
    """One finished evaluation, as a sink receives it.

    Attributes:
        trace_id: the trace of the scored span.
        span_id: the scored (retrieval or agent) span.
        evaluation_span_id: the ``evaluation context_precision`` span carrying the same result.
        score: the context precision score; ``label`` is ``pass``/``fail`` against the threshold.
        explanation: the reason (built from the verdicts when content capture is off).
        average_precision: the unrounded AP.
        verdicts: per-context relevance, in rank order (position ``i`` is the ``i``-th context judged).
        reasons: the judge's per-context reasons, or ``None`` when content capture is off (they may quote content).
        documents: how many documents are recorded on the scored span (``retrieval.documents.*``); positions at
            or beyond it have no document to attach to.
        judge_model: the judge's model name; ``annotator_kind`` is ``LLM`` for an LLM judge, else ``CODE``.
        prompt_version: the judge prompt's version, ``None`` for a judge without one.
        data_source: the retriever's data source id; ``agent_name`` the agent, when known.
        reference: ``output`` or ``query``: what the contexts were judged against.
        needs_label: drawn at ``calibration_rate`` for a person to label (``_judging/_calibration.py``).
    """

    trace_id: int
    span_id: int
    evaluation_span_id: int
    score: float
    label: str
    explanation: str
    average_precision: float
    verdicts: tuple[bool, ...]
    reasons: tuple[str, ...] | None
    documents: int
    judge_model: str
    annotator_kind: str
    prompt_version: str | None
    data_source: str
    agent_name: str | None
    reference: str
    needs_label: bool = False  # drawn at calibration_rate for a person to label
    judge_kind: str = ""  # llm | lexical | custom (_judging/_identity.py), so calibrate groups Phoenix like files


class Delivery(enum.Enum):
    """What became of one record in one ``Sink.send``."""

    SENT = "sent"
    RETRY = "retry"  # this record later (e.g. the span it names is not there yet); the others go on
    UNAVAILABLE = "unavailable"  # the destination is failing (no answer, timeout, 429, 5xx): retry, and pause
    REFUSED = "refused"  # a permanent refusal (e.g. 422): counted failed, never retried


@runtime_checkable
class Sink(Protocol):
    """A destination for evaluations. ``send`` runs on the sink's own thread; it may block (with a timeout)."""

    @property
    def name(self) -> str:
        """The ``sink`` label of the ``context_precision.sink.*`` counters."""
        ...

    def send(self, records: Sequence[EvaluationRecord]) -> Sequence[Delivery]:
        """Deliver ``records``; return one ``Delivery`` per record, in order. Raising means UNAVAILABLE for all."""
        ...


@dataclass(slots=True)
class _Pending:
    record: EvaluationRecord
    queued_at: float
    attempts: int = 0


class SinkRunner:
    """A bounded, batched, asynchronous, retried and counted pipeline in front of one ``Sink``.

    Args:
        sink: the destination.
        meter_provider: where the ``context_precision.sink.*`` counters go (default: the global provider).
        options: the processor's options; this reads ``sink_queue_size`` (records queued, waiting to retry or in
            flight before new ones are dropped, counted), ``sink_batch_size`` (most records handed to one
            ``send``) and ``sink_max_retries`` (retries of one record after its first attempt; then it is counted
            failed). Default: the field table's defaults.
        backoff_s: first retry delay; doubled per retry (with jitter), at most ``max_backoff_s``.
        linger_s: how long a record may wait for its batch to fill before it is sent anyway (``flush`` and
            ``shutdown`` send at once). The thread is woken only when a batch is full or this passes, so a
            steady stream of evaluations costs one wake-up per batch, not one per evaluation.
    """

    def __init__(
        self,
        sink: Sink,
        *,
        meter_provider: MeterProvider | None = None,
        options: Settings | None = None,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        linger_s: float = 0.2,
    ) -> None:
        if backoff_s <= 0 or max_backoff_s < backoff_s:
            raise ValueError("0 < backoff_s <= max_backoff_s is required")
        options = options if options is not None else Settings()
        self.sink = sink
        self.name = str(sink.name)
        self.queue_size = options.sink_queue_size
        self.batch_size = options.sink_batch_size
        self.max_retries = options.sink_max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.linger_s = max(0.0, linger_s)
        meter = (meter_provider or global_meter_provider()).get_meter(_SCOPE)
        self._sent = meter.create_counter(n.SINK_METRIC_SENT, unit="{evaluation}",
                                          description="Evaluations a sink delivered.")
        self._failed = meter.create_counter(n.SINK_METRIC_FAILED, unit="{evaluation}",
                                            description="Evaluations a sink gave up on, by reason.")
        self._dropped = meter.create_counter(n.SINK_METRIC_DROPPED, unit="{evaluation}",
                                             description="Evaluations never sent (queue full, shutdown), by reason.")
        self._reset()
        at_fork_method(self._reset)

    def _reset(self) -> None:
        """Fresh state: at construction and in a forked child (the parent's thread does not exist there)."""
        self._lock = threading.Lock()  # guards everything below
        self._wake = threading.Condition(self._lock)
        self._queue: deque[_Pending] = deque()
        self._retries: list[tuple[float, int, _Pending]] = []  # heap by due time
        self._order = itertools.count()
        self._inflight = 0
        self._urgent = 0  # flushes waiting: send partial batches at once
        self._closed = False
        self._thread: threading.Thread | None = None
        self._counts: Counter[str] = Counter()
        self._failing = False  # a failure was logged; the next success logs recovery
        self._paused_until = 0.0  # monotonic time before which nothing is sent (the destination is failing)
        self._outages = 0  # consecutive batches that failed as a whole

    # --- producer side (the evaluator thread) -------------------------------------------------------------------------
    def offer(self, record: EvaluationRecord) -> bool:
        """Queue one record; False (counted dropped) when the queue is full or the runner is shut down."""
        with self._lock:
            self._counts["offered"] += 1
            reason = "shutdown" if self._closed else "queue_full" if self._pending() >= self.queue_size else None
            if reason is None:
                self._queue.append(_Pending(record, time.monotonic()))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=f"cp-observe-sink-{self.name}",
                                                    daemon=True)
                    self._thread.start()
                if len(self._queue) == self.batch_size:
                    self._wake.notify_all()
                return True
        self._count_dropped(reason, 1)
        return False

    def _pending(self) -> int:
        return len(self._queue) + len(self._retries) + self._inflight

    # --- flush and shutdown -------------------------------------------------------------------------------------------
    def flush(self, timeout_s: float, *, retries: bool = True) -> bool:
        """Wait until every record offered so far is sent, failed or dropped; True if that happened in time.

        With ``retries=False`` (what ``ContextPrecisionProcessor.force_flush`` asks), wait only until every queued
        record has been tried once: records backing off, or queued while the destination is known to be down, are
        left to the sink's thread, so a host that flushes often never waits out a dead destination's backoffs.
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._lock:
            self._urgent += 1
            self._wake.notify_all()
            try:
                while self._busy(retries):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._wake.wait(min(left, 0.1))
            finally:
                self._urgent -= 1
        return True

    def _busy(self, retries: bool) -> bool:
        if retries:
            return self._pending() > 0
        paused = time.monotonic() < self._paused_until
        return self._inflight > 0 or (bool(self._queue) and not paused)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Stop taking records, send what is queued within ``timeout_s``, count the rest dropped (shutdown)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._wake.notify_all()
        self.flush(timeout_s)
        with self._lock:
            left = len(self._queue) + len(self._retries)
            self._queue.clear()
            self._retries.clear()
            self._wake.notify_all()
            thread = self._thread
        if left:
            self._count_dropped("shutdown", left)
        if thread is not None:
            thread.join(max(0.1, min(timeout_s, 5.0)))
        close = getattr(self.sink, "close", None)
        if callable(close):
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - closing a sink must not fail the host's shutdown
                logger.debug("closing a sink failed", sink=self.name, error_type=type(exc).__name__)

    def stats(self) -> dict[str, int]:
        """Counts: offered, sent, failed, dropped, and what is still pending."""
        with self._lock:
            return {key: self._counts[key] for key in ("offered", "sent", "failed", "dropped")} | {
                "pending": self._pending()
            }

    # --- the sink thread ----------------------------------------------------------------------------------------------
    def _run(self) -> None:
        otel_context.attach(otel_context.set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                deliveries = list(self.sink.send([p.record for p in batch]))
                if len(deliveries) != len(batch):
                    raise ValueError(f"sink {self.name} answered {len(deliveries)} deliveries for {len(batch)}")
            except Exception as exc:  # noqa: BLE001 - a failing sink is a counted outcome, never the host's problem
                logger.debug("sink send raised", sink=self.name, error_type=type(exc).__name__)
                deliveries = [Delivery.UNAVAILABLE] * len(batch)
            self._settle(batch, deliveries)

    def _next_batch(self) -> list[_Pending] | None:
        """Due retries first, then new records, up to ``batch_size``; None when closed and empty."""
        with self._lock:
            while True:
                now = time.monotonic()
                if now < self._paused_until and not self._closed:
                    # The destination failed a whole batch: nothing goes out until its backoff passes, then one
                    # batch probes it. A Phoenix that is down costs one attempt per backoff, not one per batch.
                    self._wake.wait(max(0.001, min(1.0, self._paused_until - now)))
                    continue
                batch: list[_Pending] = []
                # Retries due within one linger go together: jittered backoffs must not mean one request each.
                horizon = now + self.linger_s
                while self._retries and self._retries[0][0] <= horizon and len(batch) < self.batch_size:
                    batch.append(heapq.heappop(self._retries)[2])
                ripe = (self._urgent or self._closed or len(self._queue) >= self.batch_size
                        or (self._queue and now - self._queue[0].queued_at >= self.linger_s))
                while ripe and self._queue and len(batch) < self.batch_size:
                    batch.append(self._queue.popleft())
                if batch:
                    self._inflight += len(batch)
                    return batch
                if self._closed and not self._retries and not self._queue:
                    return None
                timeout = 1.0
                if self._retries:
                    timeout = min(timeout, self._retries[0][0] - now)
                if self._queue:
                    timeout = min(timeout, self._queue[0].queued_at + self.linger_s - now)
                self._wake.wait(max(0.001, timeout))

    def _settle(self, batch: list[_Pending], deliveries: list[Delivery]) -> None:
        sent = refused = exhausted = 0
        with self._lock:
            for pending, delivery in zip(batch, deliveries, strict=True):
                if delivery is Delivery.SENT:
                    sent += 1
                elif delivery is Delivery.REFUSED:
                    refused += 1
                elif pending.attempts >= self.max_retries or self._closed:
                    exhausted += 1
                else:
                    pending.attempts += 1
                    due = time.monotonic() + self._backoff(pending.attempts)
                    heapq.heappush(self._retries, (due, next(self._order), pending))
            self._inflight -= len(batch)
            if sent:
                self._outages, self._paused_until = 0, 0.0
            elif Delivery.UNAVAILABLE in deliveries and not self._closed:  # the destination is down: back off
                self._outages += 1
                self._paused_until = time.monotonic() + self._backoff(self._outages)
            self._counts["sent"] += sent
            self._counts["failed"] += refused + exhausted
            self._wake.notify_all()
            failing_before = self._failing
            if refused or exhausted or Delivery.UNAVAILABLE in deliveries:  # a RETRY alone (404: not there yet)
                self._failing = True                                        # is routine, not worth a warning
            elif sent:
                self._failing = False
            failing_now = self._failing
        labels = {n.SINK: self.name}
        if sent:
            self._sent.add(sent, labels)
        if refused:
            self._failed.add(refused, {**labels, n.REASON: "refused"})
        if exhausted:
            self._failed.add(exhausted, {**labels, n.REASON: "retries_exhausted"})
        if failing_now and not failing_before:
            logger.warning("evaluation sink failing; retrying with backoff, failures are counted",
                           sink=self.name, detail=getattr(self.sink, "last_error", None),
                           metric=n.SINK_METRIC_FAILED)
        elif failing_before and not failing_now:
            logger.info("evaluation sink recovered", sink=self.name)

    def _backoff(self, attempt: int) -> float:
        base = min(self.max_backoff_s, self.backoff_s * 2.0 ** (attempt - 1))
        return base * (0.5 + random.random() / 2)

    def _count_dropped(self, reason: str, count: int) -> None:
        with self._lock:
            self._counts["dropped"] += count
        self._dropped.add(count, {n.SINK: self.name, n.REASON: reason})


def recorded_documents(attributes: Mapping[str, object] | None) -> int:
    """How many ``retrieval.documents.{i}`` entries a span records, counted from 0 without a gap."""
    if not attributes:
        return 0
    count = 0
    while count < _MAX_DOCUMENTS:
        keys = _DOCUMENT_KEYS[count] if count < len(_DOCUMENT_KEYS) else _document_keys(count)
        if not any(key in attributes for key in keys):
            return count
        count += 1
    return count


def _document_keys(index: int) -> tuple[str, ...]:
    fields = ("content", *(f for f in n.DOCUMENT_FIELDS if f != "content"))
    return tuple(n.document_attribute(index, field) for field in fields)


#: The attribute keys of the first documents, built once (content first: with capture on it is always there).
_DOCUMENT_KEYS = tuple(_document_keys(i) for i in range(64))

