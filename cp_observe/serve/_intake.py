"""Durable intake: ``serve`` owes what it accepted; accepted sampled targets stay on disk until their outcome counts.

The path of one request (``DurableIntake.offer``):

1. Spans already stored, or whose outcome was already counted (a tombstone), are left out: a sender retrying
   a request that a crash left unanswered does not get its targets judged twice (idempotent by trace and
   span id).
2. ``Admission`` decides for the request as a whole and reserves its room (under its lock); then, outside the
   lock so concurrent requests share one fsync, the spans the processor will take (``Admission.takes``) are
   claimed in the store (refused past ``durable_max_bytes`` or ``durable_max_age_s``: 429, counted as
   ``store_full`` / ``store_age``) and committed in a group commit (a failure or ``COMMIT_WAIT_S``: 429,
   ``store_error``). Only then are the spans fed to ``on_end``, and the request answered 200.
3. A target leaves the store when its outcome is counted: on the evaluator thread (the processor's internal
   ``_watch_finished`` hook) for a skipped or dropped one; for a scored or failed one, whose evaluation span is
   the outcome a receiver sees, once its export returned (``AcknowledgingExporter``): the span is written to
   the outbox before the export and removed with its target after it.

At start (``recover``), before the doors open: evaluation spans left in the outbox are exported again (same
span ids) and their targets removed; every other stored span is fed to the processor in end-time order,
targets counted as ``recovered``; a target older than ``durable_max_age_s`` is counted dropped (``expired``).

What remains: a crash between an evaluation's export and the commit of its removal exports that evaluation
again at the next start, with the same span id (``redelivered``). Log records and metrics of an evaluation are
not in the outbox: a crash before their export loses them, and a target judged again after a crash before
its outbox commit emits them again (its first evaluation span never left the process).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import SpanFlags
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from cp_observe import _names as n
from cp_observe._log import logger
from cp_observe._processing._processor import ContextPrecisionProcessor, takes_as_target
from cp_observe._processing._record import Record
from cp_observe._traces._convert import spans_from_request
from cp_observe._types import ScoreResult
from cp_observe.serve._admission import Admission, Offer
from cp_observe.serve._durable import DurableStore, Key, Row

__all__ = ["AcknowledgingExporter", "DurableIntake"]

_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK | SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_RECOVERY_WAIT_S = 0.1


def _key_of(span: ReadableSpan) -> Key | None:
    context = span.context
    return (context.trace_id, context.span_id) if context is not None else None


class AcknowledgingExporter(SpanExporter):
    """Wraps the scorer's span exporter: evaluation spans go to the outbox before the export.

    Their targets leave the store after it, whatever its result: the exporter has done its retries by then.
    """

    def __init__(self, inner: SpanExporter, store: DurableStore) -> None:
        self.inner = inner
        self.store = store

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Outbox, export, acknowledge."""
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        keys: list[Key] = []
        entries: list[tuple[Key, bytes]] = []
        for span in spans:
            parent = span.parent
            if span.name == n.EVALUATION_SPAN_NAME and parent is not None:
                key = (parent.trace_id, parent.span_id)
                keys.append(key)
                entries.append((key, encode_spans([span]).SerializeToString()))
        if entries and not self.store.outbox(entries):
            logger.warning("durable store: evaluation spans exported without an outbox entry", spans=len(entries))
        result = self.inner.export(spans)
        if keys:
            self.store.remove(keys)
        return result

    def shutdown(self) -> None:
        """Shut the wrapped exporter down."""
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Flush the wrapped exporter."""
        return bool(self.inner.force_flush(timeout_millis))


@dataclass(eq=False, repr=False)
class DurableIntake:
    """Feeds the processor through the store: accepted sampled spans are committed before the 200."""

    store: DurableStore
    processor: ContextPrecisionProcessor
    admission: Admission
    exporter: AcknowledgingExporter | None
    recovered_counter: Any

    def __post_init__(self) -> None:
        #: Set by ``stop`` once the drain timed out: targets dropped at shutdown then stay for the next start.
        self.handover = False
        self._progress = threading.Event()  # set whenever a target finishes (recovery waits for room on it)
        self.recovered = self.expired = self.redelivered = 0
        self.processor._watch_finished(self._finished)

    # --- requests ----------------------------------------------------------------------------------------------
    def offer(self, request: ExportTraceServiceRequest, spans: Sequence[ReadableSpan]) -> Offer:
        """Admit the spans of one request durably, or refuse it whole."""
        known = self.store.known
        fresh = [span for span in spans if (key := _key_of(span)) is not None and not known(key)]
        return self.admission.offer(fresh, persist=functools.partial(self._persist, request))

    def _persist(self, request: ExportTraceServiceRequest,
                 spans: Sequence[ReadableSpan]) -> tuple[str, Sequence[ReadableSpan]]:
        takes = self.admission.takes
        kept = [span for span in spans if takes(span)]
        if not kept:
            return "", spans
        rows = _rows(request, kept)
        reason, claimed = self.store.claim(rows)
        if reason:
            return reason, ()
        if not self.store.write(claimed):
            return "store_error", ()
        if len(claimed) == len(rows):
            return "", spans
        # A concurrent request carried some of the same spans and claimed them first: it feeds them.
        mine = {row.key for row in claimed}
        skipped = {row.key for row in rows} - mine
        return "", [span for span in spans if _key_of(span) not in skipped]

    # --- the evaluator thread ----------------------------------------------------------------------------------
    def _finished(self, record: Record, outcome: str, result: ScoreResult | None) -> None:
        if not record.target:
            return
        self._progress.set()
        if self.exporter is not None and outcome in (n.OUTCOME_SCORED, n.OUTCOME_FAILED):
            return  # its evaluation span's export removes it (AcknowledgingExporter)
        if self.handover and outcome == f"{n.OUTCOME_DROPPED}:shutdown":
            return  # not judged before the drain timeout: the next start resumes it
        self.store.remove([(record.span_context.trace_id, record.span_context.span_id)])

    # --- start-up ----------------------------------------------------------------------------------------------
    def recover(self) -> None:
        """Resume what a previous process left, before the doors open (see the module docstring)."""
        store = self.store
        done: set[Key] = set()
        if store.recovered_outbox and self.exporter is not None:
            spans = [spans_from_request(ExportTraceServiceRequest.FromString(body)).spans
                     for _, body in store.recovered_outbox]
            self.exporter.inner.export([span for group in spans for span in group])
            done = {key for key, _ in store.recovered_outbox}
            store.remove(done)
            self.redelivered = len(done)
        rows = [row for row in store.recovered_rows if row.key not in done]
        live_traces = {row.key[0] for row in rows if row.target}
        now = time.time()
        for row in rows:
            if not row.target and row.key[0] not in live_traces:
                continue  # an answer or root whose targets are all counted: the sweep removes it
            converted = spans_from_request(ExportTraceServiceRequest.FromString(row.body)).spans
            if not converted:
                continue
            span = converted[0]
            self.admission.mark_forced([span])
            if row.target and now - row.added > store.max_age_s:
                self.processor._drop_unjudged(span, "expired")
                self.expired += 1
                continue
            if row.target:
                self._wait_for_room()
                self.recovered += 1
            self.processor.on_end(span)
        store.recovered_rows, store.recovered_outbox = [], []
        if self.recovered:
            self.recovered_counter.add(self.recovered)
        if self.recovered or self.expired or self.redelivered:
            logger.info("durable store: resumed what the previous process left", recovered=self.recovered,
                        expired=self.expired, redelivered=self.redelivered)

    def _wait_for_room(self) -> None:
        """Block until the processor can take one more target without refusing it (admission's own bound)."""
        while self.admission.occupancy() + 1 >= self.admission.queue_size:
            self._progress.wait(_RECOVERY_WAIT_S)
            self._progress.clear()

    def stats(self) -> dict[str, Any]:
        """The store's figures and what the start resumed."""
        return {**self.store.stats(), "recovered": self.recovered, "expired": self.expired,
                "redelivered": self.redelivered}


def _rows(request: ExportTraceServiceRequest, spans: Sequence[ReadableSpan]) -> list[Row]:
    """Each span as a one-span OTLP request of its own resource and scope, with its parent's remoteness."""
    wanted = {key: span for span in spans if (key := _key_of(span)) is not None}
    targets = {key: takes_as_target(span) for key, span in wanted.items()}
    out: list[Row] = []
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for pb in scope_spans.spans:
                key = (int.from_bytes(pb.trace_id, "big"), int.from_bytes(pb.span_id, "big"))
                span = wanted.pop(key, None)
                if span is None:
                    continue
                one = ExportTraceServiceRequest()
                holder = one.resource_spans.add()
                holder.resource.CopyFrom(resource_spans.resource)
                holder.schema_url = resource_spans.schema_url
                scope = holder.scope_spans.add()
                scope.scope.CopyFrom(scope_spans.scope)
                scope.schema_url = scope_spans.schema_url
                copy = scope.spans.add()
                copy.CopyFrom(pb)
                copy.flags &= ~_REMOTE
                if span.parent is not None:  # what _convert decided, so recovery decides the same
                    copy.flags |= SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
                    if span.parent.is_remote:
                        copy.flags |= SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
                out.append(Row(key, targets[key], span.end_time or 0, one.SerializeToString()))
    return out
