"""``cp-observe calibrate --push``: agreement figures as gauges, exported through the library's OTLP readers.

One point per (data source, judge identity) with at least one label: ``context_precision.judge.agreement`` (the
share) and ``context_precision.judge.agreement.labels`` (how many labels it rests on), labelled like the score
histogram (data source, judge model, prompt version, kind). The alert compares the share with a floor only where
the count is large enough (``deploy/prometheus/rules``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExportResult

from cp_observe import _names as n

__all__ = ["push_agreement", "record_agreement"]

_SCOPE = "cp_observe.calibrate"


def record_agreement(meter_provider: Any, groups: Iterable[Any]) -> int:
    """Set the two gauges of every group with labels (``GroupFigures``, the all-sources rows left out); how many."""
    from cp_observe.calibrate._calibrate import ALL

    meter = meter_provider.get_meter(_SCOPE)
    share = meter.create_gauge(n.METRIC_JUDGE_AGREEMENT, unit="1",
                               description="Share of labelled contexts where the judge's verdict equals the person's.")
    count = meter.create_gauge(n.METRIC_JUDGE_AGREEMENT_LABELS, unit="{label}",
                               description="Labelled contexts the judge agreement is computed over.")
    pushed = 0
    for group in groups:
        if group.data_source == ALL or not group.agreement.n:
            continue
        labels = {n.GEN_AI_DATA_SOURCE_ID: group.data_source, n.CP_JUDGE_MODEL: group.judge.model,
                  n.CP_JUDGE_PROMPT_VERSION: group.judge.prompt_version, n.CP_JUDGE_KIND: group.judge.kind}
        value = group.agreement.agreement.value
        share.set(float(value if value is not None else 0.0), labels)
        count.set(group.agreement.n, labels)
        pushed += 1
    return pushed


def push_agreement(groups: Iterable[Any], *, otlp_endpoint: str | None, service_name: str | None = None) -> int:
    """Export the gauges once over OTLP (``otlp_endpoint``, else the ``OTEL_EXPORTER_OTLP_*`` variables).

    Raises:
        ConfigurationError: no endpoint is set.
        OSError: the endpoint did not take them (the message says so; the exporter logged why).
    """
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource

    from cp_observe._config._settings import Settings
    from cp_observe._errors import ConfigurationError
    from cp_observe._wiring._providers import build_metric_exporter

    settings = Settings.resolve({"otlp_endpoint": otlp_endpoint, "service_name": service_name})
    exporter = build_metric_exporter(settings)
    if exporter is None:
        raise ConfigurationError("--push needs --otlp-endpoint URL (or OTEL_EXPORTER_OTLP_ENDPOINT)")
    # One collection, exported once by hand: its result says whether the gauges arrived.
    reader = InMemoryMetricReader()
    resource = Resource.create({"service.name": settings.service_name or "cp-observe-calibrate"})
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    try:
        pushed = record_agreement(provider, groups)
        result = exporter.export(reader.get_metrics_data()) if pushed else MetricExportResult.SUCCESS
    finally:
        provider.shutdown()
        exporter.shutdown()
    if result is not MetricExportResult.SUCCESS:
        raise OSError("the OTLP endpoint did not take the agreement gauges")
    return pushed
