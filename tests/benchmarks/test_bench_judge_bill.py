"""``bench_judge_bill.py`` prices what it counts: a hand computation, the table's n/a, and a quick run's tables."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "judging" / "bench_judge_bill.py"


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    """benchmarks/judging/bench_judge_bill.py imported as a module (it is a script, not a package)."""
    sys.path.insert(0, str(BENCH.parents[1]))
    try:
        spec = importlib.util.spec_from_file_location("bench_judge_bill", BENCH)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("bench_judge_bill", None)
        sys.path.remove(str(BENCH.parents[1]))


def test_dollars_by_hand(bench: ModuleType) -> None:
    """One call's cost in each tier and with a cached prefix, against the arithmetic written out."""
    entry = {"input_cost_per_token": 1e-6, "output_cost_per_token": 4e-6, "input_cost_per_token_flex": 5e-7,
             "output_cost_per_token_flex": 2e-6, "cache_read_input_token_cost": 1e-7}
    call = bench.Call(prompt=1500, system=200, output=100)
    plain = bench.Mode("plain")
    assert bench.dollars("m", entry, plain, [call], hit_rate=0.9, reasoning_tokens=0) == pytest.approx(1500e-6 + 400e-6)
    flex = bench.Mode("flex", tier="flex")
    assert bench.dollars("m", entry, flex, [call], hit_rate=0.9, reasoning_tokens=0) == pytest.approx(750e-6 + 200e-6)
    assert bench.dollars("m", entry, bench.Mode("batch", tier="batches"), [call], hit_rate=0.9,
                         reasoning_tokens=0) is None  # no batch price in the entry: n/a
    cached = bench.Mode("cached", cached=True)
    expected = 1300e-6 + 1024 * (0.9 * 1e-7 + 0.1 * 1e-6) + 400e-6  # the prefix grown to 1,024 tokens
    assert bench.dollars("m", entry, cached, [call], hit_rate=0.9, reasoning_tokens=0) == pytest.approx(expected)


def test_a_verdict_reply_has_reasons_as_asked(bench: ModuleType) -> None:
    """all: a reason on each; no: only on 'no' (empty on 'yes'); none: no reason key."""
    assert bench.reply([True, False], "all").count('"reason": ""') == 0
    assert bench.reply([True, False], "no").count('"reason": ""') == 1
    assert '"reason"' not in bench.reply([True, False], "none")


@pytest.mark.parametrize("reasons", ["all", "no", "none"])
def test_the_cp4_reply_is_what_cp4_asks_for(bench: ModuleType, reasons: str) -> None:
    """cp-4's modelled reply: compact JSON on one line, every reason within the six words the prompt allows.

    The cp-4 prompt asks for exactly this; the reasons are at the cap (five or six words), not below it.
    """
    from cp_observe._judging._prompt import system_message

    asked = system_message(reasons, version="cp-4")
    text = bench.reply([True, False, False, True, False], reasons, version="cp-4")
    assert "\n" not in text and '": ' not in text and '", "' not in text and "}, {" not in text
    words = [len(v["reason"].split()) for v in json.loads(text)["verdicts"] if v.get("reason")]
    assert ("six words" in asked) == bool(words)
    assert all(5 <= n <= 6 for n in words)
    spaced = bench.reply([True, False], reasons, version="cp-4", spaced=True)
    assert json.loads(spaced) == json.loads(bench.reply([True, False], reasons, version="cp-4"))
    assert len(spaced) > len(bench.reply([True, False], reasons, version="cp-4"))


def test_a_quick_run_prints_both_corpora() -> None:
    """Both tables, every model, n/a where the table has no flex price, and the live target's lines.

    In a child process: the script refuses non-loopback connections process-wide and sets offline variables.
    """
    done = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "### Demo corpus" in out and "### Long contexts" in out
    flex_row = next(line for line in out.splitlines() if line.startswith("| flex |"))
    assert flex_row.split("|")[2].strip() == "n/a"  # gpt-4o-mini has no flex price in litellm's table
    assert out.count("live target on gpt-5-mini") == 8
    assert "non-loopback connections refused: 0" in out
