"""``cp-observe deploy write``: it writes exactly the repository's deploy/ and collectors/, and never clobbers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cp_observe import cli
from cp_observe.deploy import AssetsExistError, asset_files, write_assets

REPO = Path(__file__).resolve().parents[2]


def _tracked() -> dict[str, bytes]:
    listed = subprocess.run(["git", "ls-files", "-z", "deploy", "collectors"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    return {path: (REPO / path).read_bytes() for path in listed if path}


def _tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_what_is_written_equals_the_repositorys_files(tmp_path: Path) -> None:
    """Every tracked file of deploy/ and collectors/ is written byte for byte, and nothing else."""
    tracked = _tracked()
    assert "deploy/prometheus/rules/context_precision.rules.yml" in tracked
    assert "deploy/prometheus/rules/context_precision_detection.rules.yml" in tracked
    assert "deploy/prometheus/tests/context_precision_detection.test.yml" in tracked
    assert "collectors/gateway.yaml" in tracked
    assert cli.main(["deploy", "write", str(tmp_path / "out")]) == 0
    assert _tree(tmp_path / "out") == tracked
    assert asset_files() == tracked


def test_an_existing_file_is_refused_and_nothing_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --force, the first existing file is named, the exit code is 1, and no file changes."""
    rules = tmp_path / "deploy" / "prometheus" / "rules" / "context_precision.rules.yml"
    rules.parent.mkdir(parents=True)
    rules.write_text("mine", encoding="utf-8")
    assert cli.main(["deploy", "write", str(tmp_path)]) == 1
    assert str(rules) in capsys.readouterr().err
    assert rules.read_text(encoding="utf-8") == "mine"
    assert _tree(tmp_path) == {"deploy/prometheus/rules/context_precision.rules.yml": b"mine"}
    with pytest.raises(AssetsExistError, match=r"context_precision\.rules\.yml exists"):
        write_assets(tmp_path)


def test_force_overwrites(tmp_path: Path) -> None:
    """With --force, existing files are replaced by the shipped ones."""
    dashboard = tmp_path / "deploy" / "grafana" / "dashboards" / "context-precision.json"
    dashboard.parent.mkdir(parents=True)
    dashboard.write_text("{}", encoding="utf-8")
    assert cli.main(["deploy", "write", "--force", str(tmp_path)]) == 0
    shipped = REPO / "deploy" / "grafana" / "dashboards" / "context-precision.json"
    assert dashboard.read_bytes() == shipped.read_bytes()


def test_write_needs_a_directory(capsys: pytest.CaptureFixture[str]) -> None:
    """`deploy` without an action, or `write` without DIR, is a usage error (exit code 2)."""
    for argv in (["deploy"], ["deploy", "write"]):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(argv)
        assert exit_info.value.code == 2
    assert "DIR" in capsys.readouterr().err
