"""A live Prometheus evaluates the shipped drop-detection rules over eight backfilled days, summing two replicas.

Eight days of counters (the scenarios' daily MAP pattern, scores 0 or 1, 4 scored evaluations a minute) are
backfilled with ``promtool tsdb create-blocks-from openmetrics`` up to the current minute; "drop" loses 0.25 of MAP
for the last 90 minutes and is exported by two replicas (``instance`` pod-1 and pod-2, half the traffic each), so
the rules must sum them. "cascade" runs the cheap-plus-LLM cascade on two replicas: its LLM-judged MAP drops 0.25
for the last 90 minutes while the cheap judge's scores stay, so its score series (half the cheap judge's) drops by
half that; the alert must report the PPI++ drop, from the cascade's sums. The rules are the shipped file with only
the groups' evaluation interval shortened. The rules build their windows and baselines from recorded windows, so
the window records of the eight days are written first by ``cp-observe deploy backfill`` (promtool tsdb
create-blocks-from rules against a Prometheus over the raw history; the blocks then join its storage), as an
upgrade does. The rule manager itself (not a query) must fire ``ContextPrecisionMAPRegression`` for "drop" and "cascade" and not for
"steady", with annotations that name the window, the drop, its interval, the baseline and the counts.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from cp_observe import cli

from tests.deploy_support import (
    DETECTION_GENERATOR,
    DETECTION_RULES_FILE,
    PROMETHEUS,
    PROMTOOL,
    prom_alerts,
    prom_query,
    prometheus_server,
)

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason="prometheus/promtool not installed"),
]

ALERT = "ContextPrecisionMAPRegression"
DAYS = 8
DROP_MINUTES = 90


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("detection_rules", DETECTION_GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _backfill(data: Path, end_minute: int) -> None:
    """Write the counters of steady (pod-1) and drop (pod-1 and pod-2) for DAYS days up to ``end_minute``."""
    gen = _generator()
    first = end_minute - DAYS * 1440
    series: dict[str, list[str]] = {"context_precision_score_count": [], "context_precision_score_sum": [],
                                     "context_precision_score_squares": []}  # fmt: skip
    sources = (("steady", "pod-1", 4.0, 0.0), ("drop", "pod-1", 2.0, 0.25), ("drop", "pod-2", 2.0, 0.25))
    for source, pod, per_minute, drop in sources:
        count = total = 0.0
        labels = f'{{gen_ai_data_source_id="{source}",instance="{pod}",job="rag-app",stage="retrieval"}}'
        for minute in range(first, end_minute + 1):
            if minute > first:
                mean = gen.daily_mean(minute) - (drop if minute > end_minute - DROP_MINUTES else 0.0)
                count += per_minute
                total += per_minute * mean
            for name, value in (("context_precision_score_count", count), ("context_precision_score_sum", total),
                                ("context_precision_score_squares", total)):  # fmt: skip
                series[name].append(f"{name if name.endswith(('count', 'sum')) else name + '_total'}{labels}"
                                    f" {value!r} {minute * 60}\n")
    cascade: list[str] = []
    term_names = ("count", "f", "f2", "n", "y", "y2", "f_sub", "f2_sub", "fy")
    for pod in ("pod-1", "pod-2"):  # 4 evaluations a minute each, 2 of them judged by the LLM as well
        sums = dict.fromkeys(term_names, 0.0)
        count = total = 0.0
        labels = f'gen_ai_data_source_id="cascade",instance="{pod}",job="rag-app"'
        for minute in range(first, end_minute + 1):
            if minute > first:
                f = gen.daily_mean(minute)
                y = f - (0.25 if minute > end_minute - DROP_MINUTES else 0.0)
                step = {"count": 4, "f": 4 * f, "f2": 4 * f, "n": 2, "y": 2 * y, "y2": 2 * y, "f_sub": 2 * f,
                        "f2_sub": 2 * f, "fy": 2 * (min(y, f) - 0.0625)}
                for term in term_names:
                    sums[term] += step[term]
                count += 4
                total += 2 * y + 2 * f
            cascade += [f'context_precision_cascade_sums_total{{{labels},term="{term}"}} {sums[term]!r} {minute * 60}\n'
                        for term in term_names]
            series["context_precision_score_count"].append(
                f'context_precision_score_count{{{labels},stage="retrieval"}} {count!r} {minute * 60}\n')
            series["context_precision_score_sum"].append(
                f'context_precision_score_sum{{{labels},stage="retrieval"}} {total!r} {minute * 60}\n')
            series["context_precision_score_squares"].append(
                f'context_precision_score_squares_total{{{labels},stage="retrieval"}} {total!r} {minute * 60}\n')
    om = data.parent / "history.om"
    with om.open("w", encoding="utf-8") as handle:
        for name, lines in series.items():
            handle.write(f"# TYPE {name} {'counter' if name.endswith('squares') else 'gauge'}\n")
            handle.writelines(lines)
        handle.write("# TYPE context_precision_cascade_sums counter\n")
        handle.writelines(cascade)
        handle.write("# EOF\n")
    subprocess.run([str(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(data)],
                   check=True, capture_output=True)  # fmt: skip


def _rules() -> dict[str, Any]:
    rules: dict[str, Any] = yaml.safe_load(DETECTION_RULES_FILE.read_text(encoding="utf-8"))
    for group in rules["groups"]:
        group["interval"] = "2s"
    return rules


def _evidence(text: str) -> tuple[str, ...]:
    match = re.search(r"Over the last (\d+)m, .* z = ([\d.]+) > .* Estimated drop ([\d.]+) ± ([\d.]+) \(95%\)"
                      r" from a baseline MAP of ([\d.]+), on (\d+) scored evaluations against (\d+) in the"
                      r" baseline\.", text)  # fmt: skip
    assert match, text
    return match.groups()


def test_a_drop_across_two_replicas_fires_with_its_evidence_and_a_steady_source_stays_quiet(tmp_path: Path) -> None:
    """The rule manager fires for "drop" and "cascade"; the description states window, drop ± interval, baseline,
    counts; for "cascade" they are the PPI++ figures over both replicas' sums."""
    end_minute = int(time.time()) // 60
    _backfill(tmp_path / "data", end_minute)
    config = {"global": {"evaluation_interval": "2s", "scrape_interval": "1m"}}
    with prometheus_server(tmp_path, config, None, ("--storage.tsdb.retention.time=30d",)) as prom:
        assert cli.main(["deploy", "backfill", "--url", prom, "--output-dir", str(tmp_path / "blocks"),
                         "--end", str(end_minute * 60)]) == 0
    blocks = sorted((tmp_path / "blocks").iterdir())
    assert blocks
    for block in blocks:
        block.rename(tmp_path / "data" / block.name)
    with prometheus_server(tmp_path, config, _rules(), ("--storage.tsdb.retention.time=30d",)) as prom:
        deadline = time.monotonic() + 90
        firing: list[dict[str, Any]] = []
        while time.monotonic() < deadline and len(firing) < 2:
            firing = [a for a in prom_alerts(prom) if a["labels"].get("alertname") == ALERT
                      and a["state"] == "firing"]  # fmt: skip
            time.sleep(1)
        by_source = {a["labels"]["gen_ai_data_source_id"]: a for a in firing}
        assert sorted(by_source) == ["cascade", "drop"], firing
        z = {r["metric"]["gen_ai_data_source_id"]: float(r["value"][1])
             for r in prom_query(prom, "gen_ai_data_source_id:context_precision_score:drop_z_max")}
        gen = _generator()
        assert z["drop"] > gen.Z and z["cascade"] > gen.Z and z["steady"] < gen.Z, z
        # Nothing scrapes the counters after end_minute: a live window misses the minutes since (the backfill ran
        # in between), 4 evaluations each, besides the 8 its edges may count or miss.
        slack = 8 + 4 * (int(time.time()) // 60 + 1 - end_minute)
        window, _, drop, half, baseline, n, big_n = _evidence(by_source["drop"]["annotations"]["description"])
        assert int(window) in gen.WINDOWS and int(window) < DROP_MINUTES * 2
        assert abs(float(drop) - 0.25) < 0.1 and 0 < float(half) < float(drop)
        assert 0.55 < float(baseline) < 0.7
        assert -8 <= 4 * int(window) - int(n) <= slack  # both replicas counted
        assert abs(int(big_n) - 7 * 4 * int(window)) <= 8 * 7
        # The cascade: the PPI++ drop (the score series alone drops half as much), on the LLM-judged counts.
        window, _, drop, half, baseline, n, big_n = _evidence(by_source["cascade"]["annotations"]["description"])
        assert abs(float(drop) - 0.25) < 0.06 and 0 < float(half) < float(drop)
        assert 0.55 < float(baseline) < 0.7
        assert -8 <= 4 * int(window) - int(n) <= slack  # 2 LLM-judged a minute on each replica
        assert abs(int(big_n) - 7 * 4 * int(window)) <= 8 * 7
        plain = {r["metric"]["window"]: float(r["value"][1]) for r in prom_query(
            prom, 'gen_ai_data_source_id_window:context_precision_score_plain:drop{gen_ai_data_source_id="cascade"}')}
        assert abs(plain[f"{window}m"] - 0.125) < 0.06, plain
