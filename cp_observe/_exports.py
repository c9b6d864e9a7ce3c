"""The lazy re-exports of the packages whose public names load on first use (PEP 562).

``import cp_observe`` must cost next to nothing, and pytest loads ``cp_observe.testing``'s plugin in every
session: each package names the module of each public name, and a name's module is imported when the name is
first read, then kept as a plain module attribute.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, modules: Mapping[str, Iterable[str]],
                 public: Iterable[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose submodule ``m`` holds the names ``modules[m]``."""
    namespace = sys.modules[package].__dict__
    where = {name: module for module, names in modules.items() for name in names}
    listed = frozenset(public)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value  # later lookups are plain module attributes
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *listed})

    return __getattr__, __dir__
