"""The built wheel, installed alone in a fresh venv, runs the README's quick start and writes deploy assets.

This is what a ``pip install cp-observe`` user gets: the wheel is built from this checkout (hatchling, with
``deploy/`` and ``collectors/`` force-included as ``cp_observe/_assets/``), installed with its dependencies into
a new venv that cannot see the checkout. The README's quick start runs there as written and prints its score, and
the installed ``cp-observe deploy write`` output is checked by promtool (``check config``, ``check rules``, ``test
rules``) and compared with the repository's files.

The dependencies (and the build backend) come from ``.cache/wheelhouse``, which ``scripts/install-wheelhouse.sh``
fills at set-up with the wheels of the versions the test venv holds: the test runs pip with ``--no-index``, so it
touches no network. ``CP_OBSERVE_SKIP_WHEEL=1`` skips it (and the set-up step); without the wheelhouse it skips,
saying how to build it, unless ``CP_OBSERVE_REQUIRE_WHEEL=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy_support import ALERT_NAMES, needs_promtool, run_promtool
from tests.readme_support import quickstart_blocks, run_quickstart

REPO = Path(__file__).resolve().parents[2]
HOUSE = REPO / ".cache" / "wheelhouse"
_NO_HOUSE = not any(HOUSE.glob("*.whl"))
if _NO_HOUSE and os.environ.get("CP_OBSERVE_REQUIRE_WHEEL"):
    raise RuntimeError(f"{HOUSE} has no wheels: run scripts/install-wheelhouse.sh")

pytestmark = [
    *needs_promtool,
    pytest.mark.timeout(900),  # the wheel and ~80 wheels into a fresh venv (~75 s), then every promtool scenario (~200 s)
    pytest.mark.skipif(bool(os.environ.get("CP_OBSERVE_SKIP_WHEEL")), reason="CP_OBSERVE_SKIP_WHEEL is set"),
    pytest.mark.skipif(_NO_HOUSE, reason=f"no wheels in {HOUSE}: run scripts/install-wheelhouse.sh"),
]


def _run(*argv: str | Path, cwd: Path | None = None, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only the wheel built from this checkout and its dependencies; its bin directory."""
    work = tmp_path_factory.mktemp("wheel")
    offline = ("--no-index", "--find-links", HOUSE)  # the wheelhouse only: no network in a test
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *offline, REPO, "-w", work / "dist")
    (wheel,) = (work / "dist").glob("cp_observe-*.whl")
    _run(sys.executable, "-m", "venv", work / "venv")  # no --system-site-packages: it sees nothing of .venv
    bin_dir = work / "venv" / "bin"
    _run(bin_dir / "python", "-m", "pip", "install", "-q", *offline, "-c", HOUSE / "constraints.txt", wheel)
    return bin_dir


def test_the_installed_package_is_the_wheel_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    """The venv imports cp_observe from its own site-packages, where the assets are package data."""
    where = _run(installed / "python", "-c",
                 "import cp_observe, importlib.resources as r; print(cp_observe.__file__); "
                 "print((r.files('cp_observe') / '_assets' / 'deploy').is_dir())", cwd=tmp_path)
    module, packaged = where.split()
    assert Path(module).is_relative_to(installed.parent) and not Path(module).is_relative_to(REPO)
    assert packaged == "True"


def test_the_readme_quick_start_runs_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    """The README's quick start, as written, in the wheel's venv: the answer, then the score on the console."""
    run = run_quickstart(installed, tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("Paris is the capital of France.\n")
    output = run.stdout.splitlines()
    assert all(line in output for line in quickstart_blocks()["output"].splitlines()), run.stdout[-3000:]


def test_deploy_write_from_the_wheel_passes_promtool(installed: Path, tmp_path: Path) -> None:
    """deploy write from the wheel gives the repository's files, and promtool checks and tests the rules."""
    out = tmp_path / "assets"
    _run(installed / "cp-observe", "deploy", "write", out, cwd=tmp_path)
    tracked = _run("git", "ls-files", "deploy", "collectors", cwd=REPO).split()
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == sorted(tracked)
    assert all((out / p).read_bytes() == (REPO / p).read_bytes() for p in tracked)

    prometheus = out / "deploy" / "prometheus"
    rule_files = sorted((prometheus / "rules").glob("*.rules.yml"))
    checked = run_promtool("check", "config", "prometheus.yml", cwd=prometheus)
    found = f"{len(rule_files)} rule files found"
    assert checked.returncode == 0 and found in checked.stdout + checked.stderr, checked.stdout + checked.stderr
    rules = run_promtool("check", "rules", *map(str, rule_files))
    assert rules.returncode == 0 and "SUCCESS" in rules.stdout, rules.stderr
    scenarios = sorted((prometheus / "tests").glob("*.test.yml"))
    assert scenarios
    for scenario in scenarios:
        tested = run_promtool("test", "rules", scenario.name, cwd=scenario.parent)
        assert tested.returncode == 0 and "SUCCESS" in tested.stdout + tested.stderr, tested.stdout + tested.stderr
    text = (prometheus / "rules" / "context_precision.rules.yml").read_text(encoding="utf-8")
    assert all(name in text for name in ALERT_NAMES)


@pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool not installed (Debian's prometheus-alertmanager)")
def test_the_written_alertmanager_route_passes_amtool(installed: Path, tmp_path: Path) -> None:
    """amtool check-config accepts the Alertmanager route the wheel writes."""
    _run(installed / "cp-observe", "deploy", "write", tmp_path, cwd=tmp_path)
    _run(shutil.which("amtool") or "amtool", "check-config", tmp_path / "deploy" / "alertmanager" / "alertmanager.yml")


def test_a_second_write_is_refused(installed: Path, tmp_path: Path) -> None:
    """The installed command refuses to overwrite: exit code 1, the first existing file named on stderr."""
    _run(installed / "cp-observe", "deploy", "write", tmp_path, cwd=tmp_path)
    proc = subprocess.run([str(installed / "cp-observe"), "deploy", "write", str(tmp_path)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 1
    assert "exists; pass --force" in proc.stderr and str(tmp_path / "deploy") in proc.stderr
