"""``bench_hot_path.py`` runs whole with a peer installed: every group, the peers' rows and the summary.

The comparison with the peers runs only in ``.venv-bench``, so a new shape that the peers cannot take once broke
it unnoticed. Here a fake peer (``fake_peer.py``: one OpenTelemetry span per call) stands in for the real ones,
and the script's ``main`` runs in a child process (it sets environment variables and patches ``socket``) over
every group at one round of a few calls.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # a whole script in a child process: not the quick unit tier

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "request_path" / "bench_hot_path.py"

_DRIVER = """
import sys
sys.path[:0] = [{bench!r}, {benchmarks!r}, {here!r}]
import _peers
import fake_peer
_peers.BUILDERS = (("fake peer", fake_peer.build),)
import bench_hot_path
sys.exit(bench_hot_path.main(["--quick", "--rounds", "1", "--calls", "3"]))
"""


def test_hot_path_runs_every_group_with_a_peer() -> None:
    """All groups, the fake peer in every group peers have, the summary and the rerank and stream sections print."""
    driver = _DRIVER.format(bench=str(BENCH.parent), benchmarks=str(BENCH.parents[1]), here=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", driver], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for group in ("retrieve", "agent", "turn"):
        rows = [line for line in out.splitlines() if line.startswith(f"| {group} ") and "fake peer @traced" in line]
        assert rows, f"no fake-peer row in the {group} group:\n{out[:3000]}"
        assert not any("failed:" in row for row in rows), rows
    assert "### Summary" in out
    assert "### @reranker against @retriever" in out
    assert "### A decorated generator, per item" in out
    assert "Non-loopback network attempts refused during the run: 0" in out
