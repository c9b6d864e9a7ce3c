"""Smoke test of benchmarks/judge_trust/bench_cascade.py: it runs (--quick) and its table shows what it claims."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # a whole script in a child process: not the quick unit tier

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "judge_trust" / "bench_cascade.py"


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


def test_real_model_table_from_a_recorded_run(tmp_path: Path) -> None:
    """bench_cascade_real_model.py --from prints the table without the model; a failed case is counted, not scored.

    Four recorded cases: the model judged three (one agreeing with lexical everywhere) and failed one, which must
    show as 1 in "model failed" and be left out of the paired figures, not counted as AP 0.
    """
    cases = [
        {"labels": [True, False], "lexical": [True, False], "model": [True, False]},
        {"labels": [False, True], "lexical": [False, True], "model": [True, True]},
        {"labels": [False, False], "lexical": [False, True], "model": [False, False]},
        {"labels": [True, True], "lexical": [True, True], "model": None},
    ]
    recorded = tmp_path / "run.jsonl"
    recorded.write_text("".join(json.dumps({"file": "lexical_xx.jsonl", "id": f"xx-{i}", "seconds": 10.0, "calls": 2,
                                            **case}) + "\n" for i, case in enumerate(cases)), encoding="utf-8")
    script = REPO / "benchmarks" / "judge_trust" / "bench_cascade_real_model.py"
    done = subprocess.run([sys.executable, str(script), "--from", str(recorded)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    cells = [c.strip() for c in re.search(r"^\| lexical_xx\.jsonl \|(.*)\|$", done.stdout, re.M)[1].split("|")]
    assert cells[:2] == ["4", "1"], done.stdout  # cases, model failed
    # Paired over the three judged cases: lexical AP (1, 0.5, 0.5) vs model AP (1, 1, 0): Pearson 0.50 by hand.
    assert cells[2] == "0.50", done.stdout
    assert cells[3] == "66.7%", done.stdout  # 4 of 6 contexts agree
    assert cells[8] == "0.667", done.stdout  # model MAP over the judged cases: (1 + 1 + 0) / 3
    assert cells[11] == "0.7 min, 8 calls", done.stdout
    assert cells[12] == "50% / 50% / 33%", done.stdout  # relevant shares over the six judged contexts
