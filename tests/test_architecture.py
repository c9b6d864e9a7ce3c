"""ARCHITECTURE.md matches the code: the modules it names exist and the imports it allows are the only ones."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cp_observe"
DOC = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
ANY = "any package"


def _modules() -> dict[str, Path]:
    """Every module of cp_observe by dotted name (a package by its ``__init__``)."""
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> Iterator[str]:
    """Each cp_observe module ``path`` imports anywhere (top level, in functions, under TYPE_CHECKING)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.split(".")[0] == "cp_observe")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "cp_observe":
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield sub if sub in MODULES else node.module


def _unit(module: str) -> str:
    """The package or root module ``module`` belongs to, as ARCHITECTURE.md names it."""
    parts = module.split(".")
    if len(parts) == 1:
        return "cp_observe"
    return parts[1]


def _table_rows(heading: str) -> list[list[str]]:
    section = DOC.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:]]


def _ticked(cell: str) -> list[str]:
    return [name.rstrip("/").removesuffix(".py") for name in re.findall(r"`([^`]+)`", cell)]


def _rules() -> tuple[set[str], dict[str, set[str] | str]]:
    vocabulary: set[str] = set()
    allowed: dict[str, set[str] | str] = {}
    for first, _job, may in _table_rows("Packages, their job, and the imports each may make"):
        units = _ticked(first)
        if first.startswith("root"):
            vocabulary.update(units)
            continue
        for unit in units:
            allowed["cp_observe" if unit == "__init__" else unit] = ANY if may == ANY else set(_ticked(may))
    return vocabulary, allowed


VOCABULARY, ALLOWED = _rules()


def test_the_rules_were_read() -> None:
    """The package table parses into the root vocabulary and a rule for every subpackage."""
    assert {"_names", "_errors", "_types"} <= VOCABULARY
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert subpackages <= set(ALLOWED), f"packages without a row: {sorted(subpackages - set(ALLOWED))}"


def test_every_named_module_exists() -> None:
    """Every path ARCHITECTURE.md names, in a table or in the drawing, is in the tree."""
    named = set(re.findall(r"(?<![\w/.])((?:[\w]+/)*_?[\w]+(?:\.py|/))(?![\w])", DOC))
    assert len(named) > 30
    missing = []
    for name in sorted(named):
        base = ROOT if name.startswith(("tests/", "cp_observe/", "benchmarks/", "scripts/")) else PACKAGE
        if not (base / name).exists():
            missing.append(name)
    assert not missing, f"ARCHITECTURE.md names modules that do not exist: {missing}"


def test_the_root_holds_only_the_public_api_and_the_vocabulary() -> None:
    """Top-level modules are the public API (``__init__``, ``cli``) and the vocabulary the table lists."""
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top == {"__init__", "cli"} | VOCABULARY


def _violations() -> Iterator[str]:
    for module, path in MODULES.items():
        source = _unit(module)
        rule = ALLOWED.get(source, set()) if source not in VOCABULARY else VOCABULARY
        for target in _imports(path):
            unit = _unit(target)
            if unit == source or rule == ANY:
                continue
            if unit not in VOCABULARY and (source in VOCABULARY or unit not in rule):
                yield f"{module} imports {target}"


def test_imports_follow_the_table() -> None:
    """No module imports a package its own package may not import (ARCHITECTURE.md's table)."""
    assert not list(_violations())


def test_a_forbidden_import_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check fails when capture is not allowed what it imports (the check can fail)."""
    monkeypatch.setitem(ALLOWED, "_capture", set())
    assert any(v.startswith("cp_observe._capture.") for v in _violations())


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in ``graph``, or None."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in colour and (found := visit(nxt)):
                return found
        stack.pop()
        colour[node] = 2
        return None

    for node in sorted(graph):
        if node not in colour and (found := visit(node)):
            return found
    return None


def _module_graph() -> dict[str, set[str]]:
    return {module: {t for t in _imports(path) if t != module} for module, path in MODULES.items()}


def test_no_import_cycle_between_modules() -> None:
    """No chain of imports, lazy or for type checking, leads a module back to itself."""
    assert _cycle(_module_graph()) is None


def test_no_import_cycle_between_packages() -> None:
    """The packages form a layered graph: no package imports one that imports it back."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        source = _unit(module)
        if source == "cp_observe":
            continue  # the public API re-exports everything by design
        graph.setdefault(source, set()).update(u for t in _imports(path) if (u := _unit(t)) != source)
    assert _cycle(graph) is None


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The cycle check can fail: a two-module loop is reported."""
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
