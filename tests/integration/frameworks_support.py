"""The frameworks' venv the framework apps (``tests/frameworks/``) run in, and the mark that skips without it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-frameworks" / "bin" / "python"
#: Skips a module whose apps need ``.venv-frameworks`` where it is not installed.
NEEDS_FRAMEWORKS = pytest.mark.skipif(
    not PYTHON.exists(),
    reason="needs .venv-frameworks: run scripts/install-frameworks.sh (scripts/test does, "
    "unless CP_OBSERVE_SKIP_FRAMEWORKS=1)",
)
