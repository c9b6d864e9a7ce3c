"""The guard on the rule groups themselves: it reads Prometheus's and Mimir's names and has a runbook entry."""

from __future__ import annotations

import re

from tests.deploy_support import (
    DEPLOY,
    GUARD_ALERT_NAMES,
    GUARD_RULE_GROUPS,
    GUARD_RULES_FILE,
    alert_rules,
    load_yaml,
)


def test_the_guard_watches_the_cp_observe_groups_under_both_metric_names() -> None:
    """Half the interval and missed iterations, each under Prometheus's and the cortex_ (Mimir ruler) name."""
    assert tuple(g["name"] for g in load_yaml(GUARD_RULES_FILE)["groups"]) == GUARD_RULE_GROUPS
    rules = alert_rules(GUARD_RULES_FILE)
    assert tuple(rules) == GUARD_ALERT_NAMES
    expr = rules["ContextPrecisionRuleGroupSlow"]["expr"]
    for prefix in ("", "cortex_"):
        assert f"{prefix}prometheus_rule_group_last_duration_seconds{{" in expr
        assert f"> 0.5 * {prefix}prometheus_rule_group_interval_seconds{{" in expr
        assert f"increase({prefix}prometheus_rule_group_iterations_missed_total{{" in expr
    assert set(re.findall(r'rule_group=~"([^"]+)"', expr)) == {".*;context_precision.*"}


def test_the_guard_has_a_runbook_and_the_compose_prometheus_scrapes_itself() -> None:
    """The runbook anchor exists and says what to check first; the shipped Prometheus scrapes its own metrics."""
    url = alert_rules(GUARD_RULES_FILE)["ContextPrecisionRuleGroupSlow"]["annotations"]["runbook_url"]
    assert url == "deploy/README.md#runbook-contextprecisionrulegroupslow"
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Runbook: ContextPrecisionRuleGroupSlow\n", 1)[1].split("\n#", 1)[0]
    assert "Check first" in section and "concurrent-rule-eval" in section
    jobs = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")["scrape_configs"]
    assert any(t == "localhost:9090" for j in jobs for c in j["static_configs"] for t in c["targets"])


def test_every_shipped_prometheus_keeps_nine_days() -> None:
    """The baseline reads 7 days back plus the longest window: the compose Prometheus keeps at least 9 days."""
    compose = load_yaml(DEPLOY / "docker-compose.yml")
    flags = [a for a in compose["services"]["prometheus"]["command"] if "retention.time" in a]
    assert flags == ["--storage.tsdb.retention.time=9d"]
