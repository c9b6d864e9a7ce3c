"""The public surface stays put: exported names, the command line's commands and flags, and every emitted name.

``tests/data/public_surface.json`` is the snapshot. Moving code between packages must not change it; a deliberate
change to the surface regenerates it with ``python -m tests.wiring.test_public_surface`` and shows in the diff.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "public_surface.json"
MODULES = ("cp_observe", "cp_observe.testing", "cp_observe.replay")


def _parser() -> argparse.ArgumentParser:
    """The ``cp-observe`` parser, caught as ``main`` builds it (it parses ``--help`` last, which is stopped)."""
    from cp_observe import cli

    built: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_args

    def catch(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        built.append(self)
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = catch  # type: ignore[method-assign]
    try:
        with pytest.raises(SystemExit):
            cli.main([])
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
    return built[0]


def _commands(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Each command with its sorted option strings and positional names."""
    out: dict[str, list[str]] = {}
    for action in parser._actions:  # argparse keeps its actions there; read only
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                flags: set[str] = set()
                for option in sub._actions:
                    flags.update(option.option_strings or [option.dest])
                out[name] = sorted(flags)
    return out


def _emitted_names() -> list[str]:
    """Every string constant of ``_names.py`` (attributes, events, metrics, env vars), as ``NAME=value``."""
    from cp_observe import _names

    return sorted(f"{key}={value}" for key, value in vars(_names).items()
                  if key.isupper() and isinstance(value, str))


def surface() -> dict[str, Any]:
    """The public surface as plain JSON data."""
    exported = {name: sorted(importlib.import_module(name).__all__) for name in MODULES}
    return {"exports": exported, "commands": _commands(_parser()), "names": _emitted_names()}


def test_the_public_surface_is_the_snapshot() -> None:
    """Exports, commands with their flags and emitted names equal tests/data/public_surface.json."""
    assert surface() == json.loads(SNAPSHOT.read_text(encoding="utf-8"))


@pytest.mark.parametrize("module", MODULES)
def test_every_exported_name_resolves(module: str) -> None:
    """Each name in a public module's ``__all__`` can be read from it (lazy re-exports included)."""
    loaded = importlib.import_module(module)
    missing = [name for name in loaded.__all__ if not hasattr(loaded, name)]
    assert missing == []


if __name__ == "__main__":  # pragma: no cover - regenerates the snapshot after a deliberate change
    SNAPSHOT.write_text(json.dumps(surface(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    sys.exit(0)
