"""benchmarks/judging/bench_prompt_agreement.py --from: the table's arithmetic on a recorded run, without the model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # a whole script in a child process: not the quick unit tier

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "judging" / "bench_prompt_agreement.py"

SPACED = '{"verdicts": [{"context_index": 0, "verdict": "yes", "reason": "About the plans."}]}'
COMPACT = '{"verdicts":[{"context_index":0,"verdict":"yes"}]}'


def _record(question: str, setting: str, labels: list[bool], verdicts: list[bool] | None, tokens: list[int],
            replies: list[str]) -> dict[str, object]:
    return {"corpus": "demo", "question": question, "setting": setting, "labels": labels, "verdicts": verdicts,
            "error": None if verdicts else "JudgeParseError: no JSON", "seconds": 4.0, "calls": len(replies),
            "tokens": tokens, "replies": replies}


def test_recorded_run_gives_agreement_kappa_accuracy_and_the_compact_share(tmp_path: Path) -> None:
    """Agreement and kappa against cp-3/all, failures left out of the pairs, a 2nd call counted, compactness read."""
    one, two = [True, False, False], [False, True]
    records = [
        _record("q1", "cp-3/all", one, [True, True, False], [60], ['{\n  "verdicts": []\n}']),
        _record("q2", "cp-3/all", two, [True, True], [50], [SPACED]),
        _record("q1", "cp-4/all", one, [True, False, False], [30], [COMPACT]),
        _record("q2", "cp-4/all", two, [True, True], [30, 20], [COMPACT, COMPACT]),
        _record("q1", "cp-4/none", one, None, [10, 10], ["not json", "still not"]),
        _record("q2", "cp-4/none", two, [False, True], [16], [COMPACT]),
    ]
    recorded = tmp_path / "run.jsonl"
    recorded.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    done = subprocess.run([sys.executable, str(BENCH), "--from", str(recorded)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    rows = {m[1]: [c.strip() for c in m[2].split("|")]
            for m in re.finditer(r"^\| demo \| ([^|]+?) \|(.*)\|$", done.stdout, re.M)}
    assert set(rows) == {"cp-3/all", "cp-4/all", "cp-4/none"}, done.stdout
    # Columns: judged, 2nd call, calls, equal to cp-3/all, kappa, share yes, accuracy, tokens, one line, compact.
    reference = rows["cp-3/all"][:10]
    assert reference == ["2/2", "0%", "1.0", "100%", "1.00", "80%", "60%", "55", "50%", "0%"], done.stdout
    # 4 of 5 verdicts equal; kappa (0.8 - 0.56) / 0.44 by hand; against the labels 4 of 5.
    cp4 = rows["cp-4/all"][:10]
    assert cp4 == ["2/2", "50%", "1.5", "80%", "0.55", "60%", "80%", "40", "100%", "100%"], done.stdout
    # The failed q1 is out of every paired figure; its calls and tokens still count.
    bare = rows["cp-4/none"][:10]
    assert bare == ["1/2", "50%", "1.5", "50%", "0.00", "50%", "100%", "18", "100%", "50%"], done.stdout
    # Whitespace outside strings in the first replies: 5 and 6 for cp-3 (newlines count), none when compact.
    assert (reference_spaces := rows["cp-3/all"][10]) == "5.5", reference_spaces
    assert rows["cp-4/all"][10] == "0.0", done.stdout
    assert "demo: 2 evaluations, 5 contexts, labelled yes 40%" in done.stdout
