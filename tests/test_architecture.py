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


# A private name (a leading underscore) is the business of its own package, with no exception: what another
# package needs of it is given a name without one (the test kit reads and replaces configure()'s current processor
# through _wiring's current_processor and replace_current_processor).


def _private_imports(modules: dict[str, Path]) -> Iterator[str]:
    """Each ``from <another package's module> import _name`` (``_name`` not itself a module)."""
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.split(".")[0] == "cp_observe"):
                continue
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                private = alias.name.startswith("_") and not alias.name.startswith("__") and name not in MODULES
                if private and _unit(node.module) != _unit(module):
                    yield f"{module} imports {name}"


def test_no_module_imports_another_packages_private_names() -> None:
    """What two packages share is public within its package; a leading underscore stays at home."""
    assert list(_private_imports(MODULES)) == []


def test_a_private_import_is_caught(tmp_path: Path) -> None:
    """The check can fail: replay importing serve's private resource builder is reported."""
    planted = tmp_path / "planted.py"
    planted.write_text("from cp_observe.serve._service import _resource\n", encoding="utf-8")
    assert list(_private_imports({"cp_observe.replay._planted": planted})) == [
        "cp_observe.replay._planted imports cp_observe.serve._service._resource"]


def _command_line_imports(modules: dict[str, Path]) -> Iterator[str]:
    """Imports of a command line (``_cli/``, or a package's ``_cli`` module) from anywhere but ``cli.py``, ``_cli/``
    and the command's own package."""
    for module, path in modules.items():
        if module == "cp_observe.cli" or _unit(module) == "_cli":
            continue
        for target in _imports(path):
            is_cli = _unit(target) == "_cli" or target.rsplit(".", 1)[-1] == "_cli"
            if is_cli and _unit(target) != _unit(module):
                yield f"{module} imports {target}"


def test_no_package_imports_another_packages_command_line() -> None:
    """Command lines are leaves: only ``cli.py`` (and the command's own package) imports them."""
    assert list(_command_line_imports(MODULES)) == []


def test_a_command_line_import_is_caught(tmp_path: Path) -> None:
    """The check can fail: dataset importing replay's input options from the command line is reported."""
    planted = tmp_path / "planted.py"
    planted.write_text("from cp_observe._cli._inputs import add_source_arguments\n", encoding="utf-8")
    assert list(_command_line_imports({"cp_observe.dataset._planted": planted})) == [
        "cp_observe.dataset._planted imports cp_observe._cli._inputs"]


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


# --- the test tree (ARCHITECTURE.md "The test tree") ---------------------------------------------------------

TESTS = ROOT / "tests"


def _test_folders() -> dict[str, set[str]]:
    """Each folder of the test-tree table, by name, with the packages (``_capture`` ...) its row names."""
    folders: dict[str, set[str]] = {}
    for first, exercised in _table_rows("The test tree"):
        (folder,) = re.findall(r"`tests/(\w+)/`", first)
        folders[folder] = {name.rstrip("/") for name in re.findall(r"`(\w+/)`", exercised)}
    return folders


FOLDERS = _test_folders()


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "node_modules" not in p.parts)


def _misplaced(files: list[Path], folders: set[str]) -> list[str]:
    """Test files outside the table's folders (the two tests of the whole repository may stay at the root)."""
    out = []
    for path in files:
        parts = path.relative_to(TESTS).parts
        if parts in (("test_architecture.py",), ("test_no_machine_paths.py",)):
            continue
        if len(parts) < 2 or parts[0] not in folders:
            out.append(str(path.relative_to(ROOT)))
    return out


def test_every_test_file_is_in_a_folder_of_the_table() -> None:
    """No flat tests/test_*.py and no folder the table does not name (the whole-repository tests aside)."""
    files = _test_files()
    assert len(files) > 60
    assert _misplaced(files, set(FOLDERS)) == []


def test_a_flat_test_file_is_caught(tmp_path: Path) -> None:
    """The placement check can fail: a test file at the root of tests/ or in an unknown folder is reported."""
    planted = [TESTS / "test_new_thing.py", TESTS / "misc" / "test_other.py", TESTS / "capture" / "test_fine.py"]
    assert _misplaced(planted, set(FOLDERS)) == ["tests/test_new_thing.py", "tests/misc/test_other.py"]


def test_the_folders_map_to_the_packages() -> None:
    """Every package of the package table has exactly one test folder, and every folder of the table exists."""
    packages = {unit for unit in ALLOWED if unit != "cp_observe" and (PACKAGE / unit).is_dir()}
    assert len(packages) >= 11
    owners: dict[str, list[str]] = {}
    for folder, named in FOLDERS.items():
        assert (TESTS / folder / "__init__.py").is_file(), f"tests/{folder}/ is missing (or its __init__.py)"
        for package in named:
            assert package in packages, f"tests/{folder}/ names {package}/, which is not a package of the table"
            owners.setdefault(package, []).append(folder)
    assert {p: f for p, f in owners.items() if len(f) > 1} == {}, "a package tested in two folders"
    assert packages - set(owners) == set(), "packages without a test folder"
    with_tests = {p.relative_to(TESTS).parts[0] for p in _test_files() if p.parent != TESTS}
    assert with_tests <= set(FOLDERS)


TIERS = ("unit", "e2e", "browser", "slow")


def test_every_collected_test_is_in_a_tier(request: pytest.FixtureRequest) -> None:
    """Each test this session collected carries a tier marker; those under tests/integration are e2e, never unit."""
    items = request.session.items
    assert items
    for item in items:
        tiers = {name for name in TIERS if item.get_closest_marker(name)}
        assert tiers, f"{item.nodeid} has no tier"
        if (TESTS / "integration") in item.path.parents:
            assert "e2e" in tiers and "unit" not in tiers, item.nodeid


def _unmarked_browser_tests(files: list[Path]) -> list[str]:
    """Names of the test modules that start Chromium but never say ``pytest.mark.browser``."""
    return [path.name for path in files
            if re.search(r"chromium_support import|^CHROMIUM = ", text := path.read_text(encoding="utf-8"), re.M)
            and "pytest.mark.browser" not in text]


def test_every_test_that_starts_chromium_is_marked_browser(tmp_path: Path) -> None:
    """A module that renders in headless Chromium marks its tests browser; the check catches one that does not."""
    assert _unmarked_browser_tests(_test_files()) == []
    planted = tmp_path / "test_page.py"
    planted.write_text("from tests.chromium_support import CHROMIUM\n", encoding="utf-8")
    assert _unmarked_browser_tests([planted]) == ["test_page.py"]


def test_the_shared_fixtures_keep_no_private_judge() -> None:
    """tests/conftest.py defines no judge of its own: tests share the shipped FakeJudge (cp_observe_judge)."""
    tree = ast.parse((TESTS / "conftest.py").read_text(encoding="utf-8"))
    judges = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
              and any(isinstance(f, ast.AsyncFunctionDef | ast.FunctionDef) and f.name == "judge" for f in node.body)]
    assert judges == []


def test_every_shared_helper_is_named() -> None:
    """Each helper module at the root of tests/ is in ARCHITECTURE.md's list of helpers shared across folders."""
    helpers = {p.name for p in TESTS.glob("*.py")} - {"__init__.py", "conftest.py", "test_architecture.py",
                                                      "test_no_machine_paths.py"}
    assert len(helpers) > 10
    assert sorted(name for name in helpers if f"`tests/{name}`" not in DOC) == []


# What a test may not write: the process-wide state cp-observe keeps (by the names that hold it), and any private
# attribute of an object that is not the test's own ``self``. Reading is allowed; so is holding a lock, and
# ``monkeypatch`` (undone by pytest) on anything but the process-wide state. cp_observe/testing, the kit that does
# this for tests, is library code and not scanned.
PROCESS_STATE = frozenset({
    "_runtime", "_payloads", "RUNTIME_HOLDER", "RUNTIME", "PAYLOADS", "FORCED", "_sampling", "_CURRENT", "_configure",
    "_LIVE_SAMPLERS", "_SAMPLER_CHANGES",
})
MUTATORS = frozenset({
    "install", "clear", "append", "appendleft", "extend", "insert", "pop", "popleft", "popitem", "add", "discard",
    "remove", "update", "setdefault", "put", "take", "move_to_end",
})


def _chain(node: ast.AST) -> list[tuple[str, str]]:
    """``a.b[0].c(x).d`` as [("name", "a"), ("attr", "b"), ("attr", "c"), ("attr", "d")]."""
    out: list[tuple[str, str]] = []
    while True:
        if isinstance(node, ast.Attribute):
            out.append(("attr", node.attr))
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            if isinstance(node, ast.Name):
                out.append(("name", node.id))
            return out[::-1]


def _forbidden(chain: list[tuple[str, str]]) -> str | None:
    for i, (kind, name) in enumerate(chain):
        if name in PROCESS_STATE:
            return f"the process-wide {name}"
        private = kind == "attr" and name.startswith("_") and not name.startswith("__")
        if private and not (i == 1 and chain[0][1] in ("self", "cls")):
            return f"the private attribute .{name}"
    return None


def _private_state_writes(source: str) -> Iterator[str]:
    """Each place in ``source`` that assigns, deletes or resets process-wide state or a private attribute."""
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute | ast.Subscript) and (why := _forbidden(_chain(target))):
                yield f"line {node.lineno}: writes {why}"
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in MUTATORS and (why := _forbidden(_chain(func.value))):
            yield f"line {node.lineno}: {func.attr}() on {why}"
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name not in ("setattr", "delattr") or len(node.args) < 2:
            continue
        on_monkeypatch = isinstance(func, ast.Attribute) and _chain(func.value)[:1] == [("name", "monkeypatch")]
        attribute = node.args[1]
        private = (isinstance(attribute, ast.Constant) and isinstance(attribute.value, str)
                   and attribute.value.startswith("_") and not attribute.value.startswith("__"))
        state = _forbidden(_chain(node.args[0])) if on_monkeypatch else None
        if (private and not on_monkeypatch) or (state and "process-wide" in state) or (
            on_monkeypatch and isinstance(attribute, ast.Constant) and attribute.value in PROCESS_STATE
        ):
            yield f"line {node.lineno}: {name} of {ast.unparse(node.args[0])}.{getattr(attribute, 'value', '?')}"


def test_no_test_writes_process_wide_state_or_private_attributes() -> None:
    """Tests reach the runtime, payloads, forced traces and processors only through the public API and the kit."""
    found = []
    for path in sorted(p for p in TESTS.rglob("*.py") if "node_modules" not in p.parts):
        found += [f"{path.relative_to(ROOT)} {v}" for v in _private_state_writes(path.read_text(encoding="utf-8"))]
    assert found == []


@pytest.mark.parametrize("planted", [
    "from cp_observe._config import _runtime\n_runtime.RUNTIME_HOLDER[0] = saved\n",
    "from cp_observe._config import _runtime\n_runtime.install(capture_content=False)\n",
    "from cp_observe._config._sampling import FORCED\nFORCED._ids.clear()\n",
    "from cp_observe._capture._payloads import PAYLOADS\nPAYLOADS.clear()\n",
    "from cp_observe._wiring import _configure\n_configure._CURRENT[0] = None\n",
    "processor._evaluator.rate = limiter\n",
    "del processor._sinks\n",
    "processor._evaluator._queue.clear()\n",
    "setattr(processor, '_shutdown', True)\n",
    "monkeypatch.setattr(_runtime, 'RUNTIME_HOLDER', [fake])\n",
    "monkeypatch.setattr(_configure, '_CURRENT', [None])\n",
])
def test_a_private_state_write_is_caught(planted: str) -> None:
    """The scan can fail: each way a test could reach private state is reported."""
    assert list(_private_state_writes(planted)), planted


def test_reads_the_kit_and_own_attributes_are_allowed() -> None:
    """What tests may do passes the scan: reads, the kit, their own objects' private attributes, monkeypatch."""
    allowed = (
        "runtime.install(capture_content=False)\n"
        "otel.runtime.install(redact=None)\n"
        "assert _runtime.runtime().capture_content is False\n"
        "loop = ProcessorProbe(processor).event_loop\n"
        "self._never = threading.Event()\n"
        "monkeypatch.setattr(rig.prometheus, '_remember', broken)\n"
        "with tally._lock:\n    pass\n"
        "items.append(1)\n"
    )
    assert list(_private_state_writes(allowed)) == []


# The evaluation path, in the order a span travels it: the processor's on_end (with its exit hooks and hold), the
# evaluator's queue and thread, assembly, the path after it (resolve documents, gates, the judge call and the
# cascade's second judge, then finish and accounting), and last the record every stage reads.
STAGES = ("_processor", "_exit", "_hold", "_evaluator", "_assembly", "_path", "_resolver", "_gates", "_rate_plan",
          "_allocation", "_pacer", "_judgement", "_cascade", "_accounting", "_record")


def _stage_violations(stages: tuple[str, ...]) -> Iterator[str]:
    """Each import in ``_processing`` of a stage module listed at or before the importer (``a -> b``)."""
    order = {f"cp_observe._processing.{stage}": i for i, stage in enumerate(stages)}
    for module, place in order.items():
        for imported in _imports(MODULES[module]):
            if imported in order and order[imported] <= place:
                yield f"{module} -> {imported}"


def test_the_stages_run_in_one_direction() -> None:
    """A stage module imports only the stages after it in ``STAGES``, never one before it (nor lazily, nor for types).

    So the path reads top to bottom: the processor hands a span to the evaluator, which decodes it, assembles it and
    runs it down resolve, gates, judge, emit (``_emission``) and account; the record they all read comes last.
    """
    assert set(STAGES) == {p.stem for p in (PACKAGE / "_processing").glob("_*.py") if p.stem != "__init__"}
    assert not list(_stage_violations(STAGES))


def test_a_stage_importing_an_earlier_one_is_caught() -> None:
    """The direction check can fail: with the judge call listed before the path, the path's import of it is reported."""
    reordered = ("_processor", "_exit", "_hold", "_evaluator", "_assembly", "_judgement", "_path", "_resolver",
                 "_gates", "_cascade", "_accounting", "_record")
    assert "cp_observe._processing._path -> cp_observe._processing._judgement" in set(_stage_violations(reordered))
