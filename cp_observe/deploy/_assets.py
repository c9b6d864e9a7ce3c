"""Where the shipped deploy assets are, and writing them to a directory without clobbering anything.

The assets are two trees, ``deploy/`` and ``collectors/``, written side by side because the compose files mount
``../collectors/*.yaml``. Package data first (a wheel's ``cp_observe/_assets/``), else the source checkout this
package was imported from (the repository root holding ``pyproject.toml``), so an editable install and a
wheel write the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from cp_observe._errors import AssetsExistError, CpObserveError

if TYPE_CHECKING:
    from importlib.abc import Traversable  # importlib.resources.abc from 3.11 on

__all__ = ["TREES", "AssetsExistError", "asset_files", "asset_root", "write_assets"]

#: The directories shipped, relative to the repository root (and to ``cp_observe/_assets/`` in a wheel).
TREES = ("deploy", "collectors")
_SKIPPED = ("__pycache__",)


def asset_root() -> Traversable:
    """The directory holding ``deploy/`` and ``collectors/``: package data, else the source checkout.

    Raises:
        CpObserveError: neither is there (a broken installation).
    """
    packaged = resources.files("cp_observe") / "_assets"
    if all((packaged / tree).is_dir() for tree in TREES):
        return packaged
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and all((checkout / tree).is_dir() for tree in TREES):
        return checkout
    raise CpObserveError(f"no deploy assets: neither {packaged} nor a source checkout at {checkout} has {TREES}")


def _walk(node: Traversable, prefix: str) -> Iterator[tuple[str, Traversable]]:
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.name.startswith(".") or child.name in _SKIPPED:
            continue
        path = f"{prefix}/{child.name}"
        if child.is_dir():
            yield from _walk(child, path)
        else:
            yield path, child


def asset_files() -> dict[str, bytes]:
    """Every shipped file by its relative POSIX path (``deploy/prometheus/rules/...``), in sorted order."""
    root = asset_root()
    return {path: node.read_bytes() for tree in TREES for path, node in _walk(root / tree, tree)}


def write_assets(directory: str | Path, *, force: bool = False) -> list[Path]:
    """Write every asset under ``directory`` (created if missing); returns the paths written, in order.

    Nothing is written when a file exists and ``force`` is false: the check covers every file first.

    Raises:
        AssetsExistError: a target file exists and ``force`` is false; the message names the first one.
    """
    target = Path(directory)
    files = asset_files()
    if not force:
        for relative in files:
            if (target / relative).exists():
                raise AssetsExistError(f"{target / relative} exists; pass --force to overwrite the deploy assets")
    written = []
    for relative, data in files.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written
