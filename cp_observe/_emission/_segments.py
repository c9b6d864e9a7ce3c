"""Segment values: which value of each configured segment an evaluation carries, bounded in cardinality.

The one home of the rule: the first value found on the retrieval span, then (for a reranker) on the retrieval
whose documents it reranks (the one it inherits its data source from, so a variant set on the retrieval span
labels both stages alike), then on the span it was assembled with (its enclosing agent or answer-carrying span,
or its local root when judged against its query); missing (or
empty) is ``none``; a value is cut to ``MAX_SEGMENT_VALUE_CHARS`` characters; each segment keeps at most
``max_values`` distinct values per processor, later ones become ``other`` and each such evaluation is counted in
``context_precision.segment.overflow`` by segment. Values are the user's own attributes, not captured content,
so they travel whatever the content capture setting.

Resolved on the evaluator thread (never in ``on_end``), once per target. The lock guards each segment's set of
known values; only the evaluator thread, ``flush``/``shutdown`` callers and ``serve``'s recovery resolve, never a
path the garbage collector can run, and the common case (a value already known) reads the set without it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from cp_observe import _names as n
from cp_observe._fork import at_fork_method

__all__ = ["MAX_SEGMENT_VALUE_CHARS", "SegmentValues"]

#: Characters kept of a segment value (a version, a tenant tier or a build id fits; a sentence is cut).
MAX_SEGMENT_VALUE_CHARS: Final = 64


class SegmentValues:
    """Resolves segment values for evaluations; ``on_overflow(label)`` is called once per value folded to ``other``."""

    def __init__(self, labels: Sequence[tuple[str, str]], max_values: int,
                 on_overflow: Callable[[str], None] | None = None) -> None:
        self.labels = tuple(labels)  # (attribute name, label name)
        self.max_values = max(1, int(max_values))
        self._on_overflow = on_overflow
        self._known: dict[str, dict[str, None]] = {label: {} for _, label in self.labels}
        self.overflowed: dict[str, int] = {label: 0 for _, label in self.labels}  # mirrors the counter (tests, demo)
        self._lock = threading.Lock()  # guards adding to _known and overflowed; never taken on a finalizer path
        at_fork_method(self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a holder at fork time does not exist in the child

    def resolve(self, attributes: Mapping[str, Any] | None, enclosing: Mapping[str, Any] | None,
                reranked: Mapping[str, Any] | None = None) -> tuple[tuple[str, str], ...]:
        """``(label name, value)`` per segment for a target with these span attributes.

        ``reranked``: a reranker's reranked retrieval's attributes, looked at after its own and before ``enclosing``.
        """
        out = []
        for attribute, label in self.labels:
            for source in (attributes, reranked, enclosing):  # the first that carries the attribute
                value = _value(source, attribute)
                if value is not None:
                    break
            out.append((label, n.SEGMENT_NONE if value is None else self._bounded(label, value)))
        return tuple(out)

    def _bounded(self, label: str, value: str) -> str:
        known = self._known[label]
        if value in known:  # one dict read: no lock
            return value
        overflow = False
        with self._lock:
            if value not in known:
                if len(known) < self.max_values:
                    known[value] = None
                else:
                    overflow = True
                    self.overflowed[label] += 1
        if not overflow:
            return value
        if self._on_overflow is not None:
            self._on_overflow(label)
        return n.SEGMENT_OTHER


def _value(attributes: Mapping[str, Any] | None, name: str) -> str | None:
    if not attributes:
        return None
    raw = attributes.get(name)
    if raw is None:
        return None
    if isinstance(raw, (list, tuple)):
        raw = ",".join(str(part) for part in raw)
    text = str(raw)[:MAX_SEGMENT_VALUE_CHARS]
    return text if text.strip() else None
