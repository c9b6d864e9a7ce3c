"""A Prometheus metric reader that keeps the SDK's exemplars on histogram buckets (OpenMetrics exposition).

``opentelemetry-exporter-prometheus`` drops exemplars when it turns OpenTelemetry histograms into
``prometheus_client`` families. This reader lets the exporter translate as usual, then puts back, on each
``_bucket`` sample, the last exemplar the SDK saw in that bucket: ``trace_id`` and ``span_id`` of the span the
measurement was made in (for ``context_precision.score``, the evaluation span, so its trace is the evaluated
one). ``prometheus_client`` writes exemplars only in the OpenMetrics format, which it serves when the scraper
asks for it (Prometheus does when started with ``--enable-feature=exemplar-storage``).

The SDK empties its exemplar reservoirs at each collection, so the reader remembers the last exemplar per
bucket (bounded by ``max_exemplars``; new buckets beyond it are counted in ``dropped`` and go without one).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics.export import Histogram, MetricsData
from prometheus_client.samples import Exemplar

from cp_observe import _names as n
from cp_observe._log import logger

__all__ = ["ExemplarPrometheusReader"]

_Key = tuple[str, frozenset[tuple[str, str]], str]  # (family name, series labels, le)


class ExemplarPrometheusReader(PrometheusMetricReader):
    """``PrometheusMetricReader`` whose histogram buckets carry trace exemplars."""

    def __init__(self, *args: Any, max_exemplars: int = 10_000, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()  # guards _exemplars and dropped (a scrape may race another)
        self._exemplars: dict[_Key, Exemplar] = {}
        self._max = max_exemplars
        self.dropped = 0
        collector: Any = getattr(self, "_collector", None)  # the exporter's private collector: checked, not assumed
        translate = getattr(collector, "collect", None)
        if translate is None:
            logger.warning("this opentelemetry-exporter-prometheus has no collector to wrap; serving no exemplars")
            return

        def collect() -> Iterator[Any]:
            families = list(translate())  # runs the SDK collection, which calls _receive_metrics first
            try:
                with self._lock:
                    families = [self._with_exemplars(family) for family in families]
            except Exception as exc:  # noqa: BLE001 - exemplars are a nicety: serve the metrics without them
                logger.warning("exemplars left out of a scrape", error_type=type(exc).__name__)
            yield from families

        collector.collect = collect

    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> None:
        if metrics_data is not None:
            try:
                with self._lock:
                    self._remember(metrics_data)
            except Exception as exc:  # noqa: BLE001 - never let exemplars cost the metrics themselves
                logger.warning("exemplars not recorded", error_type=type(exc).__name__)
        super()._receive_metrics(metrics_data, timeout_millis, **kwargs)

    def _remember(self, metrics_data: MetricsData) -> None:
        from opentelemetry.exporter.prometheus._mapping import sanitize_attribute, sanitize_full_name

        prefix = getattr(self, "_prefix", "")
        for resource_metrics in metrics_data.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if not isinstance(metric.data, Histogram):
                        continue
                    name = sanitize_full_name(f"{prefix}_{metric.name}" if prefix else metric.name)
                    for point in metric.data.data_points:
                        labels = _series(
                            (sanitize_attribute(k), v if isinstance(v, str) else str(v))
                            for k, v in (point.attributes or {}).items()
                        )
                        for exemplar in point.exemplars:
                            if exemplar.trace_id:
                                le = _bucket(exemplar.value, point.explicit_bounds)
                                self._put((name, labels, le), _to_prometheus(exemplar))

    def _put(self, key: _Key, exemplar: Exemplar) -> None:
        if key not in self._exemplars and len(self._exemplars) >= self._max:
            self.dropped += 1
            return
        self._exemplars[key] = exemplar

    def _with_exemplars(self, family: Any) -> Any:
        if family.type != "histogram" or not self._exemplars:
            return family
        bucket = f"{family.name}_bucket"
        samples = []
        for sample in family.samples:
            exemplar = None
            if sample.name == bucket and sample.exemplar is None:
                key = (family.name, _series((k, v) for k, v in sample.labels.items() if k != "le"),
                       sample.labels.get("le", ""))
                exemplar = self._exemplars.get(key)
            samples.append(sample if exemplar is None else sample._replace(exemplar=exemplar))
        family.samples = samples
        return family


def _series(items: Iterable[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    """A series' identifying labels: without the scope labels and the exporter's empty back-fills."""
    return frozenset((k, v) for k, v in items if v and not k.startswith("otel_scope_"))


def _bucket(value: float, bounds: Iterable[float]) -> str:
    """The ``le`` label of the bucket holding ``value``, spelled as the exporter spells it."""
    return next((f"{bound}" for bound in bounds if value <= bound), "+Inf")


def _to_prometheus(exemplar: Any) -> Exemplar:
    """An SDK exemplar as prometheus_client's: trace and span id in hex, time in seconds."""
    labels = {n.EXEMPLAR_TRACE_ID: f"{exemplar.trace_id:032x}", n.EXEMPLAR_SPAN_ID: f"{exemplar.span_id:016x}"}
    return Exemplar(labels, exemplar.value, exemplar.time_unix_nano / 1e9)
