"""The answer rule and the query rule: which text of an output, or of an input, the contexts are judged against.

One rule wherever an answer is read, so the same output is judged against the same text whichever way it
arrived: ``@agent``'s return value and the offline scorer and ``run_evals`` (``answer_text``), and the span of
every tracing convention, in the processor and in ``cp-observe serve`` (``answer_of``).

``answer_text(value)``, the first case that applies:

1. ``None``: no answer (the retrievals are judged against the query instead). A ``str``: itself. ``bytes``:
   decoded as UTF-8. A number: its text.
2. A mapping: the first of ``ANSWER_FIELDS`` (``answer``, ``output``, ``content``, ``text``, ``response``,
   ``outputs``, ``result``, ``parts``), in that order, whose value gives a text by this rule, one level down.
   The earlier field wins: ``answer`` over every other, ``{"output": "OUT", "response": "RESP"}`` is ``OUT``.
3. A list or tuple (its first ``MAX_ITEMS`` items): strings are joined by newlines; content parts (no item
   with a ``role``, some mapping with a ``type``) give their text parts joined by newlines (the one reader,
   ``_serialize.content_text``); anything else is messages, of which one counts: the last assistant message
   (``role`` ``assistant``, mapping or attribute) that gives a text, or, when no item is an assistant's, the
   last item that gives a text.
4. Another object: the first of the same fields, read once each with ``getattr``, that gives a text; else, at
   the top level only, its ``str()``.

One depth for all: the value and containers (mappings, lists, objects) up to ``MAX_DEPTH`` levels below it are
read, nothing deeper. Below the top level a number or an object's ``str()`` gives no text, so a mapping or list
that names no answer (``{"items": [...]}``, a list of numbers) is no answer, not its JSON text. An empty or
all-space text is none.

A span's answer (``answer_of``), by convention, first found: ``gen_ai.output.messages`` (JSON messages with
parts), ``llm.output_messages.{i}.message.role`` / ``.content`` (as a list of messages),
``traceloop.entity.output`` (JSON), ``output.value`` (parsed when ``output.mime_type`` is
``application/json``, else the text itself); each read by ``answer_text``. A JSON value that does not parse is
no answer.

The query rule (``query_text``) is the same rule over other fields and the other side of a chat: the first of
``QUERY_FIELDS`` (``query``, ``query_str``, ``question``, ``input``, ``inputs``, ``messages``,
``input_messages``, ``inputMessages``, ``text``, ``content``, ``parts``) that gives a text, and of chat
messages the last user message. It reads the query of a decorated call's query argument, of the offline
scorer's input and of a span's JSON ``input.value`` or ``traceloop.entity.input`` (``_conventions.query_of``).
A value that names no query is its own text (``safe_str``: JSON for data), never nothing: a query is what the
call was given.

Only those fields and a message's ``role`` are read, each at most once, and nothing is iterated but a list or
tuple.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from cp_observe import _names as n
from cp_observe._capture._serialize import MAX_JUDGED_CHARS, content_text, json_value, object_text, safe_str, truncate

__all__ = [
    "ANSWER_FIELDS", "MAX_DEPTH", "MAX_ITEMS", "QUERY_FIELDS", "answer_of", "answer_text", "query_in", "query_text",
]

#: The fields an answer is read from, in order of precedence: the first that gives a text wins.
ANSWER_FIELDS: Final = ("answer", "output", "content", "text", "response", "outputs", "result", "parts")
#: The fields a query is read from, in order of precedence: the first that gives a text wins.
QUERY_FIELDS: Final = (
    "query", "query_str", "question", "input", "inputs", "messages", "input_messages", "inputMessages", "text",
    "content", "parts",
)
#: Containers nested deeper than this below the value are not read.
MAX_DEPTH: Final = 3
#: Items of a list read (messages, strings, content parts; also the OpenInference messages of a span).
MAX_ITEMS: Final = 1_000
_TEXTS: Final = (str, bytes, bytearray, memoryview)
#: A rule: the fields it reads, in order, and the role of the chat message that counts.
_Rule = tuple[tuple[str, ...], str]
_ANSWER: Final[_Rule] = (ANSWER_FIELDS, "assistant")
_QUERY: Final[_Rule] = (QUERY_FIELDS, "user")


def answer_text(value: object, limit: int = MAX_JUDGED_CHARS) -> str | None:
    """The answer in ``value`` as text of at most ``limit`` characters (plus a truncation marker), or ``None``.

    Never raises: a field or ``__str__`` that raises is skipped (the next field applies).
    """
    return _found(value, limit, _ANSWER)


def query_in(value: object, limit: int = MAX_JUDGED_CHARS) -> str | None:
    """The query ``value`` names by the query rule, or ``None`` when it names none; never raises.

    As in the answer rule, an object at the top level that names none gives its ``str()``.
    """
    return _found(value, limit, _QUERY)


def query_text(value: object, limit: int = MAX_JUDGED_CHARS) -> str:
    """The query in ``value`` (``query_in``), else ``value``'s own text (``""`` for ``None``); never raises."""
    found = query_in(value, limit)
    return found if found is not None else "" if value is None else safe_str(value, limit)


def _found(value: object, limit: int, rule: _Rule) -> str | None:
    try:
        text = _text(value, limit, 0, rule)
    except Exception:  # noqa: BLE001 - host objects may raise anything; no text rather than an error
        return None
    if not text or text.isspace():  # blank: none (isspace() copies nothing; strip() would)
        return None
    return text if len(text) <= limit else truncate(text, limit)[0]


def answer_of(attributes: Mapping[str, Any]) -> str | None:
    """The answer an agent, LLM, chain or workflow span carries, by convention (see above); ``None`` if none."""
    try:
        get = attributes.get
        found = None
        value = get(n.GEN_AI_OUTPUT_MESSAGES)
        if value is not None:
            found = answer_text(json_value(value))
        if found is None and get(n.output_message_attribute(0, "content")) is not None:
            messages = []
            for i in range(MAX_ITEMS):
                content = get(n.output_message_attribute(i, "content"))
                if content is None:
                    break
                messages.append({"role": get(n.output_message_attribute(i, "role")), "content": content})
            found = answer_text(messages)
        if found is None and (value := get(n.TRACELOOP_ENTITY_OUTPUT)) is not None:
            found = answer_text(json_value(value))
        if found is None and (value := get(n.OUTPUT_VALUE)) is not None:
            found = answer_text(json_value(value) if get(n.OUTPUT_MIME_TYPE) == n.MIME_JSON else value)
        return found
    except Exception:  # noqa: BLE001 - a malformed span reads as carrying no answer
        return None


def _text(value: object, limit: int, depth: int, rule: _Rule) -> str | None:
    cls = type(value)
    if cls is str:
        return value  # type: ignore[return-value]
    if value is None:
        return None
    if cls is list or cls is tuple:  # before the Mapping check: an ABC check is slow even when it fails
        return _from_list(value, limit, depth, rule) if depth <= MAX_DEPTH else None  # type: ignore[arg-type]
    if cls is dict or isinstance(value, Mapping):
        return _from_mapping(value, limit, depth, rule) if depth <= MAX_DEPTH else None  # type: ignore[arg-type]
    if isinstance(value, _TEXTS):
        return safe_str(value, limit)
    if isinstance(value, (int, float)):
        return safe_str(value, limit) if depth == 0 else None
    if depth == 0:
        found = _from_object(value, limit, depth, rule)
        return found if found is not None else object_text(value, limit)
    if depth > MAX_DEPTH or callable(value):  # a method: no text
        return None
    return _from_object(value, limit, depth, rule)


def _from_mapping(mapping: Mapping[Any, Any], limit: int, depth: int, rule: _Rule) -> str | None:
    try:
        get = mapping.get
        for key in rule[0]:
            field = get(key)
            if field is not None:
                text = field if type(field) is str else _text(field, limit, depth + 1, rule)
                if text and not text.isspace():
                    return text
    except Exception:  # noqa: BLE001 - a mapping whose get raises: no answer in it
        return None
    return None


def _from_object(obj: object, limit: int, depth: int, rule: _Rule) -> str | None:
    for name in rule[0]:
        try:
            field = getattr(obj, name, None)
        except Exception:  # noqa: BLE001 - a raising property: try the next documented field
            continue
        if field is not None:
            text = field if type(field) is str else _text(field, limit, depth + 1, rule)
            if text and not text.isspace():
                return text
    return None


def _role(message: object) -> object:
    if type(message) is dict:  # the common message, without the ABC check
        return message.get("role")
    if isinstance(message, Mapping):
        return message.get("role")
    if isinstance(message, (*_TEXTS, int, float, list, tuple)) or message is None:
        return None
    try:
        return getattr(message, "role", None)
    except Exception:  # noqa: BLE001 - a raising property: not a message
        return None


def _from_list(items: list[Any] | tuple[Any, ...], limit: int, depth: int, rule: _Rule) -> str | None:
    if len(items) > MAX_ITEMS:
        items = items[:MAX_ITEMS]
    # Plain loops rather than comprehensions and any()/all() over generators: this runs on every agent call.
    for item in items:
        if type(item) is not str:
            break
    else:
        return "\n".join(items) if items else None
    wanted = rule[1]
    matched = has_role = False
    for i in range(len(items) - 1, -1, -1):  # from the end: a chat's answer is its last message, found at once
        item = items[i]
        role = item.get("role") if type(item) is dict else _role(item)
        if role == wanted:
            matched = True
            text = _text(item, limit, depth + 1, rule)
            if text and not text.isspace():
                return text
        elif not has_role and isinstance(role, str):
            has_role = True
    if matched:
        return None
    if not has_role:
        for item in items:
            if isinstance(item, Mapping) and "type" in item:  # content parts, not messages
                parts = content_text(items, limit, typed_parts=True)
                if parts is not None:
                    return parts
                break
    for i in range(len(items) - 1, -1, -1):
        item = items[i]
        text = item if type(item) is str else _text(item, limit, depth + 1, rule)
        if text and not text.isspace():
            return text
    return None
