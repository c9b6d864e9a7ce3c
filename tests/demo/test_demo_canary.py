"""The demo's canary: v2 (a worse chunking) is labelled by the segment, judged against v1, and the verdict printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from cp_observe.demo._cli import _variant


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run([sys.executable, "-m", "cp_observe.cli", "demo", "--quiet", *args], capture_output=True,
                          text=True, timeout=120, env=env, check=False)


def test_default_run_prints_map_by_variant_and_the_canary_verdict() -> None:
    """Both variants scored from the evaluation spans' segment; v2 is worse, by too few evaluations for the scan."""
    out = _run()
    assert out.returncode == 0, out.stderr
    maps = dict(re.findall(r"^  (v[12]): MAP ([0-9.]+) ± [0-9.]+ \(99%\) over 28 scored$", out.stdout, re.M))
    assert set(maps) == {"v1", "v2"} and float(maps["v2"]) < float(maps["v1"])
    # 28 evaluations a side show a gap of ~0.3 at z below the family's 4.8: the rules would stay quiet, and the line
    # says how many evaluations at this gap would fire them (the demo's Python is exactly the rules' arithmetic).
    line = re.search(r"ContextPrecisionVariantRegression quiet for retriever\.version=v2 \(stage retrieval\): rest "
                     r"MAP 1\.00, gap (0\.\d\d) ± 0\.\d\d \(95%\), z ([0-9.]+) vs 4\.8 \(at this gap, about (\d+) "
                     r"scored evaluations of v2 would fire it\)", out.stdout)
    assert line, out.stdout
    assert float(line[1]) > 0.1 and float(line[2]) < 4.8 and 28 < int(line[3]) < 1000
    assert "ContextPrecisionVariantRegression quiet for retriever.version=v1 (stage retrieval)" in out.stdout
    assert "before degradation: 1.00 over 28 turns" in out.stdout  # the degradation is judged on v1


def test_rerank_evaluations_carry_the_variant_of_the_retrieval_they_rerank() -> None:
    """The variant is set on the retrieval span only: each rerank line and the rerank stage's MAP name v1 or v2."""
    out = _run("--canary-share", "0.5")
    assert out.returncode == 0, out.stderr
    stage = out.stdout.split("MAP by retriever.version, stage rerank:\n", 1)[1].split("\n  before", 1)[0]
    assert set(re.findall(r"^  (\w+): MAP", stage, re.M)) == {"v1", "v2"}
    verbose = subprocess.run([sys.executable, "-m", "cp_observe.cli", "demo"], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, check=False)
    variants = re.findall(r"^        rerank: .*, retriever\.version=(\w+)$", verbose.stdout, re.M)
    assert variants and set(variants) <= {"v1", "v2"}, verbose.stdout[-2000:]
    assert "retriever.version=none" not in verbose.stdout


def test_no_canary_without_a_share() -> None:
    """--canary-share 0 runs the demo as before: no canary lines, every question once before degrading."""
    out = _run("--canary-share", "0")
    assert out.returncode == 0, out.stderr
    assert "ContextPrecisionVariantRegression" not in out.stdout
    assert "after 28 turns: the retriever is degraded" in out.stdout


def test_each_question_meets_both_variants_over_two_passes() -> None:
    """Half the turns go to v2, and over two passes each question is asked of v1 once and v2 once."""
    questions = 28
    seen = {(t % questions, _variant(t, questions, 0.5)) for t in range(2 * questions)}
    assert seen == {(q, v) for q in range(questions) for v in ("v1", "v2")}
    assert [_variant(t, 5, 0.0) for t in range(5)] == ["v1"] * 5
    assert [_variant(t, 5, 1.0) for t in range(5)] == ["v2"] * 5
