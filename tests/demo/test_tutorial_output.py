"""The tutorial shows the demo's real output: each marked block is checked against a fresh run of its command.

A block marked ``<!-- demo-output: cp-observe ARGS -->`` must equal that command's output; one marked
``<!-- demo-output: start of: cp-observe ARGS -->`` must be its first lines. The list of commands the tutorial
names must be the command line's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.docs_support import page

pytestmark = pytest.mark.e2e  # whole programs in child processes: not the quick unit tier

TUTORIAL = page("tutorial.md")
_BLOCK = re.compile(r"^<!-- demo-output: (?P<start>start of: )?cp-observe (?P<args>[^>]*?) -->\n```text\n"
                    r"(?P<body>.*?)^```$", re.M | re.S)
BLOCKS = [(m["args"], bool(m["start"]), m["body"]) for m in _BLOCK.finditer(TUTORIAL)]


def _cli(*args: str) -> str:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env = {k: v for k, v in env.items() if not k.startswith(("OTEL_", "CP_OBSERVE_"))}
    run = subprocess.run([sys.executable, "-m", "cp_observe.cli", *args], capture_output=True, text=True,
                         timeout=180, env=env, check=False)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_the_tutorial_marks_both_demo_outputs() -> None:
    """The tutorial has the per-turn excerpt and the full summary, both marked for this test."""
    assert [(args, start) for args, start, _ in BLOCKS] == [("demo", True), ("demo --quiet", False)]


@pytest.mark.parametrize(("args", "start", "shown"), BLOCKS, ids=[args for args, _, _ in BLOCKS])
def test_the_shown_output_is_the_demo_output(args: str, start: bool, shown: str) -> None:
    """A fresh run of the command prints exactly the lines shown (the first ones, for an excerpt)."""
    out = _cli(*args.split())
    if start:
        assert out.startswith(shown), out[: len(shown) + 200]
    else:
        assert out == shown


def test_the_tutorial_names_every_command() -> None:
    """The sentence listing the commands names exactly the subcommands of cp-observe --help."""
    sentence = TUTORIAL.split("`cp-observe --help` lists the commands: ", 1)[1].split("\n", 1)[0]
    named = re.findall(r"`(\w+)`", sentence)
    usage = _cli("--help")
    choices = re.search(r"\{([\w,]+)\}", usage)
    listed = choices.group(1).split(",") if choices else re.findall(r"^    (\w+)\s", usage, re.M)
    assert sorted(named) == sorted(listed), (named, listed)
