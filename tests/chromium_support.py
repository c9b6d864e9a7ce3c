"""Open a self-contained HTML page (the report, calibrate's page) in Debian's headless Chromium.

The pages log one line of their own to the console once drawn (``"cp-observe report: N charts"``); everything
else on the console, an uncaught exception or a blank screenshot is a rendering failure.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")


@dataclass(frozen=True)
class Rendered:
    """What Chromium made of a page: its console lines, the rendered DOM and the screenshot."""

    console: list[str]
    stderr: str
    dom: str
    screenshot: Path

    def assert_clean(self, own_line: str) -> None:
        """The page logged ``own_line`` and nothing else, raised nothing, and drew more than a blank page."""
        assert any(f'"{own_line}"' in line for line in self.console), self.stderr[-2000:]
        prefix = own_line.split(":", 1)[0] + ":"
        assert not [line for line in self.console if prefix not in line], self.console
        assert "Uncaught" not in self.stderr
        assert self.screenshot.exists() and self.screenshot.stat().st_size > 20_000  # blank: a few kilobytes


def render(page: Path, workdir: Path, *, height: int = 1600, dom: bool = True) -> Rendered:
    """Screenshot ``page`` (capturing the console) and, with ``dom``, dump its DOM, in a throwaway profile."""
    profile = tempfile.mkdtemp(prefix="cp-chromium-")
    shot = workdir / f"{page.stem}.png"
    base = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}"]
    try:
        shown = subprocess.run([*base, "--enable-logging=stderr", "--v=0", f"--window-size=1280,{height}",
                                f"--screenshot={shot}", page.as_uri()],
                               capture_output=True, text=True, timeout=120, check=False)
        dumped = (subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120,
                                 check=False).stdout if dom else "")
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert shown.returncode == 0, shown.stderr[-2000:]
    console = [line for line in shown.stderr.splitlines() if ":CONSOLE" in line]
    return Rendered(console, shown.stderr, dumped, shot)
