"""People's labels from JSON-lines files (the format is in ``_judging/_labels.py``); errors name file and line."""

from __future__ import annotations

from pathlib import Path

from cp_observe._errors import LabelError
from cp_observe._judging._labels import HumanLabel, parse_label_line

__all__ = ["read_label_file"]


def read_label_file(path: str | Path) -> list[HumanLabel]:
    """Every label of ``path``; blank lines are skipped.

    Raises:
        LabelError: the file cannot be read, or a line is not one valid label (the message names ``file:line``).
    """
    labels: list[HumanLabel] = []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    labels.append(parse_label_line(line, f"{path}:{number}"))
    except OSError as exc:
        raise LabelError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise LabelError(f"{path}: not UTF-8 text") from None
    return labels
