"""The settings' fields and their validator, without pydantic: types from strings, bounds, secrets.

``configure()`` runs while the host starts, and pydantic cost it about 90 ms (its import plus building the
model); a dozen scalar fields do not need it. A setting is a dataclass field declared with ``setting()``
(default, description, bounds); ``FieldTable`` lists a settings class's fields once, with their types, for
``resolve()``, the ``serve`` flags and the tests. ``SettingField.coerce`` accepts and refuses what pydantic's
lax mode did for these types, so no value that used to configure now fails, or the reverse
(``tests/wiring/test_settings_fields.py`` compares the two on the same inputs):

- ``int``: an int, a bool, a whole finite float, or a string of ASCII digits (sign, ``_`` between digits,
  surrounding whitespace and a ``.0`` tail allowed);
- ``float``: a number, or a string Python's ``float()`` reads whose characters are ASCII (``inf``, ``nan``
  and exponents included; ``nan`` then fails every bound);
- ``bool``: a bool, 0 or 1, or one of ``true/false, t/f, yes/no, y/n, on/off, 1/0`` in any case, unpadded;
- ``str``: a string (bytes are decoded as UTF-8); ``Secret``: a string, or any secret with
  ``get_secret_value()`` (pydantic's ``SecretStr`` included).

Error messages name the field and never quote a secret's value.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, TypeVar, cast

__all__ = ["FieldTable", "Secret", "SettingField", "setting"]

_T = TypeVar("_T")
_SPEC: Final = "cp_observe.setting"
_INT_TEXT: Final = re.compile(r"([+-]?[0-9]+(?:_[0-9]+)*)(?:\.0+)?")
_TRUE: Final = frozenset({"true", "t", "yes", "y", "on", "1"})
_FALSE: Final = frozenset({"false", "f", "no", "n", "off", "0"})
_INT64: Final = 2**63  # pydantic turns a float into an int only within the 64-bit range
_SHOWN: Final = 80  # characters of a refused value quoted in an error


class Secret:
    """A string that never shows itself: ``str()`` and ``repr()`` print stars, as pydantic's ``SecretStr`` did."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        """The secret itself, for the one place that sends it."""
        return self._value

    def __str__(self) -> str:
        return "**********" if self._value else ""

    def __repr__(self) -> str:
        return f"Secret('{self}')"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def setting(
    default: _T,
    description: str,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    pattern: str | None = None,
    check: Callable[[Any], str | None] | None = None,
    processor: bool = False,
) -> _T:
    """Declare one setting: its default, the one-line description, bounds, a regex or a check.

    ``check(value)`` returns an error message, or ``None`` when the (already typed) value is fine.
    ``processor=True``: ``ContextPrecisionProcessor`` takes it too, as a keyword of the same name and default
    (its options object, ``Settings``, carries it to the code that reads it).
    """
    declared = {"description": description, "gt": gt, "ge": ge, "le": le, "pattern": pattern, "check": check,
                "processor": processor}
    return dataclasses.field(default=default, metadata={_SPEC: declared})


class SettingField:
    """One setting as declared: what pydantic's ``FieldInfo`` told its readers, plus the validator.

    A plain class, not a dataclass: building a dataclass costs about a millisecond at import.
    """

    __slots__ = ("annotation", "check", "default", "description", "ge", "gt", "kind", "le", "name", "optional",
                 "pattern", "processor")

    def __init__(
        self,
        name: str,
        annotation: Any,
        default: Any,
        *,
        description: str,
        kind: type[Any],
        optional: bool,
        gt: float | None = None,
        ge: float | None = None,
        le: float | None = None,
        pattern: str | None = None,
        check: Callable[[Any], str | None] | None = None,
        processor: bool = False,
    ) -> None:
        self.name = name
        self.annotation = annotation  # the declared type: str, int, float, bool or Secret, or one of them | None
        self.default = default
        self.description = description
        self.kind = kind  # the annotation without its None
        self.optional = optional
        self.gt, self.ge, self.le, self.pattern, self.check = gt, ge, le, pattern, check
        self.processor = processor  # also a ContextPrecisionProcessor keyword

    def __repr__(self) -> str:
        bounds = "".join(f", {key}={getattr(self, key)!r}" for key in ("gt", "ge", "le", "pattern")
                         if getattr(self, key) is not None)
        return f"SettingField({self.name!r}, {self.annotation}, default={self.default!r}{bounds})"

    @property
    def secret(self) -> bool:
        """Whether the value must never be shown (in a repr, a log line or an error)."""
        return self.kind is Secret

    def shown(self, value: object, *, as_text: bool = False) -> str:
        """``value`` as an error or a log line may quote it: ``***`` for a secret, else a short repr (``as_text``:
        a string as it is, so a log field holds the text that was set).
        """
        if self.secret:
            return "***"
        return (value if as_text and isinstance(value, str) else repr(value))[:_SHOWN]

    def coerce(self, value: object) -> Any:
        """``value`` as this field's type, within its bounds.

        Raises:
            ValueError: the value does not fit; the message names no secret.
        """
        if value is None:
            if self.optional:
                return None
            raise ValueError(f"must be {_WHAT[self.kind]}, not None")
        typed = _COERCE[self.kind](value)
        problem = self._bound_problem(typed)
        if problem is None and self.check is not None:
            problem = self.check(typed)
        if problem is not None:
            raise ValueError(problem)
        return typed

    def _bound_problem(self, value: Any) -> str | None:
        if self.gt is not None and not value > self.gt:
            return f"must be > {self.gt}"
        if self.ge is not None and not value >= self.ge:
            return f"must be >= {self.ge}"
        if self.le is not None and not value <= self.le:
            return f"must be <= {self.le}"
        if self.pattern is not None and not re.search(self.pattern, value):
            return f"must match {self.pattern}"
        return None


class FieldTable:
    """``SomeSettings.model_fields``: name -> ``SettingField``, in declaration order, built once per class.

    Named as pydantic named it, so the code and tests that read a settings class's fields (the ``serve``
    flags, the README and deployment checks) read these unchanged.
    """

    def __get__(self, instance: object, owner: type[Any]) -> Mapping[str, SettingField]:
        table = owner.__dict__.get("_cp_observe_fields")
        if table is None:  # a benign race: two threads build equal tables
            table = _build(owner)
            type.__setattr__(owner, "_cp_observe_fields", table)
        return cast(Mapping[str, SettingField], table)


def _build(owner: type[Any]) -> Mapping[str, SettingField]:
    hints = typing.get_type_hints(owner)
    table: dict[str, SettingField] = {}
    for field in dataclasses.fields(owner):
        declared = field.metadata[_SPEC]
        annotation = hints[field.name]
        members = typing.get_args(annotation)  # (X, NoneType) for ``X | None``; () for a plain type
        optional = type(None) in members
        kinds = [member for member in members if member is not type(None)] or [annotation]
        if len(kinds) > 1 or kinds[0] not in _COERCE:
            raise TypeError(f"setting {field.name}: unsupported type {annotation}")
        table[field.name] = SettingField(field.name, annotation, field.default, kind=kinds[0], optional=optional,
                                         **declared)
    return MappingProxyType(table)


def _text(value: object) -> str | None:
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def _to_str(value: object) -> str:
    text = _text(value)
    if text is None:
        raise ValueError("must be a string")
    return text


def _to_secret(value: object) -> Secret:
    if isinstance(value, Secret):
        return value
    reveal = getattr(value, "get_secret_value", None)
    if callable(reveal):
        value = reveal()
    if isinstance(value, str):
        return Secret(str(value))
    raise ValueError("must be a string")


def _to_int(value: object) -> int:
    if isinstance(value, int):
        return int(value)  # bool too: True is 1
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < _INT64:
            return int(value)
        raise ValueError("must be a whole number")
    text = _text(value)
    match = _INT_TEXT.fullmatch(text.strip()) if text is not None else None
    if match is None:
        raise ValueError("must be a whole number")
    return int(match.group(1))


def _to_float(value: object) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    text = _text(value)
    if text is not None and text.strip().isascii():
        if "_" in text:
            # pydantic's rule for underscores (not Python's, which wants them between digits): no surrounding
            # space, none at either end and never two together; the rest are dropped ("1_.5", "1_e5" and
            # "in_f" read as numbers).
            if text != text.strip() or text.startswith("_") or text.endswith("_") or "__" in text:
                raise ValueError("must be a number")
            text = text.replace("_", "")
        try:
            return float(text)
        except ValueError:
            pass
    raise ValueError("must be a number")


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    text = _text(value)
    if text is not None and text.lower() in _TRUE:
        return True
    if text is not None and text.lower() in _FALSE:
        return False
    raise ValueError("must be a boolean (true/false, yes/no, on/off, 1/0)")


_COERCE: Final[Mapping[type[Any], Callable[[object], Any]]] = {
    str: _to_str, int: _to_int, float: _to_float, bool: _to_bool, Secret: _to_secret,
}
_WHAT: Final[Mapping[type[Any], str]] = {
    str: "a string", int: "a whole number", float: "a number", bool: "a boolean", Secret: "a string",
}
