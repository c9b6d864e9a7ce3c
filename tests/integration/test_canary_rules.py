"""The canary rules: the shipped files are the generator's output, other labels regenerate cleanly, Python agrees."""

from __future__ import annotations

import importlib.util
import math
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from cp_observe._config._segments import segment_labels
from cp_observe._stats._canary_scan import baseline_gap_z, gap_z
from cp_observe.demo import _canary
from tests.deploy_support import CANARY_RULES_FILE, CANARY_SEGMENT, PROMETHEUS_DIR, PROMTOOL, run_promtool

GENERATOR = PROMETHEUS_DIR / "canary_rules.py"
SCENARIOS_FILE = PROMETHEUS_DIR / "tests" / "context_precision_canary.test.yml"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("canary_rules", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_file_is_the_generators_output() -> None:
    """rules/context_precision_canary.rules.yml is exactly what the generator prints for retriever.version."""
    printed = subprocess.run([sys.executable, str(GENERATOR), "--segment", CANARY_SEGMENT], capture_output=True,
                             text=True, check=True).stdout
    assert printed == CANARY_RULES_FILE.read_text(encoding="utf-8")


def test_the_shipped_scenarios_are_the_generators_output() -> None:
    """tests/context_precision_canary.test.yml is exactly what the generator prints with --tests."""
    printed = subprocess.run([sys.executable, str(GENERATOR), "--tests"], capture_output=True, text=True,
                             check=True).stdout
    assert printed == SCENARIOS_FILE.read_text(encoding="utf-8")


@pytest.mark.parametrize("attribute", ["retriever.version", "tenant.tier", "index-build", "flag/x"])
def test_the_generator_names_labels_as_the_library_does(attribute: str) -> None:
    """The generator's label name is the one the segments setting gives (so the rules read the emitted label)."""
    assert _generator().label_name(attribute) == segment_labels(attribute)[0][1]


def test_python_verdict_uses_the_rules_constants() -> None:
    """The demo's and the benchmark's arithmetic has the generator's windows, z, margin, floor and minimum."""
    generator = _generator()
    assert (_canary.WINDOWS, _canary.Z, _canary.MARGIN, _canary.GAP_SD, _canary.VAR_FLOOR, _canary.MIN_COUNT) == (
        generator.WINDOWS, generator.Z, generator.MARGIN, generator.GAP_SD, generator.VAR_FLOOR, generator.MIN_COUNT)


def test_the_family_threshold_is_the_drop_detections() -> None:
    """The canary's z is the drop detection's family threshold for the same windows and target, not a copy."""
    generator = _generator()
    assert generator.Z == generator._DETECTION.family_z(generator.FALSE_ALARMS_PER_MONTH, generator.WINDOWS)
    assert generator._DETECTION.expected_crossings(generator.Z) <= generator.FALSE_ALARMS_PER_MONTH


def test_the_shared_statistic_is_the_generators_arithmetic() -> None:
    """_stats/_canary_scan on random counters gives the generator's evaluate (the promtool expectations) exactly."""
    generator = _generator()
    rng = random.Random(7)
    sides = {}
    for key in (("retrieval", "v1"), ("retrieval", "v2"), ("retrieval", "none"), ("rerank", "v1")):
        rate, mean = rng.uniform(0.05, 6), rng.uniform(0.3, 0.9)
        sides[key] = generator._counters(1500, rate,
                                         lambda m, mean=mean: mean - (0.2 if m > 1400 else 0) * rng.random())
    for minute in (1290, 1400, 1450, 1495):
        evaluated = generator.evaluate(sides, minute, {"retrieval": 0.8})
        at = minute // generator.STEP_MIN
        for (stage, value), found in evaluated.items():
            best = None
            for w in generator.WINDOWS:
                back = at - w // generator.STEP_MIN
                part = [c[at] - c[back] for c in sides[(stage, value)]]
                total = [sum(sides[k][i][at] - sides[k][i][back] for k in sides if k[0] == stage) for i in range(3)]
                options = dict(margin=generator.MARGIN, var_floor=generator.VAR_FLOOR, min_count=generator.MIN_COUNT,
                               gap_sd=generator.GAP_SD)
                for gap in (gap_z(tuple(part), tuple(total), **options),
                            baseline_gap_z(tuple(part), 0.8, **options) if stage == "retrieval" else None):
                    if gap is not None and (best is None or gap.z > best[0]):
                        best = (gap.z, w, gap.against, gap.gap, gap.stderr, gap.reference)
            assert (found is None) == (best is None)
            if found is not None:
                assert found[1:3] == best[1:3] and all(math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
                                                       for a, b in zip(found[3:6], best[3:6]) if a == a)
                assert math.isclose(found[0], best[0], rel_tol=1e-12)


def test_python_verdict_on_the_edges() -> None:
    """Constant scores: a gap of 0.06 fires on enough evaluations, 0.03 never does (the gap SD absorbs it), thin
    windows are not judged."""
    v1 = _canary.Sums.of([0.8] * 6000)
    for worse, fires in ((0.74, True), (0.77, False)):
        v2 = _canary.Sums.of([worse] * 6000)
        assert _canary.verdict(v2, v1 + v2).fires is fires
    thin = _canary.Sums.of([0.0] * 19)
    assert _canary.verdict(thin, v1 + thin).best is None
    assert _canary.verdict(v1, v1, baseline=0.9).fires and not _canary.verdict(v1, v1, baseline=0.82).fires


def test_python_verdict_keeps_the_stages_apart() -> None:
    """The promtool scenario 'stages kept apart', in Python: per stage quiet; pooled, v2 would fire (wrongly)."""
    retrieval = {"v1": _canary.Sums.of([0.6] * 300), "v2": _canary.Sums.of([0.6] * 300)}
    rerank = {"v1": _canary.Sums.of([0.95] * 300), "v2": _canary.Sums.of([0.95] * 30)}
    for stage in (retrieval, rerank):
        assert not any(_canary.verdict(stage[v], stage["v1"] + stage["v2"]).fires for v in ("v1", "v2"))
    pooled = {v: retrieval[v] + rerank[v] for v in ("v1", "v2")}
    assert _canary.verdict(pooled["v2"], pooled["v1"] + pooled["v2"]).fires


def test_the_rules_group_by_stage() -> None:
    """Every aggregation of the canary rules keeps ``stage``, and every vector match is on it (no pooling)."""
    import re

    text = _generator().rules("tenant.tier", 0.7)
    groupings = re.findall(r"(?:sum|max) by \(([^)]*)\)", text)
    matches = re.findall(r"\bon \(([^)]*)\)", text)
    assert groupings and matches
    assert all("stage" in g.split(", ") for g in groupings + matches), (groupings, matches)


@pytest.mark.parametrize("baseline", [None, 0.7])
@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (scripts/install-system-deps.sh)")
def test_rules_for_another_label_pass_promtool(tmp_path: Path, baseline: float | None) -> None:
    """Rules regenerated for tenant.tier (with and without a constant baseline) pass promtool check rules."""
    text = _generator().rules("tenant.tier", baseline)
    assert "tenant_tier" in text and "retriever_version" not in text
    path = tmp_path / "canary.rules.yml"
    path.write_text(text, encoding="utf-8")
    proc = run_promtool("check", "rules", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (scripts/install-system-deps.sh)")
def test_a_constant_baseline_is_recorded_once_and_every_window_compares_with_it(tmp_path: Path) -> None:
    """--baseline 0.7 records the baseline MAP once per data source and stage (a second series of it, one per
    group, would make every gap against it a many-to-many match that Prometheus refuses). A value v2 scoring 0.5
    beside v1 scoring 0.7 is 0.2 below the baseline in a short window and in a long one (the long group's), and
    the long group's z against the rest and against the baseline are those of the same arithmetic: its statistics
    carry the label scan, which every operation mixing them with the window records matches past."""
    gen = _generator()
    text = gen.rules(CANARY_SEGMENT, 0.7)
    assert text.count(f"- record: {gen.BASELINE_SERIES}\n") == 1
    (tmp_path / "canary.rules.yml").write_text(text, encoding="utf-8")
    source = 'gen_ai_data_source_id="kb",stage="retrieval"'
    v2 = f'{source},retriever_version="v2"'
    stat = "gen_ai_data_source_id_stage_retriever_version_window:context_precision_score"
    series = "\n".join(
        f"      - series: '{name}{{{source},retriever_version=\"{value}\"}}'\n        values: '0+{step}x120'"
        for value, mean in (("v2", 0.5), ("v1", 0.7))
        for name, step in (("context_precision_score_count", 1), ("context_precision_score_sum", mean),
                           ("context_precision_score_squares_total", round(mean * mean, 2))))
    long = f',scan="{gen.LONG_SCAN}"'
    # gap 0.2; against the baseline SE = sqrt(floor 0.01 / 80 + 0.01^2) = 0.015, z 13.3; against the rest, the
    # stage's variance 0.37 - 0.6^2 = 0.01, SE = sqrt(0.01 (1/80 + 1/80) + 0.01^2) = 0.0187, z 10.7
    expected = [("gap", "baseline", "5m", "", 1000, 200), ("gap", "baseline", "80m", long, 1000, 200),
                ("gap_z", "baseline", "80m", long, 1, 13), ("gap_z", "rest", "80m", long, 1, 11)]
    checks = "\n".join(
        f"      - expr: round({scale} * {stat}:{name}{{{v2},against=\"{against}\",window=\"{w}\"}})\n"
        f"        eval_time: 100m\n        exp_samples:\n"
        f"          - labels: '{{against=\"{against}\",{v2}{scan},window=\"{w}\"}}'\n            value: {value}"
        for name, against, w, scan, scale, value in expected)
    (tmp_path / "canary.test.yml").write_text(
        "rule_files:\n  - canary.rules.yml\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n"
        f"{series}\n    promql_expr_test:\n{checks}\n", encoding="utf-8")
    proc = run_promtool("test", "rules", "canary.test.yml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_deploy_readme_states_the_canary_parameters() -> None:
    """deploy/README.md's alert table row for the canary alert gives the generator's windows, gap SD, z, minimum."""
    import re

    from tests.deploy_support import DEPLOY, load_yaml

    generator = _generator()
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `ContextPrecisionVariantRegression`"))
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip("|"))][2:]
    (alert,) = [r for g in load_yaml(CANARY_RULES_FILE)["groups"] for r in g["rules"] if "alert" in r]
    assert "for" not in alert
    assert cells == [f"{generator.WINDOWS[0]}m … {generator.WINDOWS[-1]}m", f"gap SD {generator.GAP_SD}",
                     f"z > {generator.Z}", str(generator.MIN_COUNT), "—", alert["labels"]["severity"]]
    assert "#runbook-contextprecisionvariantregression" in alert["annotations"]["runbook_url"]
    assert "### Runbook: ContextPrecisionVariantRegression" in readme


def test_the_dashboard_plots_the_canary_statistic_against_its_threshold() -> None:
    """The "Canary detection" panel plots the recorded largest z and each window's, with the alert's z as its line."""
    from tests.deploy_support import iter_panels, load_dashboard

    generator = _generator()
    (panel,) = [p for p in iter_panels(load_dashboard()["panels"]) if p["title"].startswith("Canary detection")]
    exprs = " ".join(t["expr"] for t in panel["targets"])
    p, _, _, top = generator._names(generator.label_name(CANARY_SEGMENT))
    assert top in exprs and f"{p}:gap_z" in exprs
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == generator.Z


def test_the_tuning_options_reach_the_rules() -> None:
    """--gap-sd, --margin, --z and --min-count change the expressions and the header, and are named in the
    regenerate line."""
    printed = subprocess.run([sys.executable, str(GENERATOR), "--gap-sd", "0.02", "--margin", "0.05", "--z", "5.5",
                              "--min-count", "50"], capture_output=True, text=True, check=True).stdout
    assert "--gap-sd 0.02 --margin 0.05 --z 5.5 --min-count 50" in printed.splitlines()[2]
    assert "- 0.05) / " in printed and ">= 50" in printed and ":gap_z_max > 5.5" in printed
    assert " + 0.0004)" in printed and " + 0.0001)" not in printed
    assert "- 0.0) / " not in printed and ">= 20" not in printed


def test_deploy_write_ships_a_generator_that_regenerates_the_shipped_files(tmp_path: Path) -> None:
    """From a `deploy write` copy (no checkout), the generator, beside detection_rules.py, prints the shipped files."""
    from cp_observe.deploy import write_assets

    write_assets(tmp_path)
    prometheus = tmp_path / "deploy" / "prometheus"
    for args, shipped in (([], prometheus / "rules" / "context_precision_canary.rules.yml"),
                          (["--tests"], prometheus / "tests" / "context_precision_canary.test.yml")):
        printed = subprocess.run([sys.executable, str(prometheus / "canary_rules.py"), *args], capture_output=True,
                                 text=True, check=True, cwd=tmp_path).stdout
        assert printed == shipped.read_text(encoding="utf-8") == (PROMETHEUS_DIR / shipped.relative_to(
            prometheus)).read_text(encoding="utf-8")
