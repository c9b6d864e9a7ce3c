"""The drop-detection rules: the shipped files are the generator's, the family threshold, the shape, the docs."""

from __future__ import annotations

import importlib.util
import random
import re
import subprocess
import sys
from collections.abc import Sequence
from types import ModuleType

import pytest
import yaml

from cp_observe._stats._sequential import drop_z
from tests.deploy_support import (
    DEPLOY,
    DETECTION_ALERT_NAMES,
    DETECTION_GENERATOR,
    DETECTION_RULE_GROUPS,
    DETECTION_RULES_FILE,
    DETECTION_TESTS_FILE,
    PROMTOOL,
    alert_rules,
    load_yaml,
    run_promtool,
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


def _group(name: str, text: str | None = None) -> dict:
    """The detection rule group ``name`` (its last part) of the shipped file, or of ``text``."""
    groups = yaml.safe_load(text)["groups"] if text is not None else load_yaml(DETECTION_RULES_FILE)["groups"]
    (group,) = [g for g in groups if g["name"] == f"context_precision.detection.{name}"]
    return group


def test_groups_alert_and_windows(gen: ModuleType) -> None:
    """Three groups, one alert; every window doubles the last, from 5m to about a day, every window's records in the
    recording group (every minute: a long window evaluated less often misses its brief excursions past the
    threshold); one 7-day baseline rule per counter reads the window records at offsets 1d..7d, in the baseline
    group."""
    groups = load_yaml(DETECTION_RULES_FILE)["groups"]
    assert tuple(g["name"] for g in groups) == DETECTION_RULE_GROUPS
    assert tuple(alert_rules(DETECTION_RULES_FILE)) == DETECTION_ALERT_NAMES
    assert all(b == 2 * a for a, b in zip(gen.WINDOWS, gen.WINDOWS[1:], strict=False))
    assert gen.WINDOWS[0] == 5 and 16 * 60 <= gen.WINDOWS[-1] <= 24 * 60
    assert _group("recording")["interval"] == gen.INTERVAL == "1m"
    rules, pools = _group("recording")["rules"], _group("baseline")["rules"]
    for record in [f"{gen.PREFIX}_{part}" for part in ("count", "sum", "squares")] + [gen.CASCADE_TERMS]:
        current = [r for r in rules if r["record"] == f"{record}:window"]
        assert [r["labels"]["window"] for r in current] == [f"{w}m" for w in gen.WINDOWS]
        assert not [r for r in rules if r["record"] == f"{record}:baseline"]
        (baseline,) = [r for r in pools if r["record"] == f"{record}:baseline"]
        offsets = re.findall(rf"label_replace\({re.escape(record)}:window offset (\w+),", baseline["expr"])
        assert offsets == [gen.day_offset(d) for d in range(1, gen.BASELINE_DAYS + 1)]
        assert "increase" not in baseline["expr"] and "window)" in baseline["expr"]


def test_the_baseline_group_reads_no_window_now_and_is_read_as_it_last_wrote(gen: ModuleType) -> None:
    """The baseline group reads the window records only days back (so no evaluation of it depends on another
    group's at the same instant), at the time of day half its interval ahead of its evaluation (the middle of the
    minutes that read it), writes only what the pool alone decides, and runs at a divisor of a day; every other
    group reads its records through last_over_time over a little more than its interval (it runs less often than
    Prometheus's 5-minute lookback), and none of them a record it writes."""
    pools = _group("baseline")
    assert pools["interval"] == gen.BASELINE_INTERVAL == f"{gen.BASELINE_EVERY_MIN}m"
    assert gen.DAY_MIN % gen.BASELINE_EVERY_MIN == 0 and gen.BASELINE_LEAD_MIN == gen.BASELINE_EVERY_MIN // 2
    assert gen.day_offset(1) == "23h56m" and gen.day_offset(7) == "6d23h56m" and gen.day_offset(1, 3) == "23h59m"
    written = {r["record"] for r in pools["rules"]}
    for rule in pools["rules"]:
        for name, offset in re.findall(r"([\w:]+:window)\b(?:\{[^}]*\})?( offset \w+)?", rule["expr"]):
            assert offset.strip() in {f"offset {gen.day_offset(d)}" for d in range(1, gen.BASELINE_DAYS + 1)}, \
                (name, rule["expr"])
    assert all(r["record"].endswith(("baseline", "baseline_mean", "baseline_var", "baseline_cov", "lambda",
                                     "residual_var", "pool_mean", "weekly_gap", "weekly_gap_var", "weekly_shift",
                                     "weekly_shift_var")) for r in pools["rules"])
    others = [r for g in load_yaml(DETECTION_RULES_FILE)["groups"] if g["name"] != pools["name"] for r in g["rules"]]
    assert not written & {r.get("record") for r in others}
    reads = 0
    for rule in others:
        text = rule["expr"] + " ".join((rule.get("annotations") or {}).values())
        for name in written:
            for found in re.finditer(rf"(?<![\w:]){re.escape(name)}(?![\w:])(\{{[^}}]*\}})?(\[\w+\])?", text):
                assert found[2] == f"[{gen.BASELINE_HOLD}]" and text[:found.start()].endswith("last_over_time("), \
                    (name, rule.get("record", rule.get("alert")))
                reads += 1
    assert reads >= 15
    # The weekly shift is the pool's (it reads the longest window record a week back) and so is the shifted mean.
    assert {f"{gen.WEEKLY}:weekly_shift", f"{gen.WEEKLY}:weekly_shift_var", f"{gen.PREFIX}_plain:baseline_mean",
            f"{gen.PREFIX}_plain:pool_mean"} <= written
    # With --llm-offset the baseline's cheap-only parts come from a pool of its own, taken that much before each
    # day's: an offset on the group's own record would read the pool the group wrote an interval before.
    late_pools = _group("baseline", gen.rules(llm_offset=3))
    assert late_pools["name"] == "context_precision.detection.baseline"
    for rule in late_pools["rules"]:
        assert not re.search(r":baseline(_early)?(\{[^}]*\})? offset", rule["expr"]), rule["expr"]
        for name, offset in re.findall(r"([\w:]+:window)\b(?:\{[^}]*\})?( offset \w+)?", rule["expr"]):
            assert offset, (name, rule["expr"])
    (early,) = [r for r in late_pools["rules"] if r["record"].endswith(":baseline_early")]
    assert re.findall(r"offset (\w+),", early["expr"]) == [gen.day_offset(d, 3)
                                                           for d in range(1, gen.BASELINE_DAYS + 1)]


def test_only_the_shortest_window_reads_raw_counters_the_others_add_two_recorded_halves(gen: ModuleType) -> None:
    """The 5m window is the raw counters' increase; each longer window is the half-length record now plus the same
    record offset by half a window (the halves tile the window: each raw minute counted once), defined before use."""
    rules = _group("recording")["rules"]
    for record in [f"{gen.PREFIX}_{part}" for part in ("count", "sum", "squares")] + [gen.CASCADE_TERMS]:
        current = [r for r in rules if r["record"] == f"{record}:window"]
        assert re.fullmatch(r"sum by \([^)]*\) \(increase\(\w+\[5m\]\)\)", current[0]["expr"])
        for half, rule in zip(gen.WINDOWS, current[1:], strict=False):
            sel = f'{record}:window{{window="{half}m"}}'
            assert rule["expr"] == f"{sel} + {sel} offset {half}m"
    assert len(re.findall(r"increase\(", DETECTION_RULES_FILE.read_text(encoding="utf-8"))) == 4


def test_the_rules_read_only_what_every_replica_exports() -> None:
    """Raw series are the score histogram's count and sum, the squares counter and the cascade's PPI sums, summed
    by data source (the PPI sums by term too, which the next rules select)."""
    text = DETECTION_RULES_FILE.read_text(encoding="utf-8")
    raw = set(re.findall(r"increase\((\w+)\[", text))
    assert raw == {"context_precision_score_count", "context_precision_score_sum",
                   "context_precision_score_squares_total", "context_precision_cascade_sums_total"}
    assert set(re.findall(r"\bby \(([^)]*)\)", text)) == {
        "gen_ai_data_source_id", "gen_ai_data_source_id, term", "gen_ai_data_source_id, window",
        "gen_ai_data_source_id, term, window"}


def test_the_ppi_terms_are_the_ones_the_library_exports(gen: ModuleType) -> None:
    """The generator's PPI terms are cp_observe's TERM_* values, in PpiSums' field order."""
    import dataclasses

    from cp_observe import _names
    from cp_observe._judging._ppi import PpiSums

    exported = {v for k, v in vars(_names).items() if k.startswith("TERM_")}
    assert set(gen.PPI_TERMS) == exported
    assert _names.METRIC_CASCADE_SUMS.replace(".", "_") + "_total" == gen.CASCADE_METRIC
    assert len(dataclasses.fields(PpiSums)) == len(gen.PPI_TERMS)


def test_each_window_is_judged_on_the_ppi_figures_or_else_only_without_the_cascade(gen: ModuleType) -> None:
    """Per data source and window, z is the PPI++ one where it judges, else the score series' where the window holds
    no cascade evaluation; every figure the alert states follows the same choice, queried when it is sent."""
    on = "on (gen_ai_data_source_id, window)"
    chosen = {r["record"].rsplit(":", 1)[1]: " ".join(r["expr"].split()) for r in _group("recording")["rules"]
              if r["record"].startswith("gen_ai_data_source_id_window:context_precision_score:")}
    plain_ok = (f"(gen_ai_data_source_id_window:context_precision_score_plain:drop_z unless {on}"
                " gen_ai_data_source_id_window:context_precision_cascade_sums_count:window > 0)")
    assert chosen == {"drop_z": f"gen_ai_data_source_id_window:context_precision_score_ppi:drop_z or {plain_ok}"}
    description = alert_rules(DETECTION_RULES_FILE)["ContextPrecisionMAPRegression"]["annotations"]["description"]
    figures = re.findall(r'with query \(printf "(.*?)" \$labels', description)
    assert len(figures) == 6  # the window's z, then drop, its interval, the baseline mean and both counts
    for figure in figures[1:]:
        assert f"and {on} gen_ai_data_source_id_window:context_precision_score_ppi:drop_z) or {on} " in figure
        assert figure.endswith(f"and {on} topk(1, gen_ai_data_source_id_window:context_precision_score:drop_z"
                               '{gen_ai_data_source_id=\\"%s\\"})')


def test_the_alert_states_window_drop_interval_baseline_and_counts(gen: ModuleType) -> None:
    """The description names the window that fired, the drop with its interval, the baseline and the counts."""
    rule = alert_rules(DETECTION_RULES_FILE)["ContextPrecisionMAPRegression"]
    assert " ".join(rule["expr"].split()) == f"gen_ai_data_source_id:context_precision_score:drop_z_max > {gen.Z}"
    description = rule["annotations"]["description"]
    for needle in (".Labels.window", "_ppi:drop{", "_plain:drop_stderr{", "_plain:baseline_mean{",
                   "cascade_sums_n:window{", "score_count:baseline{", "exemplars", "Jaeger"):
        assert needle in description, needle
    assert rule["annotations"]["runbook_url"] == "deploy/README.md#runbook-contextprecisionmapregression"


def _one_window(gen: ModuleType, window: Sequence[float], pooled: Sequence[float]) -> list[list[float]]:
    """Cumulative series whose last step's one-step window holds ``window`` and whose 7 baseline days ``pooled``."""
    day = gen.DAY_MIN // gen.STEP_MIN
    at = 8 * day + 1
    out = []
    for now, base in zip(window, pooled, strict=True):
        series = [0.0] * (at + 1)
        for d in range(1, 8):  # each baseline day holds a seventh of the pooled sums
            series[at - d * day] = base / 7
        series[at] = now
        out.append(series)
    return out


def test_the_generators_arithmetic_is_the_shared_one(gen: ModuleType) -> None:
    """The scenarios' expectations (_plain_z) and cp_observe._stats's drop_z compute the same z."""
    rng = random.Random(5)
    at = 8 * gen.DAY_MIN // gen.STEP_MIN + 1
    for _ in range(200):
        n, big_n = rng.uniform(1, 500), rng.uniform(1, 5000)
        s, big_s = n * rng.random(), big_n * rng.random()
        big_q = big_s * rng.uniform(big_s / big_n, 1)
        series = _one_window(gen, (n, s, 0.0), (big_n, big_s, big_q))
        shift, shift_var = gen.weekly_shift(series, at)
        z = drop_z(n, s, big_n, big_s, big_q, margin=gen.MARGIN, var_floor=gen.VAR_FLOOR, min_count=gen.MIN_COUNT,
                   level_sd=gen.LEVEL_SD, shift=shift, shift_var=shift_var)
        found = gen._plain_z(series, at, 1)
        if z is None:
            assert found is None
            continue
        assert found is not None and found[0] == pytest.approx(z, rel=1e-12)


def test_the_generators_ppi_arithmetic_is_the_shared_one(gen: ModuleType) -> None:
    """The scenarios' PPI++ expectations (_ppi_z) and cp_observe._judging._ppi's ppi_drop_z compute the same z."""
    from cp_observe._judging._ppi import PpiSums, ppi_drop_z

    rng = random.Random(8)
    checked = 0
    for _ in range(300):
        sides = []
        for scale in (1.0, 7.0):
            n = rng.choice([0, 5, 30, 200]) * scale
            unl = rng.choice([0, 10, 400]) * scale
            p_y, p_f = rng.random(), rng.random()
            both = min(p_y, p_f) * rng.random()
            sides.append(PpiSums(count=n + unl, sum_f=(n + unl) * p_f, sum_f2=(n + unl) * p_f, n=n, sum_y=n * p_y,
                                 sum_y2=n * p_y, sum_f_sub=n * p_f, sum_f2_sub=n * p_f, sum_fy=n * both))
        # the generator reads cumulative series at two steps: one window of 1 step and 7 baseline days
        terms = {t: [0.0] * (8 * gen.DAY_MIN // gen.STEP_MIN + 2) for t in gen.PPI_TERMS}
        day = gen.DAY_MIN // gen.STEP_MIN
        at = 8 * day + 1
        for t, field in zip(gen.PPI_TERMS, ("count", "sum_f", "sum_f2", "n", "sum_y", "sum_y2", "sum_f_sub",
                                            "sum_f2_sub", "sum_fy"), strict=True):
            series = terms[t]
            for d in range(1, 8):  # each baseline day holds a seventh of the pooled sums
                series[at - d * day] = getattr(sides[1], field) / 7
            series[at] = getattr(sides[0], field)
        found = gen._ppi_z(terms, at, 1)
        expected = ppi_drop_z(sides[0], sides[1], margin=gen.MARGIN, var_floor=gen.VAR_FLOOR, min_count=gen.MIN_COUNT,
                   level_sd=gen.LEVEL_SD)
        if expected is None:
            assert found is None
            continue
        assert found is not None
        assert found[0] == pytest.approx(expected.z, rel=1e-9, abs=1e-12)
        assert found[1] == pytest.approx(expected.drop, rel=1e-9, abs=1e-12)
        checked += 1
    assert checked > 50


def test_readme_and_how_to_state_the_parameters(gen: ModuleType) -> None:
    """deploy/README.md and the alerts how-to give the windows, the baseline, the margin, z and the minimum."""
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    how_to = (DEPLOY.parent / "docs" / "how-to" / "alerts-and-runbooks.md").read_text(encoding="utf-8")
    for text in (readme, how_to):
        assert "detection_rules.py" in text
        assert f"level SD {gen.LEVEL_SD}" in text and f"z > {gen.Z}" in text and "--margin" in text
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
    assert f"z > {gen.Z}" in panel["description"] and f"level SD {gen.LEVEL_SD}" in panel["description"]


def test_sharded_rules_give_each_group_its_data_sources_and_a_last_group_the_rest(gen: ModuleType) -> None:
    """--shard REGEX (repeated) splits the recording and the baseline group by data source: every raw counter and
    record a shard's group reads carries its matcher, the last group the negation of all, and the alert group stays
    one."""
    text = gen.rules()
    for name in gen.SHARDED:
        text = gen.shard(text, ["kb-[a-m].*", "kb-[n-z].*"], name)
    groups = yaml.safe_load(text)["groups"]
    names = [g["name"] for g in groups]
    assert names == [f"{group}.{part}" for group in gen.SHARDED for part in ("shard1", "shard2", "rest")] \
        + ["context_precision.detection.alerts"]
    matchers = ['gen_ai_data_source_id=~"kb-[a-m].*"', 'gen_ai_data_source_id=~"kb-[n-z].*"',
                'gen_ai_data_source_id!~"(?:kb-[a-m].*)|(?:kb-[n-z].*)"']
    shipped = {g["name"]: g for g in load_yaml(DETECTION_RULES_FILE)["groups"]}
    records = {r["record"] for name in gen.SHARDED for r in shipped[name]["rules"]}
    unsharded = [shipped[name]["rules"] for name in gen.SHARDED for _ in matchers]
    for group, matcher, unsharded in zip(groups[:-1], matchers * len(gen.SHARDED), unsharded, strict=True):
        assert len(group["rules"]) == len(unsharded)
        for rule in group["rules"]:
            selectors = re.findall(r"(?<![\w:])([\w:]+)\{([^}]*)\}", rule["expr"])
            read = [(name, inside) for name, inside in selectors if name in records or name.startswith("context_")]
            assert read, rule["expr"]
            assert all(inside.endswith(matcher) for _, inside in read), rule["expr"]
            bare = [n for n in re.findall(r"(?<![\w:])([\w]*:[\w:]+)(?![\w:{])", rule["expr"]) if n in records]
            assert not bare, rule["expr"]
    assert groups[-1] == shipped["context_precision.detection.alerts"]
    assert _printed("--shard", "kb-[a-m].*", "--shard", "kb-[n-z].*") == text


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (scripts/install-system-deps.sh)")
def test_sharded_rules_pass_promtool(gen: ModuleType, tmp_path) -> None:
    """The sharded file is valid PromQL and YAML for promtool (its duplicate-rule lint off: the same record names
    in several groups are the point)."""
    path = tmp_path / "sharded.rules.yml"
    path.write_text(_printed("--shard", "kb-[a-m].*", "--shard", "kb-[n-z].*"), encoding="utf-8")
    proc = run_promtool("check", "rules", "--lint=none", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (scripts/install-system-deps.sh)")
def test_sharded_canary_rules_select_their_data_sources_and_pass_promtool(tmp_path) -> None:
    """canary_rules.py --shard splits the canary's recording group the same way: each group's raw counters and
    records carry its matcher; the file passes promtool (duplicate-rule lint off)."""
    generator = DETECTION_GENERATOR.with_name("canary_rules.py")
    text = subprocess.run([sys.executable, str(generator), "--shard", "kb-[a-m].*"], capture_output=True,
                          text=True, check=True).stdout
    groups = yaml.safe_load(text)["groups"]
    assert [g["name"] for g in groups] == ["context_precision.canary.recording.shard1",
                                           "context_precision.canary.recording.rest",
                                           "context_precision.canary.long.shard1", "context_precision.canary.long.rest",
                                           "context_precision.canary.alerts"]
    for group, matcher in zip(groups[:4], ['gen_ai_data_source_id=~"kb-[a-m].*"',
                                           'gen_ai_data_source_id!~"(?:kb-[a-m].*)"'] * 2, strict=True):
        for rule in group["rules"]:
            read = re.findall(r"(?<![\w:])((?:context_|gen_ai_)[\w:]+)\{([^}]*)\}", rule["expr"])
            assert read and all(inside.endswith(matcher) for _, inside in read), rule["expr"]
    path = tmp_path / "canary.rules.yml"
    path.write_text(text, encoding="utf-8")
    proc = run_promtool("check", "rules", "--lint=none", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _cheap_only_records(gen: ModuleType) -> set[str]:
    return {f"{gen.CASCADE}_{total}:{side}" for total, _ in gen.CHEAP_ONLY for side in ("window", "baseline")
            if side == "baseline" or total in gen.WINDOW_TERMS}  # a window's f2 is no record: its PPI++ reads none


def test_the_llm_offset_reads_the_cascades_cheap_only_terms_earlier_and_nothing_else(gen: ModuleType) -> None:
    """--llm-offset N: each term over all evaluations (count, f, f2; window and baseline) is its LLM-judged part
    now plus its cheap-only part N minutes earlier (the window record ``offset`` N, the baseline's from a pool of
    the window records N minutes before each day's: the baseline group runs every 4 minutes); every other rule is
    the shipped one."""
    shipped = {(g["name"], r.get("record", r.get("alert")), str(r.get("labels"))): r
               for g in load_yaml(DETECTION_RULES_FILE)["groups"] for r in g["rules"]}
    offset = {(g["name"], r.get("record", r.get("alert")), str(r.get("labels"))): r
              for g in yaml.safe_load(gen.rules(llm_offset=3))["groups"] for r in g["rules"]}
    early = f"{gen.CASCADE_TERMS}:baseline_early"
    assert offset.keys() - shipped.keys() == {("context_precision.detection.baseline", early, "None")}
    assert shipped.keys() <= offset.keys()
    pooled = " ".join(offset["context_precision.detection.baseline", early, "None"]["expr"].split())
    parts = "|".join(part for pair in gen.CHEAP_ONLY for part in pair)
    assert pooled == gen._baseline(f'{gen.CASCADE_TERMS}:window{{term=~"{parts}"}}', f"{gen.DS}, term", 3)
    assert re.findall(r"offset (\S+),", pooled) == [gen.day_offset(d, 3) for d in range(1, gen.BASELINE_DAYS + 1)]
    changed = {key[1] for key in shipped if shipped[key] != offset[key]}
    assert changed == _cheap_only_records(gen)
    on = "on (gen_ai_data_source_id, window)"
    for total, sub in gen.CHEAP_ONLY:
        for side in ("window", "baseline"):
            if f"{gen.CASCADE}_{total}:{side}" not in _cheap_only_records(gen):
                continue
            (expr,) = [r["expr"] for k, r in offset.items() if k[1] == f"{gen.CASCADE}_{total}:{side}"]

            def one(term: str, later: str = "", side: str = side) -> str:
                if later and side == "baseline":
                    return f'sum without (term) ({early}{{term="{term}"}})'
                return f'sum without (term) ({gen.CASCADE_TERMS}:{side}{{term="{term}"}}{later})'

            def judged(later: str = "") -> str:  # 0 where the LLM has judged nothing: no series for its terms
                return f"({one(sub, later)} or 0 * {one(total, later)})"

            assert " ".join(expr.split()) == (f"{judged()} + {on} ({one(total, ' offset 3m')} - {on}"
                                              f" {judged(' offset 3m')})")


def test_the_judge_tier_sets_the_llm_offset_and_standard_is_what_ships(gen: ModuleType) -> None:
    """--judge-tier standard (the default) prints the shipped rules; flex prints --llm-offset 3; --llm-offset wins."""
    assert gen.TIER_LLM_OFFSET == {"standard": 0, "flex": 3}
    assert _printed("--judge-tier", "standard") == DETECTION_RULES_FILE.read_text(encoding="utf-8")
    flex = _printed("--judge-tier", "flex")
    assert flex == gen.rules(llm_offset=3) == _printed("--llm-offset", "3m")
    assert "detection_rules.py --llm-offset 3 (do not edit" in flex
    assert _printed("--judge-tier", "flex", "--llm-offset", "0") == DETECTION_RULES_FILE.read_text(encoding="utf-8")
    bad = subprocess.run([sys.executable, str(DETECTION_GENERATOR), "--llm-offset", "90s"], capture_output=True,
                         text=True)  # fmt: skip
    assert bad.returncode == 2 and "whole minutes" in bad.stderr


def test_query_offset_is_an_option_on_every_group(gen: ModuleType) -> None:
    """--query-offset puts Prometheus >= 2.53's query_offset on every group and changes nothing else; the shipped
    rules have none (Prometheus 2.42 rejects the field)."""
    assert all("query_offset" not in g for g in load_yaml(DETECTION_RULES_FILE)["groups"])
    groups = yaml.safe_load(_printed("--query-offset", "2m"))["groups"]
    assert [g["query_offset"] for g in groups] == ["2m"] * len(DETECTION_RULE_GROUPS) == ["2m"] * 3
    shipped = load_yaml(DETECTION_RULES_FILE)["groups"]
    assert [{k: v for k, v in g.items() if k != "query_offset"} for g in groups] == shipped
    bad = subprocess.run([sys.executable, str(DETECTION_GENERATOR), "--query-offset", "soon"], capture_output=True,
                         text=True)  # fmt: skip
    assert bad.returncode == 2 and "not a Prometheus duration" in bad.stderr


def test_late_llm_scores_page_for_a_cheap_judge_move_only_without_the_offset(gen: ModuleType) -> None:
    """With the LLM's scores LATE_MIN late, the generator's arithmetic (which the promtool scenarios hold the rules
    to) fires for the minutes the cheap judge's move is not yet matched by the LLM's scores, unless --llm-offset
    reads the cheap-only terms as late; a drop only the LLM sees fires either way, no sooner than LATE_MIN."""
    def fired(text: str) -> set[str]:
        return set(re.findall(r"gen_ai_data_source_id: (\w+)\}", text))

    aligned, misaligned = gen.late_scenarios(gen.LATE_MIN, "r.yml"), gen.late_scenarios(0, "r.yml")
    assert fired(aligned) == {"cascade_late_blind"}
    assert fired(misaligned) == {"cascade_late_blind", "cascade_late_cheap_moves"}
    assert "rule_files:\n  - r.yml\n" in aligned


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (scripts/install-system-deps.sh)")
def test_the_llm_offset_in_promtool_shifts_the_cheap_only_part_and_counts_an_absent_llm_part_as_0(
        gen: ModuleType, tmp_path) -> None:
    """promtool, --llm-offset 3, a 1-minute scrape, the 5-minute window at minute 12: kb2's count is its n now
    (6) plus its cheap-only part over minutes 4..9 (50 - 5); kb's LLM has judged nothing (no n series): its count
    is its cheap-only part then (50), not nothing, and not the 70 of minutes 7..12."""
    (tmp_path / "r.yml").write_text(gen.rules(llm_offset=3), encoding="utf-8")
    labels = 'job="a",instance="p",gen_ai_evaluation_name="context_precision",gen_ai_data_source_id='
    count = "0+10x10 120+20x20"  # 10 a minute, then 20 from minute 10
    name = f"{gen.CASCADE}_count:window"

    def expected(source: str, value: int) -> dict[str, object]:
        return {"expr": f'{name}{{window="5m",gen_ai_data_source_id="{source}"}}', "eval_time": "12m",
                "exp_samples": [{"labels": f'{name}{{gen_ai_data_source_id="{source}",window="5m"}}',
                                 "value": value}]}

    (tmp_path / "t.yml").write_text(yaml.safe_dump({
        "rule_files": ["r.yml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": [
            {"series": f'{gen.CASCADE_METRIC}{{{labels}"kb",term="count"}}', "values": count},
            {"series": f'{gen.CASCADE_METRIC}{{{labels}"kb2",term="count"}}', "values": count},
            {"series": f'{gen.CASCADE_METRIC}{{{labels}"kb2",term="n"}}', "values": "0+1x10 11+2x20"}],
            "promql_expr_test": [expected("kb", 50), expected("kb2", 51)]}],
    }), encoding="utf-8")
    proc = run_promtool("test", "rules", "t.yml", cwd=tmp_path)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    (tmp_path / "r.yml").write_text(gen.rules(), encoding="utf-8")  # unshifted: minutes 7..12
    unshifted = run_promtool("test", "rules", "t.yml", cwd=tmp_path)
    assert unshifted.returncode != 0 and 'gen_ai_data_source_id="kb", window="5m"} 7E+01' in unshifted.stderr
