"""The answer-text rule: which text of an agent's output the retrieved contexts are judged against.

One rule, used everywhere an answer is read: the decorators (``@agent``), the offline scorer and
``run_evals``, and the processor and ``cp-observe serve`` reading ``output.value`` off a span. So the same
output is judged against the same text in production and offline.

Precedence (the first that applies):

1. ``None``: no answer (the retrievals are judged against the query instead).
2. A ``str``: itself. ``bytes``: decoded as UTF-8.
3. A mapping: the first of its ``answer``, ``output``, ``content``, ``text``, ``response`` values that is a
   string; a ``content`` list of content parts gives their text parts joined by newlines.
4. A list or tuple of chat messages (mappings or objects with a ``role``, or mappings that all have a
   ``content``): the assistant messages' texts, joined by newlines (all messages' texts when none is an
   assistant's). A list or tuple of strings: joined by
   newlines.
5. Any other object: the first of the same five attributes that is a string, read once each with
   ``getattr`` and nothing else; else its ``str()``.
6. Anything else that is not text (numbers, a list of other things): its bounded JSON / ``str`` text.

Only those fields are read: no property beyond them, no iteration of anything but a list or tuple (at most
``_MAX_MESSAGES`` items), and each field at most once. An empty or all-space answer counts as none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from cp_observe._capture._serialize import object_text, safe_str

__all__ = ["ANSWER_FIELDS", "answer_from_attribute", "answer_text"]

#: The fields an answer is read from, in order of precedence.
ANSWER_FIELDS: Final = ("answer", "output", "content", "text", "response")
_MAX_MESSAGES: Final = 1_000
_NONE: Final[Any] = object()
_MAX_JSON: Final = 1_000_000  # characters of a JSON output value parsed for its answer
_JSON: Final = "application/json"


def answer_text(value: object, limit: int) -> str | None:
    """The answer in ``value`` as text of at most ``limit`` characters (plus a truncation marker), or ``None``.

    Never raises: a field or ``__str__`` that raises is skipped (the next rule applies).
    """
    try:
        text = _answer(value, limit, nested=False)
    except Exception:  # noqa: BLE001 - host objects may raise anything; no answer rather than an error
        return None
    if text is None or not text or text.isspace():  # blank: no answer (isspace() copies nothing; strip() would)
        return None
    return text if len(text) <= limit else safe_str(text, limit)


def _answer(value: object, limit: int, *, nested: bool) -> str | None:
    cls = type(value)
    if cls is str:
        return value  # type: ignore[return-value]
    if value is None:
        return None
    if cls is list or cls is tuple:  # before the Mapping check: an ABC check is slow even when it fails
        return _from_sequence(value, limit, nested=nested)  # type: ignore[arg-type]
    if cls is dict or isinstance(value, Mapping):
        try:
            found = _from_mapping(value)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - a mapping whose get raises: no field, its text instead
            found = None
        return found if found is not None else (None if nested else safe_str(value, limit))
    if isinstance(value, (str, bytes, bytearray, memoryview, int, float)):
        return safe_str(value, limit)
    found = _from_object(value)
    if found is not None:
        return found
    return None if nested else object_text(value, limit)


def _from_mapping(mapping: Mapping[Any, Any]) -> str | None:
    get = mapping.get
    for key in ANSWER_FIELDS:
        field = get(key, _NONE)
        if type(field) is str or isinstance(field, str):
            return str(field)
        if key == "content" and (type(field) is list or type(field) is tuple):
            parts = _content_parts(field)
            if parts is not None:
                return parts
    return None


def _content_parts(parts: list[Any] | tuple[Any, ...]) -> str | None:
    texts = []
    for part in parts[:_MAX_MESSAGES]:
        if type(part) is str:
            texts.append(part)
        elif isinstance(part, Mapping) and type(part.get("text")) is str:
            texts.append(part["text"])
    return "\n".join(t for t in texts if t) or None


def _from_object(obj: object) -> str | None:
    for name in ANSWER_FIELDS:
        try:
            field = getattr(obj, name, None)
        except Exception:  # noqa: BLE001 - a raising property: try the next documented field
            continue
        if isinstance(field, str):
            return str(field)
    return None


def _role(message: object) -> object:
    if type(message) is dict:  # the common message, without the ABC check
        return message.get("role")
    if isinstance(message, Mapping):
        return message.get("role")
    if isinstance(message, (str, bytes, int, float, list, tuple)) or message is None:
        return None
    try:
        return getattr(message, "role", None)
    except Exception:  # noqa: BLE001 - a raising property: not a message
        return None


def _from_sequence(items: list[Any] | tuple[Any, ...], limit: int, *, nested: bool) -> str | None:
    if not items or len(items) > _MAX_MESSAGES or nested:
        return None if nested else safe_str(items, limit)
    for item in items:  # a plain loop: measurably faster than all() over a generator
        if type(item) is not str:
            break
    else:
        return "\n".join(items)
    # Plain loops rather than comprehensions and any()/all() over generators: this runs on every agent call.
    assistants: list[Any] = []
    has_role = False
    for item in items:
        role = item.get("role") if type(item) is dict else _role(item)
        if role == "assistant":
            assistants.append(item)
        if not has_role and isinstance(role, str):
            has_role = True
    if not has_role and not all(isinstance(item, Mapping) and "content" in item for item in items):
        return safe_str(items, limit)  # data, not messages: its JSON text
    texts = []
    for item in assistants or items:
        text = _from_mapping(item) if type(item) is dict else _answer(item, limit, nested=True)
        if text:
            texts.append(text)
    return "\n".join(texts) or None


def answer_from_attribute(value: object, mime_type: object, limit: int) -> str | None:
    """The answer in a span's ``output.value``, by the same rule.

    When ``output.mime_type`` says the value is JSON (as OpenInference instrumentations record a result
    mapping), the rule applies to the parsed value, with one difference: a JSON mapping that has none of the
    answer fields, or a value that does not parse, is no answer (a chain's structured outputs are not the text
    its retrievals served), so the retrievals wait for an outer answer or are judged against their query.
    """
    if value is None:
        return None
    if type(value) is str and mime_type == _JSON:
        if len(value) > _MAX_JSON:
            return None
        try:
            parsed = json.loads(value)
        except ValueError:
            return None  # declared JSON but is not: there is no answer to read in it
        if isinstance(parsed, dict) and _from_mapping(parsed) is None:
            return None  # a structured result (a chain's outputs, say) that names no answer is no answer
        return None if parsed is None else answer_text(parsed, limit)
    return answer_text(value if type(value) is str else str(value), limit)
