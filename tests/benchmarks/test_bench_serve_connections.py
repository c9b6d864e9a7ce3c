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


def test_a_small_flood_leaves_the_sender_answered_and_every_closed_connection_counted(tmp_path: Path) -> None:
    """200 idle and slow connections held, then reopened: the sender is answered, threads stay put, all counted."""
    out = tmp_path / "rows.json"
    subprocess.run([sys.executable, str(BENCH), "--connections", "200", "--requests", "3", "--drip", "0.5",
                    "--no-old", "--flood-seconds", "2", "--json", str(out)], cwd=ROOT, env=subprocess_env(),
                   capture_output=True, text=True, timeout=300, check=True)
    rows = json.loads(out.read_text())
    first = "--http-first-request-timeout-s 600"
    assert [(row["mode"], row["settings"]) for row in rows["held"]] == [
        ("idle", f"--max-connections 2200 {first}"), ("slow", f"--max-connections 2200 {first}"),
        ("idle", f"--max-connections 66 {first}"), ("slow", f"--max-connections 2200 --http-read-timeout-s 1.0 {first}")]
    held, slow, bounded, timed_out = rows["held"]
    for row in (held, slow):
        assert row["connected"] == 200 and row["closed_by_server"] == 0 and row["refusals"] == {}
        assert row["exporter_ok"] == row["fresh_ok"] == 3
        assert row["threads"] <= row["threads_before"] + 1, row  # no thread per connection
    # At the bound, each newcomer evicted the oldest connection that had sent nothing: the sender got in every time.
    assert bounded["exporter_ok"] == bounded["fresh_ok"] == 3
    # 200 flood connections and the exporter's in 66 slots: at least 135 evicted (one more if a new-connection POST
    # found the door full), each counted as evicted_new and seen closed by the flooding client.
    assert set(bounded["refusals"]) == {"http:evicted_new"}, bounded
    assert 135 <= bounded["refusals"]["http:evicted_new"] <= 138 and bounded["closed_by_server"] >= 135, bounded
    assert timed_out["refusals"] == {"http:slow_client": 200} and timed_out["closed_by_server"] == 200
    assert [(row["door"], row["mode"]) for row in rows["flood"]] == [
        ("this", "idle"), ("this", "slow"), ("before", "idle"), ("before", "slow")]
    for row in rows["flood"]:
        assert row["exporter_failed"] == row["fresh_failed"] == 0 and row["requests"] > 0, row
        assert row["opened"] >= 200 and row["threads"] <= row["threads_before"] + 2, row
