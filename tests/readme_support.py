"""The README's quick start, as written: its marked code blocks, and a run of them in a given environment.

The README marks each block a test runs with an HTML comment on the line before it (``<!-- quickstart: NAME -->``,
invisible on GitHub and on the site): ``quickstart.py`` (the script), ``run`` (the shell command that runs it),
``output`` (lines its output contains) and ``production`` (the ``configure()`` call for production). Shared by
``tests/wiring/test_readme_quickstart.py`` (the checkout's venv) and ``tests/integration/test_wheel_deploy.py``
(a fresh venv holding only the built wheel).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

__all__ = ["README", "quickstart_blocks", "run_quickstart"]

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^<!-- quickstart: (?P<name>[\w.]+) -->\n```\w*\n(?P<body>.*?)^```$", re.M | re.S)


def quickstart_blocks() -> dict[str, str]:
    """The README's marked blocks by name, each exactly as written."""
    return {m["name"]: m["body"] for m in _BLOCK.finditer(README.read_text(encoding="utf-8"))}


def run_quickstart(bin_dir: Path, workdir: Path, *, script: str | None = None,
                   **env: str) -> subprocess.CompletedProcess[str]:
    """Save the quick start (or ``script``) as ``quickstart.py`` in ``workdir`` and run the README's command there.

    The command runs in bash with ``bin_dir`` (a venv's) first on the ``PATH``, so its ``python`` is that venv's,
    in an environment without the test run's ``OTEL_*``, ``CP_OBSERVE_*`` and Python path variables.
    """
    blocks = quickstart_blocks()
    (workdir / "quickstart.py").write_text(script if script is not None else blocks["quickstart.py"])
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("OTEL_", "CP_OBSERVE_", "PYTHON", "VIRTUAL_ENV"))}
    clean.update(PATH=f"{bin_dir}{os.pathsep}{clean.get('PATH', '')}", LITELLM_LOCAL_MODEL_COST_MAP="True",
                 NO_PROXY="*", no_proxy="*", **env)
    return subprocess.run(["bash", "-euc", blocks["run"]], cwd=workdir, env=clean, capture_output=True, text=True,
                          timeout=120, check=False)
