"""A person's relevance label on one retrieved document, and its JSON-lines form.

One line per label::

    {"trace_id": "<32 hex>", "span_id": "<16 hex>", "position": 0, "relevant": true}
    {"trace_id": "<32 hex>", "span_id": "<16 hex>", "document_id": "doc-7", "relevant": false,
     "reason": "about billing, not refunds", "annotator": "ana"}

``span_id`` is the retrieval span (the evaluation span's parent). Exactly one of ``position`` (0-based, in the
retrieval order recorded on the span: ``retrieval.documents.{i}``) or ``document_id`` (that entry's
``document.id``). ``reason`` and ``annotator`` are optional strings. Any other key, a wrong type or a
malformed id is an error naming the line: a label silently read wrong would bias every figure built on it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from cp_observe._errors import LabelError

__all__ = ["HumanLabel", "label_line", "label_position", "parse_label_line"]

_TRACE = re.compile(r"[0-9a-f]{32}")
_SPAN = re.compile(r"[0-9a-f]{16}")
_KEYS = frozenset({"trace_id", "span_id", "position", "document_id", "relevant", "reason", "annotator"})
_MAX_TEXT = 2000


@dataclass(frozen=True, slots=True)
class HumanLabel:
    """A person's verdict on one document of one retrieval span."""

    trace_id: int
    span_id: int
    relevant: bool
    position: int | None = None
    document_id: str | None = None
    reason: str | None = None
    annotator: str | None = None
    where: str = ""  # file:line, or the Phoenix annotation it came from


def label_position(label: HumanLabel, judged: int, document_ids: tuple[str | None, ...] = ()) -> int | None:
    """The judged position ``label`` names on a retrieval with ``judged`` verdicts, or ``None``: the judge never saw it.

    By position: the retrieval order recorded on the span. By ``document_id``: its first entry in ``document_ids``
    (the span's ``retrieval.documents.{i}.document.id``, in that order).
    """
    if label.position is not None:
        return label.position if label.position < judged else None
    if label.document_id is not None and label.document_id in document_ids:
        index = document_ids.index(label.document_id)
        return index if index < judged else None
    return None


def _hex(value: Any, pattern: re.Pattern[str], digits: int, what: str, where: str) -> int:
    if not isinstance(value, str) or not pattern.fullmatch(value.lower()) or int(value, 16) == 0:
        raise LabelError(f"{where}: {what} must be {digits} hex digits, not all zero, got {value!r}")
    return int(value, 16)


def parse_label_line(text: str, where: str) -> HumanLabel:
    """One JSON-lines label.

    Raises:
        LabelError: the line is not one valid label; the message starts with ``where``.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LabelError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise LabelError(f"{where}: a label is a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise LabelError(f"{where}: unknown keys {unknown} (allowed: {sorted(_KEYS)})")
    for key in ("trace_id", "span_id", "relevant"):
        if key not in data:
            raise LabelError(f"{where}: missing {key!r}")
    trace_id = _hex(data["trace_id"], _TRACE, 32, "trace_id", where)
    span_id = _hex(data["span_id"], _SPAN, 16, "span_id", where)
    relevant = data["relevant"]
    if not isinstance(relevant, bool):
        raise LabelError(f"{where}: relevant must be true or false, got {relevant!r}")
    position = data.get("position")
    document_id = data.get("document_id")
    if (position is None) == (document_id is None):
        raise LabelError(f"{where}: give exactly one of 'position' and 'document_id'")
    if position is not None and (isinstance(position, bool) or not isinstance(position, int) or position < 0):
        raise LabelError(f"{where}: position must be an integer >= 0, got {position!r}")
    if document_id is not None and (not isinstance(document_id, str) or not document_id):
        raise LabelError(f"{where}: document_id must be a non-empty string, got {document_id!r}")
    texts = {}
    for key in ("reason", "annotator"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise LabelError(f"{where}: {key} must be a string, got {type(value).__name__}")
        texts[key] = value[:_MAX_TEXT] if value is not None else None
    return HumanLabel(trace_id, span_id, relevant, position, document_id, texts["reason"], texts["annotator"], where)


def label_line(label: HumanLabel) -> str:
    """The JSON line of ``label`` (what ``parse_label_line`` reads back)."""
    data: dict[str, Any] = {"trace_id": f"{label.trace_id:032x}", "span_id": f"{label.span_id:016x}"}
    if label.position is not None:
        data["position"] = label.position
    else:
        data["document_id"] = label.document_id
    data["relevant"] = label.relevant
    if label.reason is not None:
        data["reason"] = label.reason
    if label.annotator is not None:
        data["annotator"] = label.annotator
    return json.dumps(data, ensure_ascii=False)
