"""End to end: a real Prometheus scrapes `cp-observe demo`; the shipped MAP-drop alert fires after the degradation only.

The alert rule is the shipped ``ContextPrecisionMAPDrop`` with its ``for`` shortened, and the recording rules it reads
with their range windows shortened (the rest of the expression text unchanged), evaluated by a Prometheus server
on loopback every second.
"""

from __future__ import annotations

import math
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cp_observe import _names as names
from tests.deploy_support import (
    PROMETHEUS,
    RULES_FILE,
    alert_rules,
    child_env,
    demo_executable,
    emitted_series,
    free_port,
    http_get_text,
    load_yaml,
    prom_alerts,
    prom_query,
    prometheus_label,
    prometheus_server,
    range_windows,
    stop_process,
)

DEMO = demo_executable()

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (run scripts/install-system-deps.sh)"),
    pytest.mark.skipif(
        DEMO is None,
        reason="`cp-observe demo` not available yet (cp_observe.cli does not import or no cp-observe script)",
    ),
]

DATA_SOURCE = "demo-bm25"
DEGRADE_AFTER = 200  # turns before the demo swaps in the bad retriever
INTERVAL_S = 0.1  # seconds between turns: degradation happens no earlier than DEGRADE_AFTER * INTERVAL_S
WINDOW = "15s"  # replaces the shipped 30m window
FOR = "2s"  # replaces the shipped `for`
DS = prometheus_label(names.GEN_AI_DATA_SOURCE_ID)

T = TypeVar("T")


def _wait_for(probe: Callable[[], T | None], timeout: float, what: str, log: Path) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; demo output:\n{log.read_text()[-3000:]}")


def _map_drop_alerts(prom: str) -> list[dict[str, Any]]:
    return [a for a in prom_alerts(prom) if a["labels"].get("alertname") == "ContextPrecisionMAPDrop"]


def _value(result: list[dict[str, Any]]) -> float | None:
    return float(result[0]["value"][1]) if result else None


def _shortened_rules() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The recording rules MAPDrop reads and MAPDrop itself, with their range windows and ``for`` shortened."""
    rule = alert_rules()["ContextPrecisionMAPDrop"]
    shipped_records = [r for g in load_yaml(RULES_FILE)["groups"] for r in g["rules"] if "record" in r]
    by_name = {r["record"]: r["expr"] for r in shipped_records}
    used: set[str] = set()
    pending = set(re.findall(r"\b[a-z_]+:[a-z_]+:[a-z0-9_]+\b", rule["expr"]))
    while pending:  # and the recorded series those read (the cascade's PPI++ rules read earlier rules)
        name = pending.pop()
        used.add(name)
        pending |= set(re.findall(r"\b[a-z_]+:[a-z_]+:[a-z0-9_]+\b", by_name[name])) - used
    records = [r for r in shipped_records if r["record"] in used]  # in the file's order: later rules read earlier
    assert {r["record"] for r in records} == used
    shortened = []
    for record in records:
        windows = set(range_windows(record["expr"]))
        if not windows:  # built from other recorded series only
            shortened.append(record)
            continue
        (shipped,) = windows
        expr = record["expr"].replace(f"[{shipped}]", f"[{WINDOW}]")
        assert expr.replace(f"[{WINDOW}]", f"[{shipped}]") == record["expr"]  # only the windows differ
        shortened.append({**record, "expr": expr})
    return shortened, {**rule, "for": FOR}


def test_map_drop_alert_fires_after_degradation_and_not_before(tmp_path: Path) -> None:
    """The demo's score series arrive with the documented labels; the alert is quiet while healthy, then fires."""
    assert DEMO is not None
    records, rule = _shortened_rules()
    metrics_port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "cp-observe-demo", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}
        ],
    }
    rules = {"groups": [{"name": "context_precision.recording", "rules": records},
                        {"name": "context_precision.alerts", "rules": [rule]}]}  # fmt: skip
    log_path = tmp_path / "demo.log"
    with prometheus_server(tmp_path / "prometheus", config, rules) as prom, log_path.open("w") as log:
        command = [DEMO, "demo", "--loop", "--judge", "lexical", "--quiet", "--metrics-port", str(metrics_port),
                   "--degrade-after", str(DEGRADE_AFTER), "--interval", str(INTERVAL_S)]  # fmt: skip
        demo = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=child_env())
        try:
            # 1. The score series arrive, labelled as documented.
            selector = f'{{{DS}="{DATA_SOURCE}"}}'
            series = _wait_for(lambda: prom_query(prom, f"context_precision_score_count{selector}"), 30,
                               "context_precision_score_count in Prometheus", log_path)  # fmt: skip
            first_seen = time.monotonic()
            labels = series[0]["metric"]
            assert labels[DS] == DATA_SOURCE
            assert labels[prometheus_label(names.GEN_AI_EVALUATION_NAME)] == names.EVALUATION_NAME
            buckets = {float(s["metric"]["le"]) for s in prom_query(prom, f"context_precision_score_bucket{selector}")}
            assert buckets == {*names.SCORE_BUCKETS, math.inf}
            outcomes = prom_query(prom, f"context_precision_evaluations_total{selector}")
            assert {s["metric"]["outcome"] for s in outcomes} <= set(names.OUTCOMES)

            # Every family the demo exposes under our prefixes is one the library documents.
            exposition = http_get_text(f"http://127.0.0.1:{metrics_port}/metrics")
            exposed = set(re.findall(r"^((?:context_precision|gen_ai)_\w+?)(?:_created)?[{ ]", exposition, re.M))
            assert exposed and exposed <= emitted_series(), exposed - emitted_series()

            # 2. Healthy phase: while fewer turns than DEGRADE_AFTER can have run, nothing fires, although the
            #    guard (>= 20 evaluations in the window) holds and MAP is computed.
            degrade_not_before = first_seen - 2 + 0.9 * DEGRADE_AFTER * INTERVAL_S
            mean = (f"sum by ({DS}) (rate(context_precision_score_sum{selector}[{WINDOW}])) / "
                    f"sum by ({DS}) (rate(context_precision_score_count{selector}[{WINDOW}]))")  # fmt: skip
            guard = f"sum by ({DS}) (increase(context_precision_score_count{selector}[{WINDOW}])) >= 20"
            healthy_seen = 0
            while time.monotonic() < degrade_not_before:
                scored = _value(prom_query(prom, f"sum(context_precision_score_count{selector})")) or 0
                if scored >= 0.9 * DEGRADE_AFTER:
                    break
                assert _map_drop_alerts(prom) == [], f"alert before degradation after {scored} scored turns"
                value = _value(prom_query(prom, mean))
                if prom_query(prom, guard) and value is not None and value >= 0.5:
                    healthy_seen += 1
                time.sleep(0.5)
            assert healthy_seen >= 3, "never saw >= 20 evaluations with MAP >= 0.5 before the degradation"

            # 3. After the degradation the alert goes pending, then firing, for the demo's data source.
            def active() -> list[dict[str, Any]]:
                return [a for a in _map_drop_alerts(prom) if a["state"] in {"pending", "firing"}]

            (alert,) = _wait_for(active, 45, "ContextPrecisionMAPDrop pending/firing", log_path)
            assert alert["labels"] == {"alertname": "ContextPrecisionMAPDrop", DS: DATA_SOURCE,
                                       **rule["labels"]}  # fmt: skip
            _wait_for(lambda: [a for a in _map_drop_alerts(prom) if a["state"] == "firing"], 20,
                      "ContextPrecisionMAPDrop firing", log_path)  # fmt: skip
            assert "degraded" in log_path.read_text()
        finally:
            stop_process(demo)
