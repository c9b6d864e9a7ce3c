"""The drop-detection rules: the shipped files are the generator's, the family threshold, the shape, the docs."""

from __future__ import annotations

import importlib.util
import math
import random
import re
import subprocess
import sys
from types import ModuleType

import pytest

from cp_observe._stats._sequential import drop_z
from tests.deploy_support import (
    DEPLOY,
    DETECTION_ALERT_NAMES,
    DETECTION_GENERATOR,
    DETECTION_RULE_GROUPS,
    DETECTION_RULES_FILE,
    DETECTION_TESTS_FILE,
    alert_rules,
    load_yaml,
)


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    """deploy/prometheus/detection_rules.py imported as a module (a standalone script)."""
    spec = importlib.util.spec_from_file_location("detection_rules", DETECTION_GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _printed(*args: str) -> str:
    return subprocess.run([sys.executable, str(DETECTION_GENERATOR), *args], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def test_the_shipped_rules_are_the_generators_output() -> None:
    """rules/context_precision_detection.rules.yml is exactly what the generator prints with its defaults."""
    assert _printed() == DETECTION_RULES_FILE.read_text(encoding="utf-8")


def test_the_shipped_scenarios_are_the_generators_output() -> None:
    """tests/context_precision_detection.test.yml is exactly what the generator prints with --tests."""
    assert _printed("--tests") == DETECTION_TESTS_FILE.read_text(encoding="utf-8")


def test_the_threshold_holds_the_whole_family_to_its_target(gen: ModuleType) -> None:
    """Z is the smallest z (to 0.1) whose expected crossings a month, summed over the windows, meet the target."""
    assert gen.expected_crossings(gen.Z) <= gen.FALSE_ALARMS_PER_MONTH < gen.expected_crossings(gen.Z - 0.1)
    assert gen.family_z(windows=(5,)) < gen.Z  # one window alone needs less: the family pays for its size


def test_groups_alert_and_windows(gen: ModuleType) -> None:
    """Two groups, one alert; every window doubles the last, from 5m to about a day, each with a 7-day baseline."""
    groups = load_yaml(DETECTION_RULES_FILE)["groups"]
    assert tuple(g["name"] for g in groups) == DETECTION_RULE_GROUPS
    assert tuple(alert_rules(DETECTION_RULES_FILE)) == DETECTION_ALERT_NAMES
    assert all(b == 2 * a for a, b in zip(gen.WINDOWS, gen.WINDOWS[1:], strict=False))
    assert gen.WINDOWS[0] == 5 and 16 * 60 <= gen.WINDOWS[-1] <= 24 * 60
    rules = groups[0]["rules"]
    for part in ("count", "sum", "squares"):
        current = [r for r in rules if r["record"].endswith(f"_{part}:window")]
        baseline = [r for r in rules if r["record"].endswith(f"_{part}:baseline")]
        assert [r["labels"]["window"] for r in current] == [f"{w}m" for w in gen.WINDOWS]
        assert [r["labels"]["window"] for r in baseline] == [f"{w}m" for w in gen.WINDOWS]
        for rule in baseline:
            offsets = re.findall(r"\[(\d+m)\] offset (\d+)d", rule["expr"])
            assert offsets == [(rule["labels"]["window"], str(d)) for d in range(1, gen.BASELINE_DAYS + 1)]


def test_the_rules_read_only_what_every_replica_exports() -> None:
    """Raw series are the score histogram's count and sum and the squares counter, summed by data source."""
    text = DETECTION_RULES_FILE.read_text(encoding="utf-8")
    raw = set(re.findall(r"increase\((\w+)\[", text))
    assert raw == {"context_precision_score_count", "context_precision_score_sum",
                   "context_precision_score_squares_total"}
    assert set(re.findall(r"\bby \(([^)]*)\)", text)) == {"gen_ai_data_source_id"}


def test_the_alert_states_window_drop_interval_baseline_and_counts(gen: ModuleType) -> None:
    """The description names the window that fired, the drop with its interval, the baseline and the counts."""
    rule = alert_rules(DETECTION_RULES_FILE)["ContextPrecisionMAPRegression"]
    assert " ".join(rule["expr"].split()) == f"gen_ai_data_source_id:context_precision_score:drop_z_max > {gen.Z}"
    description = rule["annotations"]["description"]
    for needle in (".Labels.window", ":drop{", ":drop_stderr{", ":baseline_mean{", "_count:window{",
                   "_count:baseline{", "exemplars", "Jaeger"):
        assert needle in description, needle
    assert rule["annotations"]["runbook_url"] == "deploy/README.md#runbook-contextprecisionmapregression"


def test_the_generators_arithmetic_is_the_shared_one(gen: ModuleType) -> None:
    """The scenarios' expectations (evaluate) and cp_observe._stats's drop_z compute the same z."""
    rng = random.Random(5)
    for _ in range(200):
        n, big_n = rng.uniform(1, 500), rng.uniform(1, 5000)
        s, big_s = n * rng.random(), big_n * rng.random()
        big_q = big_s * rng.uniform(big_s / big_n, 1)
        z = drop_z(n, s, big_n, big_s, big_q, margin=gen.MARGIN, var_floor=gen.VAR_FLOOR, min_count=gen.MIN_COUNT)
        if n < gen.MIN_COUNT or big_n < gen.MIN_COUNT:
            assert z is None
            continue
        base = big_s / big_n
        se = math.sqrt(max(big_q / big_n - base**2, gen.VAR_FLOOR) * (1 / n + 1 / big_n))
        assert z == pytest.approx((base - s / n - gen.MARGIN) / se, rel=1e-12)


def test_readme_and_how_to_state_the_parameters(gen: ModuleType) -> None:
    """deploy/README.md and the alerts how-to give the windows, the baseline, the margin, z and the minimum."""
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    how_to = (DEPLOY.parent / "docs" / "how-to" / "alerts-and-runbooks.md").read_text(encoding="utf-8")
    for text in (readme, how_to):
        assert "detection_rules.py" in text
        assert f"margin {gen.MARGIN}" in text and f"z > {gen.Z}" in text
        assert f"{gen.MIN_COUNT} scored evaluations" in text and "1280m" in text


def test_dashboard_draws_the_statistic_against_the_alerts_threshold(gen: ModuleType) -> None:
    """The "Drop detection" panel plots the recorded largest z and each window's, with the alert's z as its line."""
    from tests.deploy_support import iter_panels, load_dashboard

    (panel,) = [p for p in iter_panels(load_dashboard()["panels"]) if p["title"].startswith("Drop detection")]
    exprs = " ".join(t["expr"] for t in panel["targets"])
    assert "gen_ai_data_source_id:context_precision_score:drop_z_max" in exprs
    assert "gen_ai_data_source_id_window:context_precision_score:drop_z" in exprs
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, gen.Z]
    assert f"z > {gen.Z}" in panel["description"] and f"margin {gen.MARGIN}" in panel["description"]
