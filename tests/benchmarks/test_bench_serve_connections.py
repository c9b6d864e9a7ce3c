"""``serve/bench_serve_connections.py`` cannot rot: a small flood, run for real, says what the big one says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serve_support import ROOT, subprocess_env

pytestmark = pytest.mark.e2e  # a whole program in child processes: not the quick unit tier

BENCH = ROOT / "benchmarks" / "serve" / "bench_serve_connections.py"


def test_a_small_flood_leaves_the_sender_answered_and_every_refusal_counted(tmp_path: Path) -> None:
    """200 idle and slow connections: the sender is answered, threads stay put, refused and slow ones are counted."""
    out = tmp_path / "rows.json"
    subprocess.run([sys.executable, str(BENCH), "--connections", "200", "--requests", "3", "--drip", "0.5",
                    "--no-old", "--json", str(out)], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                   timeout=240, check=True)
    rows = json.loads(out.read_text())
    assert [(row["mode"], row["settings"]) for row in rows] == [
        ("idle", "--max-connections 2200"), ("slow", "--max-connections 2200"), ("idle", "--max-connections 66"),
        ("slow", "--max-connections 2200 --http-read-timeout-s 1.0")]
    held, slow, bounded, timed_out = rows
    for row in (held, slow):
        assert row["connected"] == 200 and row["closed_by_server"] == 0 and row["refusals"] == {}
        assert row["exporter_ok"] == row["fresh_ok"] == 3
        assert row["threads"] <= row["threads_before"] + 1, row  # no thread per connection
    refused_fresh = 3 - bounded["fresh_ok"]
    assert bounded["exporter_ok"] == 3  # its connection was held before the flood
    assert bounded["refusals"] == {"http:too_many_connections": bounded["closed_by_server"] + refused_fresh}
    assert timed_out["refusals"] == {"http:slow_client": 200} and timed_out["closed_by_server"] == 200
