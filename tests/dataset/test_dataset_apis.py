"""``cp-observe dataset`` from trace-query APIs: the recorded Jaeger and Tempo responses of
``tests/traces_support.py`` (eight demo turns with their live evaluation spans), served on loopback; every live
evaluation becomes one line."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from cp_observe import load_dataset
from tests.traces_support import RECORDED, TEMPO, JaegerApi, TempoApi, jaeger_live_scores, tempo_live_scores

CLI = [sys.executable, "-m", "cp_observe.cli", "dataset"]


def _window(starts_s: list[float]) -> tuple[str, str]:
    return (datetime.fromtimestamp(min(starts_s) - 60, timezone.utc).isoformat(),
            datetime.fromtimestamp(max(starts_s) + 60, timezone.utc).isoformat())


def test_dataset_from_jaeger(tmp_path: Path) -> None:
    """--jaeger URL --service S: the live verdicts and APs of every recorded evaluation, with query and answer."""
    live = {f"{span:016x}": ap for span, ap in jaeger_live_scores().items()}
    since, until = _window([s["startTime"] / 1e6 for t in RECORDED["data"] for s in t["spans"]])
    api = JaegerApi(RECORDED["data"])
    api.thread.start()
    try:
        out = tmp_path / "jaeger.jsonl"
        done = subprocess.run([*CLI, "--jaeger", api.url, "--service", "cp-observe-demo", "--since", since,
                               "--until", until, "-o", str(out)], capture_output=True, text=True, timeout=120,
                              check=False)
    finally:
        api.close()
    assert done.returncode == 0, done.stderr
    items = load_dataset(out)
    assert {i["span_id"]: i["average_precision"] for i in items} == live and len(live) == 8
    assert all(i["query"] and i["contexts"] and (i["answer"] or i["reference"] == "query") for i in items)


def test_dataset_from_tempo_with_a_filter(tmp_path: Path) -> None:
    """--tempo URL --service S --worst 3: the three lowest live scores of the recorded traces."""
    live = [(ap, f"{span:016x}") for span, ap in tempo_live_scores().items()]
    since, until = _window([int(t["startTimeUnixNano"]) / 1e9 for t in TEMPO["search"]])
    api = TempoApi()
    try:
        out = tmp_path / "tempo.jsonl"
        done = subprocess.run([*CLI, "--tempo", api.url, "--service", "cp-observe-demo", "--since", since, "--until",
                               until, "--worst", "3", "-o", str(out)], capture_output=True, text=True, timeout=120,
                              check=False)
    finally:
        api.close()
    assert done.returncode == 0, done.stderr
    items = load_dataset(out)
    assert [i["average_precision"] for i in items] == sorted(ap for ap, _ in live)[:3]
    assert {i["span_id"] for i in items} <= {parent for _, parent in live}
    assert "5 not among the worst 3" in done.stdout
