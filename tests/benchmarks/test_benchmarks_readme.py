"""``benchmarks/README.md`` is the index of claims: every script is in it, and every script it names exists."""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SUBJECTS = ("request_path", "judging", "serve", "alerts", "judge_trust", "budget")


def _named() -> set[str]:
    return set(re.findall(r"`((?:" + "|".join(SUBJECTS) + r")/\w+\.py)", (BENCHMARKS / "README.md").read_text()))


def test_every_script_has_a_claim_in_the_index() -> None:
    """Each script of a subject folder is named in the README's claims, so none measures a claim nobody reads."""
    scripts = {str(p.relative_to(BENCHMARKS)) for p in BENCHMARKS.glob("*/*.py")}
    assert scripts, "no benchmark scripts found"
    assert scripts <= _named(), sorted(scripts - _named())


def test_every_script_the_index_names_exists() -> None:
    """A script named in the README exists at that path (the folders are the subjects: nothing else holds scripts)."""
    assert not [name for name in _named() if not (BENCHMARKS / name).is_file()]
    assert {p.parent.name for p in BENCHMARKS.glob("*/*.py")} <= set(SUBJECTS)
    assert not list(BENCHMARKS.glob("bench_*.py")), "a script outside the subject folders"
