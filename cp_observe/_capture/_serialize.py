"""Safe, bounded text and JSON from whatever a decorated function was given or returned.

Everything here runs on the host's request path, on values we do not control, so every public function
returns a value for any input and never raises (``BaseException`` subclasses such as ``KeyboardInterrupt``
are left alone). Output is bounded, and so is the work: nested values are converted with a depth limit and
a shared budget of values and characters, so a huge or self-referencing structure costs no more than a small
one, and our own recursion can never run away.

Truncation, exactly: a text longer than ``limit`` characters keeps its first ``limit`` characters followed by
the marker ``"…[truncated N chars]"`` (``N`` = characters cut). Bytes decoded as UTF-8 that do not fit are cut
on a character boundary and the marker counts bytes instead: ``"…[truncated N bytes]"``. Either way a
result is at most ``limit + MARKER_MAX`` characters long.
"""

from __future__ import annotations

import json
import math
import operator
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from cp_observe._internal import report_host_error

__all__ = [
    "MARKER_MAX", "MAX_JUDGED_CHARS", "as_limit", "content_text", "finite_float", "json_value", "metadata_json",
    "object_text", "safe_str", "safe_text", "truncate", "type_name",
]

#: The most characters of one text the judge reads (a context, an answer, a resolved document), wherever it is
#: read from: a decorated call, a span of any convention, the offline scorer, a document resolver. Longer texts
#: keep this many characters and the truncation marker.
MAX_JUDGED_CHARS: Final = 20_000

_ELLIPSIS: Final = "…"


def _marker(count: int, unit: str = "chars") -> str:
    return f"{_ELLIPSIS}[truncated {count} {unit}]"


#: The longest truncation marker: a cut text is at most ``limit + MARKER_MAX`` characters long.
MARKER_MAX: Final = len(_marker(sys.maxsize))

_FALLBACK_LIMIT: Final = 1_000  # used when a caller passes a limit that is not an integer
_KEY_LIMIT: Final = 256  # a mapping key longer than this is cut
_MAX_DEPTH: Final = 8  # containers nested deeper become "…"
_MAX_NODES: Final = 2_000  # values visited per conversion
_MAX_MESSAGES: Final = 1_000  # messages or content parts joined into one text
_MAX_JSON: Final = 1 << 20  # characters of a JSON text parsed (json_value); longer ones read as absent
_JSON_MIN: Final = 64  # metadata_json never cuts below this, so a valid JSON object always fits
_INT_MAX: Final = 2**64  # integers beyond this become strings: JSON readers lose their precision anyway
_CONTAINERS: Final = (list, tuple, set, frozenset)
# One encoder for every call: json.dumps with any option builds a new JSONEncoder each time, which costs
# more than encoding a small document's metadata. _plain has made every value JSON-safe beforehand.
_encode: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, check_circular=False).encode
_NOTE_ROOM: Final = len(', "_cp_truncated": 9999999')  # kept free so the note on left-out keys fits


def type_name(value: object) -> str:
    """Return the (bounded) qualified name of ``value``'s type, for placeholders; never raises."""
    try:
        name = type(value).__qualname__
        if type(name) is str:
            return name[:100]
    except Exception:  # noqa: BLE001 - a metaclass may do anything
        pass
    return "object"


def _unrepresentable(value: object) -> str:
    return f"<unrepresentable {type_name(value)}>"


def as_limit(limit: object, default: int = _FALLBACK_LIMIT) -> int:
    """``limit`` as a count >= 0; ``default`` when it is not an integer (a caller's bug: stay bounded, not raise)."""
    if type(limit) is int:
        return limit if limit > 0 else 0
    try:
        return max(0, operator.index(limit))  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a bad limit: stay bounded, do not raise
        return default


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """Cut ``text`` to ``limit`` characters plus a marker saying how many were cut.

    Returns:
        ``(text, was_cut)``; the text is returned as is (no copy) when it fits. A non-``str`` argument is
        converted with ``safe_text`` rather than raising.
    """
    if type(text) is not str:
        return safe_text(text, limit)
    if type(limit) is not int or limit < 0:
        limit = as_limit(limit)
    if len(text) <= limit:
        return text, False
    return text[:limit] + _marker(len(text) - limit), True


def safe_str(value: object, limit: int) -> str:
    """Return readable text for any value, at most ``limit + MARKER_MAX`` characters.

    ``str`` is itself; bytes are decoded as UTF-8 with replacement; numbers and booleans give ``str``; anything
    else gives bounded JSON (non-JSON values as their ``str``), falling back to ``repr``, and to
    ``"<unrepresentable TYPE>"`` when even that raises. Never raises. (Which text of a chat message or a
    mapping is the query or the answer is the rules' in ``_answer``; this is what a value that names none shows.)
    """
    if type(value) is str and type(limit) is int and len(value) <= limit:
        return value
    return safe_text(value, limit)[0]


def object_text(value: object, limit: int) -> str:
    """``str(value)``, else ``repr(value)``, else ``"<unrepresentable TYPE>"``, cut to ``limit``; never raises.

    Reads nothing of ``value`` but its ``__str__`` / ``__repr__``: for host objects whose other fields were
    already looked at (the answer rule), so no property is read twice.
    """
    try:
        return _text_of(value, as_limit(limit))
    except Exception:  # noqa: BLE001 - nothing may reach the host
        return _unrepresentable(value)


def safe_text(value: object, limit: int) -> tuple[str, bool]:
    """``safe_str`` that also says whether the text was truncated; never raises."""
    limit = as_limit(limit)
    if type(value) is str:
        return truncate(value, limit)
    try:
        return _convert(value, limit)
    except Exception:  # noqa: BLE001 - nothing may reach the host
        return truncate(_unrepresentable(value), limit)


def finite_float(value: object) -> float | None:
    """Return a retriever score as a finite ``float``, or ``None`` when it is missing or not a real number.

    Accepts ``int``, ``float`` and anything with ``__float__`` or ``__index__`` (numpy and torch scalars,
    ``Decimal``). ``bool`` is not a score and strings are not parsed: both give ``None``, as do NaN,
    infinities and integers too large for a float. Never raises.
    """
    if type(value) is float:
        return value if math.isfinite(value) else None
    if value is None or type(value) is bool:
        return None
    try:
        cls = type(value)
        if not (hasattr(cls, "__float__") or hasattr(cls, "__index__")) or isinstance(value, (str, bytes)):
            return None
        result = float(value)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - overflow, a raising __float__: not a score
        return None
    return result if math.isfinite(result) else None


def json_value(text: object) -> Any:
    """A JSON text parsed, or ``None``: not a string, longer than a mebibyte, not JSON, nested too deep."""
    if type(text) is not str or len(text) > _MAX_JSON:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def metadata_json(mapping: object, limit: int) -> str | None:
    """Serialise document metadata as the JSON object string OpenInference expects.

    Keys become strings; NaN and infinities become ``null``; values JSON cannot hold become their ``str``;
    nesting deeper than a few levels, or a reference cycle, becomes ``"…"``. Keys are written in order
    while they fit in ``max(limit, 64)`` characters; a value that does not fit is replaced by its JSON text
    cut to fit, as a string, and keys that still do not fit are left out and counted under
    ``"_cp_truncated"``. The result is always valid JSON. ``None`` for ``None`` and empty values; a
    non-mapping value is wrapped as ``{"value": ...}``. Never raises.
    """
    try:
        if type(mapping) is dict and type(limit) is int and 0 < len(mapping) <= _FLAT_MAX_KEYS and _flat(mapping):
            # The common case, a small flat dict of plain values: orjson, then the bound. (It refuses lone
            # surrogates and integers below -2**63, which the general path below handles.)
            try:
                text = _orjson_dumps(mapping).decode()
            except orjson.JSONEncodeError:
                text = None
            if text is not None and len(text) <= max(limit, _JSON_MIN):
                return text
        if mapping is None:
            return None
        if not isinstance(mapping, Mapping):
            if isinstance(mapping, (str, bytes, *_CONTAINERS)) and not mapping:
                return None
            mapping = {"value": mapping}
        if not mapping:
            return None
        return _metadata_json(mapping, max(as_limit(limit), _JSON_MIN))
    except Exception:  # noqa: BLE001 - a mapping whose items() raises
        return None


_FLAT_MAX_KEYS = 32
_orjson_dumps = orjson.dumps


def _flat(mapping: dict[Any, Any]) -> bool:
    """True when every key is a str and every value a str, bool, None, int in JSON's safe range or finite float."""
    for key, value in mapping.items():
        if type(key) is not str:
            return False
        kind = type(value)
        if kind is str or kind is bool or value is None:
            continue
        if kind is int:
            if not -_INT_MAX < value < _INT_MAX:
                return False
        elif kind is float:
            if not math.isfinite(value):
                return False
        else:
            return False
    return True


# --- conversion ---------------------------------------------------------------------------------------------


class _Allowance:
    """What one conversion may still spend: values visited and characters of text kept."""

    __slots__ = ("chars", "nodes")

    def __init__(self, chars: int) -> None:
        self.nodes = _MAX_NODES
        self.chars = chars


def _convert(value: object, limit: int) -> tuple[str, bool]:
    cls = type(value)
    if cls is bool or cls is int or cls is float:
        return truncate(_scalar_text(value), limit)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _decode(value, limit)
    if isinstance(value, str):
        return truncate(str.__str__(value), limit)
    plain = _plain(value, 0, _Allowance(limit), limit, set())
    if type(plain) is str:
        text = plain
    elif type(plain) is dict or type(plain) is list:
        text = _encode(plain)
    else:  # a number-like scalar (Decimal, numpy): its own text, not its float
        text = _text_of(value, limit)
    return truncate(text, limit)


def _scalar_text(value: object) -> str:
    try:
        return str(value)
    except ValueError:  # an int with more digits than sys.get_int_max_str_digits() allows
        return f"<int of {value.bit_length()} bits>" if isinstance(value, int) else _unrepresentable(value)


def _text_of(value: object, limit: int) -> str:
    """``str(value)``, else ``repr(value)``, else a placeholder; cut to ``limit``."""
    for render in (str, repr):
        try:
            text = render(value)
        except Exception as exc:  # noqa: BLE001 - user __str__ / __repr__ may raise anything
            report_host_error(f"__{render.__name__}__()", exc)
            continue
        if type(text) is str:
            return truncate(text, limit)[0]
    return truncate(_unrepresentable(value), limit)[0]


def _decode(data: bytes | bytearray | memoryview, limit: int) -> tuple[str, bool]:
    """Decode UTF-8 (invalid bytes become U+FFFD), reading at most ``4 * limit`` bytes of a long value."""
    if type(data) is memoryview:
        try:
            data = data.cast("B")
        except Exception:  # noqa: BLE001 - a non-contiguous view: copy it
            data = data.tobytes()
    size = len(data)
    if size <= limit:  # a character takes at least one byte, so this always fits
        return str(data, "utf-8", "replace"), False
    window = data[: 4 * limit]  # a character takes at most four bytes: enough for `limit` of them
    text = str(window, "utf-8", "surrogateescape")
    if len(window) == size and len(text) <= limit:
        return str(data, "utf-8", "replace"), False
    # surrogateescape maps each invalid byte to one character, so re-encoding what we keep counts its bytes
    # exactly; decoding that with "replace" yields at most as many characters and no lone surrogates.
    kept = text[:limit].encode("utf-8", "surrogateescape")
    return kept.decode("utf-8", "replace") + _marker(size - len(kept), "bytes"), True


def _cap(text: str, budget: _Allowance) -> str:
    if len(text) <= budget.chars:
        budget.chars -= len(text)
        return text
    room = max(budget.chars, 0)
    budget.chars = 0
    return truncate(text, room)[0]


def _key(key: object) -> str:
    if type(key) is str:
        return key if len(key) <= _KEY_LIMIT else truncate(key, _KEY_LIMIT)[0]
    if key is None or type(key) is bool:
        return json.dumps(key)  # as json.dumps writes such keys: "null", "true"
    return _text_of(key, _KEY_LIMIT)


def _plain(value: object, depth: int, budget: _Allowance, limit: int, active: set[int]) -> Any:
    """Return a JSON-safe copy of ``value``, bounded by depth, the budget and reference cycles."""
    budget.nodes -= 1
    if budget.nodes < 0:
        return _ELLIPSIS
    cls = type(value)
    if value is None or cls is bool or cls is float or cls is int or cls is str:
        if cls is str:
            return _cap(value, budget)  # type: ignore[arg-type]
        if cls is float:
            return value if math.isfinite(value) else None  # type: ignore[arg-type]
        return value if cls is not int or -_INT_MAX < value < _INT_MAX else _scalar_text(value)  # type: ignore[operator]
    if isinstance(value, (Mapping, *_CONTAINERS)):
        if depth >= _MAX_DEPTH:
            return _ELLIPSIS
        if id(value) in active:
            return "<recursive>"
        active.add(id(value))
        try:
            return _plain_container(value, depth, budget, limit, active)
        except Exception:  # noqa: BLE001 - a container whose iteration raises
            return _unrepresentable(value)
        finally:
            active.discard(id(value))
    return _plain_other(value, budget, limit)


def _plain_container(value: object, depth: int, budget: _Allowance, limit: int, active: set[int]) -> Any:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if budget.nodes <= 0 or budget.chars <= 0:
                out[_ELLIPSIS] = _ELLIPSIS
                break
            out[_key(k)] = _plain(v, depth + 1, budget, limit, active)
        return out
    items: list[Any] = []
    for v in value:  # type: ignore[attr-defined]
        if budget.nodes <= 0 or budget.chars <= 0:
            items.append(_ELLIPSIS)
            break
        items.append(_plain(v, depth + 1, budget, limit, active))
    return items


def _plain_other(value: object, budget: _Allowance, limit: int) -> Any:
    cls = type(value)
    if isinstance(value, str):
        return _cap(str.__str__(value), budget)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _cap(_decode(value, limit)[0], budget)
    if not hasattr(cls, "__len__"):  # numbers, but not numpy arrays (which have __float__ too)
        if hasattr(cls, "__index__"):  # IntEnum, numpy / torch integer scalars
            try:
                number = int(value)  # type: ignore[call-overload]
                return number if -_INT_MAX < number < _INT_MAX else _scalar_text(number)
            except Exception:  # noqa: BLE001 - a broken __index__: show its text
                pass
        elif hasattr(cls, "__float__"):  # numpy floats, Decimal, Fraction
            return finite_float(value)
    return _cap(_text_of(value, limit), budget)


# --- content parts ------------------------------------------------------------------------------------------


def content_text(content: object, limit: int, *, typed_parts: bool = False) -> str | None:
    """Return a message's content: a string, or the text parts of a list of content parts, newline-joined.

    The one reader of content parts (for the query and answer rules). A part is a string, a
    mapping with a ``"text"`` string (OpenAI's, Anthropic's ``{"type": "text", "text": ...}``) or a GenAI part
    ``{"type": "text", "content": ...}``; other typed parts (images, tool calls) are skipped. A list holding
    anything else is not content parts (``None``). With ``typed_parts`` (a bare list, not known to be a
    message's content), the list counts as content parts only when it holds a part with a ``"type"``, so a
    plain list of strings stays data.
    """
    if type(content) is str:
        return content
    if type(content) is not list and type(content) is not tuple:
        return None
    texts: list[str] = []
    for part in content[:_MAX_MESSAGES]:
        text = part if type(part) is str else part.get("text") if isinstance(part, Mapping) else None
        if text is None and isinstance(part, Mapping) and part.get("type") == "text":
            text = part.get("content")  # a GenAI message part
        if type(text) is str:
            texts.append(text)
        elif not isinstance(part, Mapping) or "type" not in part:
            return None  # neither a text nor a typed part (an image, a tool call): not content parts
        typed_parts = typed_parts and not (isinstance(part, Mapping) and "type" in part)
    return None if typed_parts else _join(texts, limit)


def _join(texts: Iterable[str | None], limit: int) -> str | None:
    """Join the non-empty texts with newlines, stopping once ``limit`` characters are reached."""
    kept: list[str] = []
    size = 0
    for text in texts:
        if text:
            kept.append(text)
            size += len(text) + 1
            if size > limit:
                break
    return "\n".join(kept) if kept else None


def _metadata_json(mapping: Mapping[Any, Any], limit: int) -> str:
    budget = _Allowance(limit)
    whole = _plain(mapping, 0, budget, limit, set())
    if type(whole) is dict:  # not a placeholder string for a mapping that could not be read
        encoded = _encode(whole)
        if len(encoded) <= limit:  # the common case: small metadata, one pass
            return encoded
    budget.nodes = _MAX_NODES  # too long: write it key by key, cutting what does not fit
    parts: list[str] = []
    used = 2  # the braces
    left_out = 0
    for count, (key, value) in enumerate(mapping.items()):
        if count >= _MAX_NODES or used >= limit:
            left_out += _remaining(mapping, count)
            break
        name = _encode(_key(key))
        room = limit - used - len(name) - 4 - _NOTE_ROOM  # ": " here, ", " before the next key, the note
        text: str | None
        if type(value) is str and len(value) > room:
            text = _squeeze(value, room)  # cut once, from the original, so the marker counts right
        else:
            budget.chars = room  # each value may use what is left; values visited are counted across all
            plain = _plain(value, 1, budget, limit, {id(mapping)})
            text = _encode(plain)
            if len(text) > room:
                text = _squeeze(plain if type(plain) is str else text, room)
        if text is None:
            left_out += 1
            continue
        parts.append(f"{name}: {text}")
        used += len(parts[-1]) + 2
    if left_out:
        note = f'"_cp_truncated": {left_out}'
        while parts and used + len(note) + 2 > limit:
            used -= len(parts.pop()) + 2
            left_out += 1
            note = f'"_cp_truncated": {left_out}'
        parts.append(note)
    return "{" + ", ".join(parts) + "}"


def _remaining(mapping: Mapping[Any, Any], seen: int) -> int:
    try:
        return max(len(mapping) - seen, 1)
    except Exception:  # noqa: BLE001 - a mapping without a working len
        return 1


def _squeeze(text: str, room: int) -> str | None:
    """Return ``text`` cut to fit ``room`` characters as a JSON string; ``None`` when it cannot."""
    cut = room - 2 - MARKER_MAX
    for _ in range(4):
        if cut <= 0:
            return None
        squeezed = _encode(truncate(text, cut)[0])
        if len(squeezed) <= room:
            return squeezed
        cut -= len(squeezed) - room + 8  # escaping made it longer; shrink by the overshoot and retry
    return None
