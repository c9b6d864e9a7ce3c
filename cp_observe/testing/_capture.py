"""``EvaluationCapture``: score the decorated code of a test in memory and hand back the evaluations.

It wires what ``configure()`` would, with in-memory parts only: a tracer provider the decorators write to, a
``ContextPrecisionProcessor`` scoring every trace with the given judge, and a sink that keeps each finished
evaluation as an ``EvaluationRecord``. Nothing leaves the process; ``close()`` puts the previous set-up back.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from cp_observe._emission._sinks import Delivery, EvaluationRecord

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from cp_observe._processing._processor import ContextPrecisionProcessor
    from cp_observe._types import Judge

__all__ = ["EvaluationCapture"]


class _KeepSink:
    """A sink that keeps every record it is sent, in memory."""

    name = "memory"

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards records: the sink thread appends, the test reads
        self.records: list[EvaluationRecord] = []

    def send(self, records: Sequence[EvaluationRecord]) -> Sequence[Delivery]:
        with self.lock:
            self.records.extend(records)
        return [Delivery.SENT] * len(records)


class EvaluationCapture:
    """Evaluations of the decorated calls made while it is open, judged by ``judge``, kept in memory.

    Args:
        judge: any ``Judge``; the pytest fixture passes a ``FakeJudge``.
        **options: ``ContextPrecisionProcessor`` options (``threshold``, ``capture_content``, ...); the
            sample rate defaults to 1.0 so every call is scored.
    """

    def __init__(self, judge: Judge, **options: Any) -> None:
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from cp_observe._processing._processor import ContextPrecisionProcessor
        from cp_observe.testing._isolation import IsolatedRuntime

        self._sink = _KeepSink()
        self._spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self._spans))
        self.metrics = InMemoryMetricReader()
        options.setdefault("sample_rate", 1.0)
        self.processor: ContextPrecisionProcessor = ContextPrecisionProcessor(
            judge, tracer_provider=self.tracer_provider, meter_provider=MeterProvider(metric_readers=[self.metrics]),
            logger_provider=LoggerProvider(), sinks=[self._sink], **options,
        )
        self.tracer_provider.add_span_processor(self.processor)
        self._runtime = IsolatedRuntime(tracer_provider=self.tracer_provider).open()
        self._closed = False

    def evaluations(self, timeout_s: float = 10.0) -> list[EvaluationRecord]:
        """Judge what is queued, then return every evaluation so far, oldest first."""
        self.processor.force_flush(int(timeout_s * 1000))
        with self._sink.lock:
            return list(self._sink.records)

    def spans(self) -> list[ReadableSpan]:
        """Every finished span: the decorated calls' and the ``evaluation context_precision`` spans."""
        return list(self._spans.get_finished_spans())

    def close(self) -> None:
        """Stop the processor and give the decorators back the set-up they had before."""
        if self._closed:
            return
        self._closed = True
        self.processor.shutdown()
        self._runtime.close()

    def __enter__(self) -> EvaluationCapture:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
