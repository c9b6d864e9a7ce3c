"""Progress of a replay: a bar redrawn in place on a terminal, a line every ``interval_s`` otherwise."""

from __future__ import annotations

import sys
import time
from typing import IO, Any

__all__ = ["Progress"]

_WIDTH = 24
_TTY_REDRAW_S = 0.2


class Progress:
    """Reports how far the reading has got and what the processor has done with it."""

    def __init__(self, stream: IO[str] | None = None, *, interval_s: float = 10.0, enabled: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = _TTY_REDRAW_S if self.tty else interval_s
        self._started = time.monotonic()
        self._last = 0.0
        self._drawn = False

    def update(self, name: str, unit: str, position: int, total: int | None, *, spans: int, stats: dict[str, Any],
               force: bool = False) -> None:
        """Redraw (TTY) or print a line (not a TTY) when ``interval_s`` has passed, or when ``force``."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        elapsed = max(now - self._started, 1e-9)
        where = _amount(position, unit)
        if total:
            share = min(1.0, position / total)
            where = f"{share:6.1%} of {_amount(total, unit)}"
            if self.tty:
                filled = round(_WIDTH * share)
                where = f"[{'#' * filled}{'-' * (_WIDTH - filled)}] {where}"
        text = (f"replay {name}: {where}, {spans} spans ({spans / elapsed:,.0f}/s), sampled {stats['sampled']}, "
                f"scored {stats['scored']}, failed {stats['failed']}, skipped {stats['skipped']}, "
                f"pending {stats['pending']}")
        if self.tty:
            self.stream.write("\r\x1b[2K" + text)
            self._drawn = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the redrawn line on a terminal."""
        if self.enabled and self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()


def _amount(value: int, unit: str) -> str:
    if unit != "bytes":
        return f"{value:,} {unit}"
    size = float(value)
    for suffix in ("B", "KB", "MB", "GB"):
        if size < 1024 or suffix == "GB":
            return f"{size:,.1f} {suffix}" if suffix != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:,.1f} GB"
