"""Every metric and label the rules and the dashboard use is one cp-observe emits (names from cp_observe._names)."""

from __future__ import annotations

import re

import pytest

from cp_observe import _names as names
from tests.deploy_support import (
    BUDGET_RULES_FILE,
    CANARY_BASELINE_SERIES,
    CANARY_RULES_FILE,
    DETECTION_RULES_FILE,
    RULES_FILE,
    SYSTEM_SERIES,
    actual_series,
    dashboard_queries,
    documented_series,
    emitted_labels,
    emitted_series,
    library_instruments,
    load_dashboard,
    load_yaml,
    prometheus_label,
    prometheus_series,
    recorded_series,
    scan_promql,
    substitute_grafana,
)


def _rule_exprs() -> list[tuple[str, str]]:
    return [
        (rule.get("alert") or rule["record"], rule["expr"])
        for path in (RULES_FILE, CANARY_RULES_FILE, DETECTION_RULES_FILE, BUDGET_RULES_FILE)
        for group in load_yaml(path)["groups"]
        for rule in group["rules"]
    ]


_METRIC_NAMES = sorted(getattr(names, c) for c in dir(names) if c.startswith("METRIC_"))


def test_every_metric_constant_is_an_instrument_the_library_records() -> None:
    """The METRIC_* constants of cp_observe._names and the instruments the emitter records are the same set."""
    assert {i.name for i in library_instruments()} == set(_METRIC_NAMES)


@pytest.mark.parametrize("metric", _METRIC_NAMES)
def test_recorded_instrument_becomes_the_documented_series(metric: str) -> None:
    """Each instrument's name, kind and unit translate to the series its _names.py comment documents."""
    assert actual_series()[metric] == documented_series()[metric]


@pytest.mark.parametrize(
    ("otel", "kind", "unit", "series"),
    [
        ("context_precision.score", "histogram", "1", {"context_precision_score_bucket"}),
        ("context_precision.evaluations", "counter", "{evaluation}", {"context_precision_evaluations_total"}),
        ("context_precision.judge.duration", "histogram", "s", {"context_precision_judge_duration_seconds_sum"}),
        ("gen_ai.client.token.usage", "histogram", "{token}", {"gen_ai_client_token_usage_count"}),
        ("context_precision.queue.depth", "updowncounter", "{evaluation}", {"context_precision_queue_depth"}),
        ("context_precision.judge.cost", "counter", "USD", {"context_precision_judge_cost_USD_total"}),
        ("context_precision.judge.cost", "counter", "usd", {"context_precision_judge_cost_usd_total"}),
        ("requests.total", "counter", "1", {"requests_total"}),
    ],
)
def test_translation_rules(otel: str, kind: str, unit: str, series: set[str]) -> None:
    """The suffix rules: _total for counters, unit words, annotations and "1" add nothing, dots -> underscores."""
    assert series <= prometheus_series(otel, kind, unit)


def test_label_translation() -> None:
    """Attribute keys become label names with dots as underscores."""
    assert prometheus_label(names.GEN_AI_DATA_SOURCE_ID) == "gen_ai_data_source_id"
    assert prometheus_label(names.GEN_AI_REQUEST_MODEL) == "gen_ai_request_model"


def test_scanner_finds_metrics_and_labels() -> None:
    """The PromQL scanner separates metric names from functions, keywords, label names and strings."""
    metrics, labels = scan_promql(
        'histogram_quantile(0.95, sum by (le, gen_ai_request_model) (rate(a_bucket{outcome=~"x|y"}[5m] offset 1d)))'
        ' / on (job) group_left ignoring (instance) b:rec:rate5m{relevant="true,and"} > 1e3 and bool c'
    )
    assert metrics == {"a_bucket", "b:rec:rate5m", "c"}
    assert labels == {"le", "gen_ai_request_model", "outcome", "job", "instance", "relevant"}


def test_scanner_flags_an_unknown_metric() -> None:
    """A misspelled series in an expression is reported as not emitted."""
    metrics, _ = scan_promql("sum(rate(context_precision_scores_count[5m]))")
    assert metrics - emitted_series() == {"context_precision_scores_count"}


#: The labels the scan rules add: a window's length, a baseline day, what a canary value is compared against.
RULE_LABELS = frozenset({"window", "day", "against"})


def test_rule_expressions_use_emitted_metrics_and_labels() -> None:
    """Recording and alerting rules only read series the library emits or the shipped rules record."""
    allowed = emitted_series() | recorded_series() | {CANARY_BASELINE_SERIES}  # the one series users record
    for name, expr in _rule_exprs():
        metrics, labels = scan_promql(expr)
        assert metrics <= allowed, (name, metrics - allowed)
        assert labels <= emitted_labels() | RULE_LABELS, (name, labels - emitted_labels())


def test_dashboard_expressions_use_emitted_metrics_and_labels() -> None:
    """Every dashboard query reads library series, the shipped recording rules, or Prometheus' own series."""
    allowed = emitted_series() | recorded_series() | SYSTEM_SERIES
    queries = dashboard_queries(load_dashboard())
    assert len(queries) >= 15
    for where, expr in queries:
        metrics, labels = scan_promql(substitute_grafana(expr))
        assert metrics, where
        assert metrics <= allowed, (where, metrics - allowed)
        assert labels <= emitted_labels() | RULE_LABELS, (where, labels - emitted_labels())


def test_recording_rule_names_follow_level_metric_operation() -> None:
    """Recorded series are named level:metric:operations after a library series."""
    bases = {re.sub(r"_(bucket|sum|count|total)$", "", s) for s in emitted_series()}
    for record in recorded_series():
        level, metric, operation = record.split(":")
        assert level and operation, record
        assert any(metric.startswith(b) for b in bases), record


def test_every_library_series_is_on_the_dashboard_or_in_rules() -> None:
    """Nothing the library emits is forgotten by the dashboard and the rules."""
    used: set[str] = set()
    for _, expr in [*dashboard_queries(load_dashboard()), *_rule_exprs()]:
        used |= scan_promql(substitute_grafana(expr))[0]
    unused = {metric for metric, series in documented_series().items() if not series & used}
    assert not unused, unused
