"""promtool checks the shipped Prometheus config, rules, rule unit tests and every dashboard query."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy_support import (
    PROMETHEUS_DIR,
    RULE_TESTS_DIR,
    RULES_FILE,
    alert_rules,
    dashboard_queries,
    load_dashboard,
    load_yaml,
    needs_promtool,
    run_promtool,
    substitute_grafana,
)

pytestmark = needs_promtool


def _output(proc: object) -> str:
    return f"{proc.stdout}\n{proc.stderr}"  # type: ignore[attr-defined]


def test_check_config() -> None:
    """promtool check config accepts deploy/prometheus/prometheus.yml and the rule files it loads."""
    proc = run_promtool("check", "config", "prometheus.yml", cwd=PROMETHEUS_DIR)
    assert proc.returncode == 0, _output(proc)
    # the shipped rules, the canary rules, drop detection, the judge budget and the rule groups' guard
    assert "5 rule files found" in _output(proc)


def test_check_rules() -> None:
    """promtool check rules parses every shipped recording and alerting rule."""
    proc = run_promtool("check", "rules", str(RULES_FILE))
    assert proc.returncode == 0, _output(proc)
    shipped = sum(len(g["rules"]) for g in load_yaml(RULES_FILE)["groups"])
    assert f"SUCCESS: {shipped} rules found" in _output(proc)


def _scenario_files() -> list[Path]:
    return sorted(RULE_TESTS_DIR.glob("*.test.yml"))


def test_scenario_files_exist() -> None:
    """The shipped promtool scenarios are present (an empty glob would let the next test pass vacuously)."""
    assert {"context_precision.test.yml", "context_precision_canary.test.yml",
            "context_precision_detection.test.yml"} <= {p.name for p in _scenario_files()}


@pytest.mark.parametrize("scenario", _scenario_files(), ids=lambda p: p.name)
def test_rule_unit_tests_pass(scenario: Path) -> None:
    """promtool test rules passes for every scenario file in deploy/prometheus/tests (shipped or added later)."""
    proc = run_promtool("test", "rules", scenario.name, cwd=RULE_TESTS_DIR)
    assert proc.returncode == 0, _output(proc)
    assert "SUCCESS" in _output(proc)


def _write_dashboard_rules(path: Path, exprs: list[str]) -> None:
    rules = [{"record": f"dashboard:query_{i}:check", "expr": expr} for i, expr in enumerate(exprs)]
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """Every dashboard PromQL query, with template variables substituted, is a rule promtool accepts."""
    queries = [substitute_grafana(expr) for _, expr in dashboard_queries(load_dashboard())]
    rules_file = tmp_path / "dashboard.rules.yml"
    _write_dashboard_rules(rules_file, queries)
    proc = run_promtool("check", "rules", str(rules_file))
    assert proc.returncode == 0, _output(proc)
    assert f"SUCCESS: {len(queries)} rules found" in _output(proc)


def test_dashboard_check_rejects_a_broken_query(tmp_path: Path) -> None:
    """The same harness fails on a query promtool cannot parse, so the check above can fail."""
    rules_file = tmp_path / "broken.rules.yml"
    _write_dashboard_rules(rules_file, ["sum by (le (rate(context_precision_score_bucket[5m]))"])
    proc = run_promtool("check", "rules", str(rules_file))
    assert proc.returncode != 0


def render_label_template(template: str, labels: dict[str, str]) -> str:
    """Render an annotation template that may only use ``{{ $labels.name }}``."""
    text = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels[m.group(1)], template)
    assert "{{" not in text, f"template uses more than labels: {template!r}"
    return text


def _unseen_scenario(tag: str, per_min: float, healthy: float, bad: float, fires: bool) -> dict[str, Any]:
    """A MAP-drop scenario at a 30s scrape interval: healthy for 2h, then `bad` for 2h (every score equal)."""
    source = f"kb-{tag}"
    selector = f'{{gen_ai_data_source_id="{source}",gen_ai_evaluation_name="context_precision",job="svc"}}'
    step = per_min / 2  # evaluations per 30s sample
    expected: list[dict[str, Any]] = []
    if fires:
        rule = alert_rules()["ContextPrecisionMAPDrop"]
        labels = {**rule["labels"], "gen_ai_data_source_id": source}
        annotations = {k: render_label_template(v, labels) for k, v in rule["annotations"].items()}
        expected = [{"exp_labels": labels, "exp_annotations": annotations}]
    return {
        "rule_files": [str(RULES_FILE)],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": [
                    {
                        "series": f"context_precision_score_sum{selector}",
                        "values": f"0+{step * healthy:g}x240 {step * healthy * 240 + step * bad:g}+{step * bad:g}x239",
                    },
                    {
                        "series": f"context_precision_score_squares_total{selector}",
                        "values": f"0+{step * healthy**2:g}x240 {step * healthy**2 * 240 + step * bad**2:g}"
                                  f"+{step * bad**2:g}x239",
                    },
                    {"series": f"context_precision_score_count{selector}", "values": f"0+{step:g}x480"},
                ],
                "alert_rule_test": [
                    {"eval_time": "119m", "alertname": "ContextPrecisionMAPDrop", "exp_alerts": []},
                    {"eval_time": "240m", "alertname": "ContextPrecisionMAPDrop", "exp_alerts": expected},
                ],
            }
        ],
    }


@pytest.mark.parametrize(
    "case",
    [
        ("healthy", 4, 0.9, 0.85, False),
        ("falls", 4, 0.9, 0.1, True),
        ("quiet", 0.5, 0.9, 0.1, False),  # 15 evaluations per 30m window < 20
    ],
    ids=lambda case: case[0],
)
def test_an_unseen_scenario_file_runs(tmp_path: Path, case: tuple[str, float, float, float, bool]) -> None:
    """A scenario file written elsewhere, in the same format and by the documented names, runs against the rules."""
    tag, per_min, healthy, bad, fires = case
    scenario = tmp_path / f"unseen-{tag}.test.yml"
    scenario.write_text(yaml.safe_dump(_unseen_scenario(tag, per_min, healthy, bad, fires)), encoding="utf-8")
    proc = run_promtool("test", "rules", str(scenario))
    assert proc.returncode == 0, _output(proc)

    # The opposite expectation fails: the scenario really exercises the alert.
    wrong = tmp_path / f"wrong-{tag}.test.yml"
    wrong.write_text(yaml.safe_dump(_unseen_scenario(tag, per_min, healthy, bad, not fires)), encoding="utf-8")
    assert run_promtool("test", "rules", str(wrong)).returncode != 0
