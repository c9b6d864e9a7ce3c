"""A real Prometheus evaluates the generated canary rules on a live app's segment-labelled series.

The rules are the generator's for ``retriever.version`` with every window of the scan read in seconds instead of
minutes (``[5m]`` becomes ``[5s]``, the recorded ``window`` label keeps its name) and the groups evaluated every
second (the expression text otherwise unchanged); the app runs cp-observe in process with
``segments=retriever.version`` and exposes ``/metrics`` on loopback. A worse v2 fires
``ContextPrecisionVariantRegression`` for v2 only (at the retrieval stage), its description naming the window, the
gap ± its interval, the rest's MAP and both counts; equal variants stay quiet while both sides have enough evaluations, also when only v1's retrievals are
reranked (the rules compare within a stage: pooled over both, v1's reranked scores would make v2 look worse).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy_support import (
    PROMETHEUS,
    PROMETHEUS_DIR,
    child_env,
    free_port,
    prom_alerts,
    prom_query,
    prometheus_server,
    stop_process,
)

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (run scripts/install-system-deps.sh)"),
]

ALERT = "ContextPrecisionVariantRegression"
ROOT = Path(__file__).resolve().parents[2]
COUNTED_WINDOW = "20m"  # the window label whose counts the test reads (a 20 s range here)


def _generator() -> Any:
    sys.path.insert(0, str(PROMETHEUS_DIR))
    try:
        import canary_rules  # the generator (standard library only)
    finally:
        sys.path.remove(str(PROMETHEUS_DIR))
    return canary_rules


def _rules() -> dict[str, Any]:
    generator = _generator()
    text = generator.rules("retriever.version")
    # Minutes become seconds: the one raw range (the shortest window) and the offsets that join recorded halves.
    shortest, *longer = generator.WINDOWS
    assert f"[{shortest}m]" in text
    text = text.replace(f"[{shortest}m]", f"[{shortest}s]")
    for w in (shortest, *longer[:-1]):
        assert f"offset {w}m" in text
        text = text.replace(f"offset {w}m", f"offset {w}s")
    assert not re.search(r"\[[0-9]+m\]|offset [0-9]+[mhd]", text), "a range or offset left in minutes"
    rules: dict[str, Any] = yaml.safe_load(text)
    for group in rules["groups"]:
        group["interval"] = "1s"
    return rules


def _active(prom: str) -> list[dict[str, Any]]:
    return [a for a in prom_alerts(prom) if a["labels"].get("alertname") == ALERT]


def _run(tmp_path: Path, v2_first_share: float, *app_args: str) -> tuple[str, subprocess.Popen[str], Any]:
    port = free_port()
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [{"job_name": "canary", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]}
    server = prometheus_server(tmp_path / "prometheus", config, _rules())
    prom = server.__enter__()
    log = (tmp_path / "app.log").open("w")
    app = subprocess.Popen([sys.executable, "-m", "tests.integration.canary_app", str(port),
                            "--v2-first-share", str(v2_first_share), *app_args], cwd=ROOT, stdout=log,
                           stderr=subprocess.STDOUT, text=True, env=child_env(LITELLM_LOCAL_MODEL_COST_MAP="True"))
    return prom, app, (server, log)


def _counts(prom: str) -> dict[tuple[str, str], float]:
    # The window label keeps the generated name ("20m"); only the range inside was shortened (to 20 s).
    series = "gen_ai_data_source_id_stage_retriever_version_window:context_precision_score_count:window"
    counts = prom_query(prom, f'{series}{{window="{COUNTED_WINDOW}"}}')
    return {(s["metric"].get("stage", ""), s["metric"].get("retriever_version", "")): float(s["value"][1])
            for s in counts}


def _both_sides_counted(prom: str, stage: str = "retrieval") -> bool:
    values = _counts(prom)
    return values.get((stage, "v1"), 0) >= 20 and values.get((stage, "v2"), 0) >= 20


def _wait(probe: Any, timeout: float, what: str, tmp_path: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; app log:\n{(tmp_path / 'app.log').read_text()[-3000:]}")


def test_a_worse_variant_fires_for_that_variant_only(tmp_path: Path) -> None:
    """v2 ranks the relevant document first 30 % of the time (MAP ~0.65 vs ~0.95): the alert fires for v2."""
    prom, app, (server, log) = _run(tmp_path, 0.3)
    try:
        _wait(lambda: _both_sides_counted(prom), 60, "both variants counted", tmp_path)
        firing = _wait(lambda: [a for a in _active(prom) if a["state"] == "firing"], 60, f"{ALERT} firing", tmp_path)
        assert [a["labels"]["retriever_version"] for a in firing] == ["v2"]
        assert firing[0]["labels"]["gen_ai_data_source_id"] == "kb"
        assert firing[0]["labels"]["stage"] == "retrieval"
        text = firing[0]["annotations"]["description"]
        match = re.search(r"Over the last (\d+)m, .* is below the MAP of its other retriever_version values at that"
                          r" stage at z = ([\d.]+) > ([\d.]+) \(gap SD ([\d.]+)\)\. Estimated gap ([\d.]+)"
                          r" ± ([\d.]+) \(95%\) below a MAP of ([\d.]+), on (\d+) scored evaluations of the value and"
                          r" (\d+) of the rest\.", text)
        assert match, text
        window, z, threshold, _, gap, half, rest, n, rest_n = match.groups()
        assert int(window) in _generator().WINDOWS and float(z) > float(threshold) == _generator().Z
        assert 0.1 < float(gap) < 0.5 and 0 < float(half) < float(gap) and 0.8 < float(rest) <= 1.0
        assert int(n) >= 20 and int(rest_n) >= 20
    finally:
        stop_process(app)
        log.close()
        server.__exit__(None, None, None)


def test_equal_variants_stay_quiet(tmp_path: Path) -> None:
    """v1 and v2 alike: with at least 20 evaluations on each side for 20 s, the alert never goes pending."""
    prom, app, (server, log) = _run(tmp_path, 0.9)
    try:
        _wait(lambda: _both_sides_counted(prom), 60, "both variants counted", tmp_path)
        quiet_until = time.monotonic() + 20
        while time.monotonic() < quiet_until:
            assert _active(prom) == []
            assert _both_sides_counted(prom)
            time.sleep(0.5)
    finally:
        stop_process(app)
        log.close()
        server.__exit__(None, None, None)


def test_a_reranked_variant_does_not_make_the_other_look_worse(tmp_path: Path) -> None:
    """Both variants retrieve alike (relevant first 30 %: MAP ~0.65); only v1's turns are reranked (AP 1).

    Within each stage nothing differs (v2 has no rerank evaluations, so v1's rerank has no rest): quiet. Pooled
    over the stages, v1's reranked scores would lift its MAP to ~0.8 and fire the alert for v2.
    """
    prom, app, (server, log) = _run(tmp_path, 0.3, "--v1-first-share", "0.3", "--rerank-v1")
    try:
        _wait(lambda: _both_sides_counted(prom) and _counts(prom).get(("rerank", "v1"), 0) >= 20, 60,
              "both variants counted, and v1's rerank stage", tmp_path)
        assert ("rerank", "none") not in _counts(prom)  # the rerank evaluations carry the retrieval's variant
        quiet_until = time.monotonic() + 20
        while time.monotonic() < quiet_until:
            assert _active(prom) == []
            time.sleep(0.5)
    finally:
        stop_process(app)
        log.close()
        server.__exit__(None, None, None)
