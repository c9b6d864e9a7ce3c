"""``bench_sinks.py --quick`` runs whole: both tables print, with every variant's row.

The script reaches into the emitter's sink hook (``Emitter._to_sinks``), so a change to the hook's signature once
broke it unnoticed. It runs in a child process (it patches ``socket`` to refuse non-loopback connections), without
``--phoenix`` (that needs ``.venv-phoenix``); ``--quick`` takes a second or two.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # a whole program in a child process: not the quick unit tier

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "judging" / "bench_sinks.py"


def _rows(out: str, first_cell: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith(f"| {first_cell}")]


def test_bench_sinks_quick_prints_every_table() -> None:
    """Emission cost per variant and the hook alone print; the stuck sink drops what its full queue refuses."""
    done = subprocess.run([sys.executable, str(BENCH), "--quick"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "### Emission cost on the evaluator thread" in out
    assert "### The sink hook alone" in out
    for variant in ("no sink (baseline)", "Phoenix sink, Phoenix down", "accepted (queue has room)",
                    "dropped (queue full, counted)"):
        assert _rows(out, variant), f"no row for {variant}:\n{out}"
    [stuck] = _rows(out, "stuck sink, queue full (drops)")
    offered, dropped = (int(part) for part in stuck[-1].split(" / "))
    assert offered > 0 and 0 < dropped < offered, stuck
    assert "non-loopback connections refused: 0" in out
