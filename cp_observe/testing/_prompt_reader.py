"""Reading a judge prompt back into its parts: the inverse of ``build_prompt``, for the loopback judge only.

It lives in the test kit, not beside ``build_prompt``, because production code never reads a prompt back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

__all__ = ["parse_judge_prompt"]

_BLOCK_RE: Final = re.compile(
    r"^=== (QUESTION|REFERENCE|CONTEXT (\d+) OF (\d+)) (?P<nonce>[0-9a-f]+) ===\n"
    r"(?P<body>.*?)\n=== END (?P=nonce) ===$",
    re.S | re.M,
)


def parse_judge_prompt(messages: Sequence[dict[str, Any]]) -> tuple[str, str, list[str]] | None:
    """Recover ``(query, reference, contexts)`` from messages built by ``build_prompt``.

    Used by the loopback judge server in ``cp_observe.testing`` to answer like a judge would; returns
    ``None`` for messages of another shape.
    """
    user = next((m.get("content") for m in messages if m.get("role") == "user"), None)
    if not isinstance(user, str):
        return None
    query: str | None = None
    reference: str | None = None
    contexts: list[str] = []
    for match in _BLOCK_RE.finditer(user):
        kind, body = match.group(1), match.group("body")
        if kind == "QUESTION":
            query = body
        elif kind == "REFERENCE":
            reference = body
        else:
            contexts.append(body)
    if query is None or reference is None:
        return None
    return query, reference, contexts
