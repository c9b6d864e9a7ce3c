"""The alert rules keep their documented names, shape and parameters, and the dashboard agrees with them."""

from __future__ import annotations

import re
from typing import Any

import pytest

from cp_observe import _names as names
from tests.deploy_support import (
    ALERT_NAMES,
    BUDGET_ALERT_NAMES,
    CANARY_ALERT_NAMES,
    DEPLOY,
    DETECTION_ALERT_NAMES,
    GUARD_ALERT_NAMES,
    RULE_GROUPS,
    RULE_TESTS_DIR,
    RULES_FILE,
    alert_rules,
    iter_panels,
    load_dashboard,
    load_yaml,
    prometheus_label,
    range_windows,
    scan_promql,
)

DATA_SOURCE_LABEL = prometheus_label(names.GEN_AI_DATA_SOURCE_ID)


_RECORDED_WINDOW = re.compile(rf"{DATA_SOURCE_LABEL}:context_precision_score\w*:[a-z]+(\d+[smhd])\b")


def _parameters(rule: dict[str, Any]) -> dict[str, str]:
    """Window, threshold, confidence, minimum, for and severity, read from the rule itself.

    The window is the range of the raw series, or for the MAP alerts the current window of the recorded series
    they read (``...:mean30m`` -> ``30m``); the confidence is the z factor on the standard error.
    """
    expr = rule["expr"]
    windows = set(range_windows(expr)) or set(_RECORDED_WINDOW.findall(expr))
    assert len(windows) == 1, (rule["alert"], windows)
    comparisons = re.findall(r"(?<![a-z_:])([<>])\s*(\d+(?:\.\d+)?)", expr)
    minimum = re.search(r">=\s*(\d+)", expr)
    z = re.search(r"(\d+\.\d+) \*", expr)
    assert comparisons, rule["alert"]
    return {
        "window": windows.pop(),
        "threshold": comparisons[0][1],
        "confidence": f"z = {z.group(1)}" if z else "—",
        "minimum": minimum.group(1) if minimum else "—",
        "for": rule["for"],
        "severity": rule["labels"]["severity"],
    }


def _readme_table() -> dict[str, dict[str, str]]:
    rows = {}
    for line in (DEPLOY / "README.md").read_text(encoding="utf-8").splitlines():
        if m := re.match(r"\|\s*`(ContextPrecision\w+)`\s*\|(.*)\|\s*$", line):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", m.group(2))]
            keys = ("condition", "window", "threshold", "confidence", "minimum", "for", "severity")
            rows[m.group(1)] = dict(zip(keys, cells, strict=True))
    return rows


def _recording(record: str) -> str:
    groups = {g["name"]: g for g in load_yaml(RULES_FILE)["groups"]}
    return next(r["expr"] for r in groups["context_precision.recording"]["rules"] if r["record"] == record)


def _flat(expr: str) -> str:
    return " ".join(expr.split())


def test_rule_groups_and_alert_names_are_stable() -> None:
    """Group and alert names are the documented interface."""
    groups = load_yaml(RULES_FILE)["groups"]
    assert tuple(g["name"] for g in groups) == RULE_GROUPS
    assert tuple(alert_rules()) == ALERT_NAMES


@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_alert_is_per_data_source_with_severity_and_text(alert: str) -> None:
    """Every alert aggregates by data source only, carries a severity, a summary, a description and a runbook."""
    rule = alert_rules()[alert]
    groupings = set(re.findall(r"\bby\s*\(([^)]*)\)", rule["expr"]))
    recorded = set(re.findall(r"\b[a-z_]+:[a-z_]+:[a-z0-9_]+\b", rule["expr"]))
    assert groupings | {r.split(":")[0] for r in recorded} == {DATA_SOURCE_LABEL}, (groupings, recorded)
    assert rule["labels"] == {"severity": rule["labels"]["severity"]}
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    assert {"summary", "description", "runbook_url"} <= set(rule["annotations"])
    assert rule.get("for")


@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_runbook_url_points_to_a_readme_section(alert: str) -> None:
    """Each alert's runbook_url is a deploy/README.md anchor whose heading exists and says what to check first."""
    url = alert_rules()[alert]["annotations"]["runbook_url"]
    path, anchor = url.split("#")
    assert path == "deploy/README.md"
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-"): h
                for h in re.findall(r"^#{2,4} (.+)$", readme, re.M)}  # fmt: skip
    assert anchor in headings, (anchor, sorted(headings))
    section = readme.split(f"{headings[anchor]}\n", 1)[1].split("\n#", 1)[0]
    assert "Check first" in section, anchor


@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_readme_documents_each_alert_parameter(alert: str) -> None:
    """deploy/README.md's alert table states the window, threshold, confidence, minimum, for and severity."""
    documented = _readme_table()[alert]
    actual = _parameters(alert_rules()[alert])
    assert {k: documented[k] for k in actual} == actual


def test_readme_documents_groups_and_map_drop_expression_verbatim() -> None:
    """The rule groups are named and the MAP-drop expression is quoted exactly in deploy/README.md."""
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    for group in RULE_GROUPS:
        assert f"`{group}`" in readme
    expr = alert_rules()["ContextPrecisionMAPDrop"]["expr"].strip()
    assert f"```promql\n{expr}\n```" in readme


def test_map_drop_expression_shape() -> None:
    """MAPDrop = the window's upper confidence bound (mean + z SE) below 0.5, guarded by >= 20 evaluations.

    Where the cheap-plus-LLM cascade's series exist, the bound is the PPI++ MAP's and the minimum is
    of LLM-judged evaluations.
    """
    rule = alert_rules()["ContextPrecisionMAPDrop"]
    w = _parameters(rule)["window"]
    p = f"{DATA_SOURCE_LABEL}:context_precision_score"
    c = f"{DATA_SOURCE_LABEL}:context_precision_cascade_sums"
    assert _flat(rule["expr"]) == (
        f"( {p}:mean{w} + 2.33 * {p}:stderr{w} < 0.5 and {p}_count:increase{w} >= 20"
        f" unless on ({DATA_SOURCE_LABEL}) {c}_count:increase{w} )"
        f" or ( {p}_ppi:mean{w} + 2.33 * {p}_ppi:stderr{w} < 0.5 and {c}_n:increase{w} >= 20 )"
    )


def test_window_statistics_come_from_the_histogram_and_the_squares_counter() -> None:
    """mean = sum/count; SE = sqrt((squares/count - mean^2) / (n - 1)), else its [0, 1] bound sqrt(m(1-m)/(n-1))."""
    by = f"sum by ({DATA_SOURCE_LABEL})"
    p = f"{DATA_SOURCE_LABEL}:context_precision_score"
    for w, off in (("30m", ""),):
        suffix = w + off.replace(" offset ", "_offset")
        assert _flat(_recording(f"{p}_count:increase{suffix}")) == (
            f"{by} (increase(context_precision_score_count[{w}]{off}))")
        assert _flat(_recording(f"{p}:mean{suffix}")) == (
            f"{by} (rate(context_precision_score_sum[{w}]{off}))"
            f" / {by} (rate(context_precision_score_count[{w}]{off}))")
        assert _flat(_recording(f"{p}:stderr{suffix}")) == (
            f"sqrt( clamp_min( {by} (rate(context_precision_score_squares_total[{w}]{off}))"
            f" / {by} (rate(context_precision_score_count[{w}]{off})) - {p}:mean{suffix} ^ 2, 0 )"
            f" / clamp_min({p}_count:increase{suffix} - 1, 1) )"
            f" or sqrt( {p}:mean{suffix} * (1 - {p}:mean{suffix}) / clamp_min({p}_count:increase{suffix} - 1, 1) )")


def test_low_volume_uses_the_map_alerts_minimum() -> None:
    """ContextPrecisionLowVolume fires exactly where the MAP alerts' minimum keeps them quiet."""
    low = _parameters(alert_rules()["ContextPrecisionLowVolume"])
    drop = _parameters(alert_rules()["ContextPrecisionMAPDrop"])
    assert (low["window"], low["threshold"]) == (drop["window"], drop["minimum"])


def test_outcome_alerts_use_the_library_outcomes() -> None:
    """The judge-failing and dropped alerts select outcomes the library counts."""
    failing = alert_rules()["ContextPrecisionJudgeFailing"]["expr"]
    dropped = alert_rules()["ContextPrecisionEvaluationsDropped"]["expr"]
    assert f'outcome="{names.OUTCOME_FAILED}"' in failing
    assert f'outcome=~"{names.OUTCOME_SCORED}|{names.OUTCOME_FAILED}"' in failing
    assert f'outcome="{names.OUTCOME_DROPPED}"' in dropped
    for expr in (failing, dropped):
        for value in re.findall(r'outcome=~?"([^"]*)"', expr):
            assert set(value.split("|")) <= set(names.OUTCOMES)


@pytest.mark.parametrize("alert", ["ContextPrecisionMAPDrop", "ContextPrecisionLowVolume"])
def test_map_alert_annotations_use_labels_only(alert: str) -> None:
    """MAP alert annotations are predictable from labels alone, so promtool scenarios can state them exactly."""
    for text in alert_rules()[alert]["annotations"].values():
        assert "$value" not in text
        assert set(re.findall(r"\{\{\s*\$labels\.(\w+)\s*\}\}", text)) <= {DATA_SOURCE_LABEL}


def test_recording_rules_aggregate_by_data_source() -> None:
    """Recorded MAP and outcome series keep the data source label (the dashboard filters by it)."""
    groups = {g["name"]: g for g in load_yaml(RULES_FILE)["groups"]}
    for rule in groups["context_precision.recording"]["rules"]:
        if rule["record"].startswith(f"{DATA_SOURCE_LABEL}:") or rule["record"].startswith(f"{DATA_SOURCE_LABEL}_"):
            assert DATA_SOURCE_LABEL in scan_promql(rule["expr"])[1], rule["record"]


def test_shipped_scenarios_cover_every_alert_firing_and_quiet() -> None:
    """deploy/prometheus/tests has, for every alert, a case where it fires and one where it stays quiet."""
    fires: set[str] = set()
    quiet: set[str] = set()
    names_seen: set[str] = set()
    for path in RULE_TESTS_DIR.glob("*.test.yml"):
        for case in load_yaml(path)["tests"]:
            names_seen.add(case.get("name", ""))
            for check in case.get("alert_rule_test", []):
                (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    assert fires == quiet == (set(ALERT_NAMES) | set(CANARY_ALERT_NAMES) | set(DETECTION_ALERT_NAMES)
                              | set(BUDGET_ALERT_NAMES) | set(GUARD_ALERT_NAMES))
    for scenario in ("healthy retriever", "MAP falls", "uncertain MAP", "too few evaluations", "low volume",
                     "judge failing", "evaluations dropped"):  # fmt: skip
        assert scenario in names_seen


def _map_panel() -> dict[str, Any]:
    return next(p for p in iter_panels(load_dashboard()["panels"]) if p["title"] == "Sampled MAP per data source")


def test_dashboard_threshold_line_is_the_alert_threshold() -> None:
    """The threshold drawn on the MAP panel equals ContextPrecisionMAPDrop's threshold."""
    panel = _map_panel()
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    threshold = float(_parameters(alert_rules()["ContextPrecisionMAPDrop"])["threshold"])
    assert [s["value"] for s in steps] == [None, threshold]
    assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off"


def test_dashboard_plots_the_alert_window() -> None:
    """The MAP panel plots the mean over the alert's own window, next to the 5m recorded mean."""
    window = _parameters(alert_rules()["ContextPrecisionMAPDrop"])["window"]
    exprs = [t["expr"] for t in _map_panel()["targets"]]
    assert any(range_windows(e) == [window, window] for e in exprs)
    assert any("context_precision_score:mean_rate5m" in e for e in exprs)


def test_dashboard_uid_matches_alert_links() -> None:
    """Alert annotations link to the dashboard by its uid and data source variable."""
    dashboard = load_dashboard()
    description = alert_rules()["ContextPrecisionMAPDrop"]["annotations"]["description"]
    assert f"/d/{dashboard['uid']}/" in description
    assert "var-data_source=" in description
    assert "data_source" in [v["name"] for v in dashboard["templating"]["list"]]


def test_dashboard_filters_by_the_data_source_variable() -> None:
    """Every query on a data-source-labelled series honours the $data_source template variable."""
    for panel in iter_panels(load_dashboard()["panels"]):
        for target in panel.get("targets", []):
            if "expr" not in target:  # a Jaeger search, not PromQL
                continue
            metrics, _ = scan_promql(target["expr"])
            if any(m.startswith(("context_precision_score", "context_precision_evaluations",
                                  "context_precision_verdicts", "context_precision_sampled",
                                  f"{DATA_SOURCE_LABEL}")) for m in metrics):  # fmt: skip
                assert f'{DATA_SOURCE_LABEL}=~"$data_source"' in target["expr"], (panel["title"], target["expr"])


def test_dashboard_explains_how_to_find_the_worst_traces() -> None:
    """A text panel gives the Jaeger tag and the Tempo TraceQL query built from the library's names."""
    text = next(p for p in iter_panels(load_dashboard()["panels"]) if p["type"] == "text")["options"]["content"]
    label, fail = names.GEN_AI_EVALUATION_SCORE_LABEL, names.LABEL_FAIL
    assert f"`{label}={fail}`" in text
    assert f'{{ span.{label} = "{fail}" }}' in text
    assert "%7B%22gen_ai.evaluation.score.label%22%3A%22fail%22%7D" in text


def test_dashboard_has_the_required_panels() -> None:
    """The dashboard shows MAP, distribution, outcomes, verdict ratio, latency, tokens, cost and queue depth."""
    panels = {p["title"]: p for p in iter_panels(load_dashboard()["panels"])}
    required = {
        "Sampled MAP per data source": "timeseries",
        "Score distribution over time": "heatmap",
        "Score distribution over the dashboard range": "bargauge",
        "Evaluations by outcome": "timeseries",
        "Relevant-verdict ratio": "timeseries",
        "Judge latency p50 / p95": "timeseries",
        "Judge tokens per second": "timeseries",
        "Judge cost (USD per hour)": "timeseries",
        "Evaluation queue depth": "timeseries",
        "Worst traces": "text",
    }
    assert {t: panels[t]["type"] for t in required} == required
    latency = " ".join(t["expr"] for t in panels["Judge latency p50 / p95"]["targets"])
    assert "histogram_quantile(0.5," in latency and "histogram_quantile(0.95," in latency
    ids = [p["id"] for p in iter_panels(load_dashboard()["panels"])]
    assert len(ids) == len(set(ids))


def test_dashboard_shows_the_map_band_and_the_evaluations_behind_it() -> None:
    """One panel draws the 30m MAP with mean +/- z SE from the recording rules and the count behind it."""
    panel = next(p for p in iter_panels(load_dashboard()["panels"]) if "99% band" in p["title"])
    exprs = " ".join(t["expr"] for t in panel["targets"])
    p = f"{DATA_SOURCE_LABEL}:context_precision_score"
    assert f"{p}:mean30m" in exprs and f"+ 2.33 * {p}:stderr30m" in exprs and f"- 2.33 * {p}:stderr30m" in exprs
    assert f"{p}_count:increase30m" in exprs
    assert _parameters(alert_rules()["ContextPrecisionMAPDrop"])["confidence"] == "z = 2.33"


def test_dashboard_exemplars_link_to_traces() -> None:
    """A score-bucket query asks for exemplars, and Grafana maps their trace_id to the trace data source."""
    targets = [t for p in iter_panels(load_dashboard()["panels"]) for t in p.get("targets", [])]
    assert any(t.get("exemplar") and "context_precision_score_bucket" in t["expr"] for t in targets)
    sources = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "datasources.yaml")["datasources"]
    (prometheus,) = [s for s in sources if s["type"] == "prometheus"]
    assert prometheus["jsonData"]["exemplarTraceIdDestinations"] == [{"name": "trace_id", "datasourceUid": "jaeger"}]


def test_dashboard_lists_the_worst_retrievals_from_jaeger() -> None:
    """The worst-retrievals panel is a Jaeger search for failing evaluation spans of the selected service."""
    panel = next(p for p in iter_panels(load_dashboard()["panels"]) if p["title"].startswith("Worst retrievals"))
    (target,) = panel["targets"]
    assert target["datasource"]["type"] == "jaeger" and target["queryType"] == "search"
    assert target["tags"] == f"{names.GEN_AI_EVALUATION_SCORE_LABEL}={names.LABEL_FAIL}"
    assert target["operation"] == names.EVALUATION_SPAN_NAME and target["service"] == "$service"


def test_dashboard_annotates_judge_identity_changes() -> None:
    """An annotation marks every new (model, prompt version, kind) of the judge; a panel splits MAP by it."""
    judge = {prometheus_label(a) for a in (names.CP_JUDGE_MODEL, names.CP_JUDGE_PROMPT_VERSION, names.CP_JUDGE_KIND)}
    (annotation,) = [a for a in load_dashboard()["annotations"]["list"] if a["name"] == "Judge identity changes"]
    groupings = re.findall(r"\bby\s*\(([^)]*)\)", annotation["expr"])
    assert len(groupings) == 2 and all({g.strip() for g in x.split(",")} == judge for x in groupings)
    assert " unless " in " ".join(annotation["expr"].split()) and "offset" in annotation["expr"]
    panel = next(p for p in iter_panels(load_dashboard()["panels"]) if p["title"].startswith("Sampled MAP by judge"))
    assert all(label in panel["targets"][0]["expr"] for label in judge)
