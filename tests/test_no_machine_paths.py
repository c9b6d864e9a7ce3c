"""No tracked text file names a path of the machine it was written on.

A command that ``cd``s into a developer's checkout, or a figure quoted with a home directory in it, works on
one machine only and leaks its layout. Repository-wide like ``test_architecture.py``, so it sits beside it
rather than in a per-package folder. What counts as a machine path:

- this checkout's own absolute path, its parent (unless that is a shared directory every machine has: the
  system's temp directory or another directory directly under the root, such as ``/tmp`` or ``/srv``; these
  name no developer's layout, and counting them would flag every scratch path under them), and the home
  directory of whoever runs the tests;
- the usual homes of a developer: ``/home/<user>/``, ``/Users/<user>/``, ``/root/``, ``C:\\Users\\``;
- the worktree root of the machine this project is developed on (``/work/``) and its local package mirrors
  (``/opt/pypi``, ``/opt/wheels``);
- a ``/tmp/`` path that names a checkout: one with a component named like a top-level entry of this repository
  (``/tmp/x/cp_observe/...``, ``/tmp/src/tests/``), or ``cp-observe``/``cp_observe`` in it, or pytest's own
  ``/tmp/pytest-of-<user>`` (a pasted traceback).

Paths that belong to the software being configured, not to a developer, are not matched at all: the container
and Kubernetes paths (``/var/lib/cp-observe``, ``/etc/otelcol-contrib``, ``/run/secrets``), the Debian binaries
(``/usr/bin/chromium``, ``/usr/bin/promtool``) and scratch directories a command is told to use
(``--target /tmp/uvicorn-cmp``). The allow-list below is for the few lines that must spell a pattern.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_STATIC = re.compile(
    r"(?<![\w.~-])(?:/work/|/home/[A-Za-z0-9_.-]+/|/Users/[A-Za-z0-9_.-]+/|/root/|/opt/pypi|/opt/wheels"
    r"|[A-Za-z]:\\Users\\)"
)
_TMP = re.compile(r"(?<![\w.~-])/tmp/[^\s`'\")\]]+")

#: (file, a substring of the line) that may name such a path, and why.
ALLOWED: dict[tuple[str, str], str] = {
    # This file spells every pattern it looks for.
    ("tests/test_no_machine_paths.py", ""): "the patterns themselves",
}


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    files = []
    for name in listed.decode().split("\0"):
        path = REPO / name
        if not name or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary (the screenshots)
        files.append(path)
    return files


def _checkout_names() -> set[str]:
    return {p.name for p in REPO.iterdir() if not p.name.startswith(".")} | {"cp-observe", "cp_observe"}


def machine_paths(text: str, *, here: Path = REPO, home: Path | None = None) -> list[str]:
    """The machine paths ``text`` names (empty when it names none)."""
    found = [m.group(0) for m in _STATIC.finditer(text)]
    names = _checkout_names()
    for match in _TMP.finditer(text):
        parts = set(match.group(0).split("/"))
        if parts & names or "pytest-of-" in match.group(0):
            found.append(match.group(0))
    home = Path.home() if home is None else home
    locals_ = [str(here), str(home) + "/"]
    if not _shared(here.parent):
        locals_.append(str(here.parent))
    for local in locals_:
        if len(local) > 2 and local in text:  # never "/" (a root home or checkout would match everything)
            found.append(local)
    return found


def _shared(directory: Path) -> bool:
    """Whether ``directory`` is one every machine has (the temp directory, or directly under the root)."""
    temp = Path(tempfile.gettempdir()).resolve()
    return directory.resolve() == temp or directory.parent == directory.parent.parent


def _allowed(relative: str, line: str) -> bool:
    return any(relative == f and part in line for f, part in ALLOWED)


def test_no_tracked_file_names_a_machine_path() -> None:
    """git ls-files' text files name no developer's absolute path; each hit shows file, line and path."""
    files = _tracked_text_files()
    assert len(files) > 100  # the check read the tree
    hits = []
    for path in files:
        relative = path.relative_to(REPO).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not _allowed(relative, line) and (paths := machine_paths(line)):
                hits.append(f"{relative}:{number}: {', '.join(paths)}")
    assert not hits, "machine paths (say 'from the repository root' instead):\n" + "\n".join(hits)


@pytest.mark.parametrize(
    "line",
    [
        "cd /work/rag-service-checkout      # the repository root",
        "python /home/alice/src/cp-observe/benchmarks/serve/bench_serve.py",
        "open /Users/bob/cp-observe/report.html",
        "see /root/.cache/cp-observe/wheels",
        r"C:\Users\carol\cp-observe",
        "pip install -e /tmp/checkout/cp_observe",
        "File /tmp/pytest-of-dev/pytest-3/test_x0/out.json",
        "PIP_FIND_LINKS=/opt/wheels/team-mirror",
    ],
)
def test_a_machine_path_is_found(line: str) -> None:
    """Each kind of developer path is caught (so the check above can fail)."""
    assert machine_paths(line, home=Path("/nonexistent-home"))


def test_the_checkout_and_home_are_found(tmp_path: Path) -> None:
    """Wherever the checkout and the home directory are, a line naming them is caught."""
    checkout = tmp_path / "src" / "project"
    assert machine_paths(f"cd {checkout}", here=checkout, home=Path("/nonexistent-home"))
    assert machine_paths("cat /srv/dev42/notes.txt", home=Path("/srv/dev42"))


@pytest.mark.parametrize(
    "line",
    [
        "mountPath: /var/lib/cp-observe",
        "CHROMIUM = '/usr/bin/chromium'",
        "- ../collectors/agent.yaml:/etc/otelcol-contrib/agent.yaml:ro",
        "CP_OBSERVE_AUTH_TOKEN_FILE=/run/secrets/scorer-token",
        ".venv/bin/pip install --target /tmp/uvicorn-cmp uvicorn httptools",
        "caches the wheel in ~/.cache/cp-observe/wheels",
        "from the repository root: cd cp-observe",
    ],
)
def test_paths_of_the_deployed_software_are_not_machine_paths(line: str) -> None:
    """Container, Kubernetes, Debian and scratch paths are not a developer's machine."""
    assert machine_paths(line, home=Path("/nonexistent-home")) == []


def test_the_checkout_and_home_are_found_under_a_deeper_parent() -> None:
    """A checkout directly under the temp directory still finds itself, but not the temp directory."""
    checkout = Path(tempfile.gettempdir()) / "project"
    home = Path("/nonexistent-home")
    assert machine_paths(f"cd {checkout}/tests", here=checkout, home=home)
    scratch = f"pip install --target {Path(tempfile.gettempdir()) / 'uvicorn-cmp'} uvicorn"
    assert machine_paths(scratch, here=checkout, home=home) == []


def test_a_clone_directly_under_the_temp_directory_passes() -> None:
    """A fresh clone at ``<temp>/<name>`` passes the tree check above (the checkout's parent is no machine path)."""
    clone = Path(tempfile.mkdtemp(prefix="cpo-clone-"))  # directly under the temp directory, as a new user's
    try:
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, capture_output=True)
        assert clone.parent == Path(tempfile.gettempdir())
        shutil.copyfile(__file__, clone / "tests" / Path(__file__).name)  # the check as in this tree, if uncommitted
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "tests/test_no_machine_paths.py::test_no_tracked_file_names_a_machine_path"],
            cwd=clone, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
        assert "1 passed" in run.stdout
    finally:
        shutil.rmtree(clone, ignore_errors=True)
