"""Smoke test of benchmarks/bench_cascade.py: it runs (--quick) and its table shows what the issue asks of it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "bench_cascade.py"


def test_quick_run_prints_the_comparison_and_the_lexical_correlation() -> None:
    """--quick finishes; PPI++ at rho 0 is as wide as LLM-only, at rho 0.8 clearly narrower; lexical row there."""
    done = subprocess.run([sys.executable, str(BENCH), "--quick"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    ratios = {m.group(1): float(m.group(2))
              for m in re.finditer(r"^\| (LLM only|cascade, rho [0-9.]+) \| [0-9.]+ \| ([0-9.]+) \|", out, re.M)}
    assert set(ratios) == {"LLM only", "cascade, rho 0.0", "cascade, rho 0.5", "cascade, rho 0.8"}, out
    assert ratios["cascade, rho 0.0"] <= 1.02  # PPI++: no loss where the judges do not correlate
    assert ratios["cascade, rho 0.8"] < 0.8 < ratios["cascade, rho 0.0"]
    assert re.search(r"^\| lexical_en\.jsonl \| 48 \| [0-9.]+ \|", out, re.M), out
