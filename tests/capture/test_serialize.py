"""Safe, bounded text and metadata JSON: every shape of query and answer, and hostile input that never raises."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cp_observe._capture._answer import query_text
from cp_observe._capture._serialize import (
    MARKER_MAX,
    finite_float,
    metadata_json,
    safe_str,
    safe_text,
    truncate,
    type_name,
)


class Hostile:
    """Raises from every way of turning it into text, and from every attribute read."""

    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")

    def __str__(self) -> str:
        raise RuntimeError("str exploded")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # let pytest and hypothesis introspect it
            raise AttributeError(name)
        raise RuntimeError(f"{name} exploded")


class BadFloat:
    """Claims to be a number, then raises when converted."""

    def __float__(self) -> float:
        raise ValueError("no float today")


@dataclass
class LangChainMessage:
    """A chat message as LangChain's ``BaseMessage``: ``content`` is a string or a list of content blocks."""

    content: str | list[Any]
    type: str = "ai"


@dataclass
class TextOnly:
    """A message exposing only ``.text`` (Haystack 2.x ``ChatMessage.text``)."""

    text: str


# --- truncate -------------------------------------------------------------------------------------------------


def test_truncate_returns_fitting_text_itself() -> None:
    """A text within the limit comes back as the same object, marked as not cut."""
    text = "a" * 10
    out, cut = truncate(text, 10)
    assert out is text
    assert not cut


def test_truncate_cuts_and_counts_exactly() -> None:
    """The first ``limit`` characters are kept and the marker counts the characters cut."""
    out, cut = truncate("abcdefghij", 4)
    assert cut
    assert out == "abcd…[truncated 6 chars]"


@pytest.mark.parametrize("limit", [0, -5])
def test_truncate_at_zero_or_negative_limit(limit: int) -> None:
    """A limit of zero or below keeps nothing but the marker."""
    assert truncate("abc", limit) == ("…[truncated 3 chars]", True)


def test_truncate_bad_limit_and_bad_text_do_not_raise() -> None:
    """A non-integer limit falls back to a bounded default and a non-str text is converted."""
    assert truncate("abc", "ten")[0] == "abc"  # type: ignore[arg-type]
    assert truncate(12345, 3) == ("123…[truncated 2 chars]", True)  # type: ignore[arg-type]


def test_marker_max_bounds_every_marker() -> None:
    """``MARKER_MAX`` is at least as long as the marker for the largest possible count."""
    marker = truncate("x" * 100, 0)[0]
    assert len(marker) <= MARKER_MAX
    assert len(f"…[truncated {sys.maxsize} bytes]") <= MARKER_MAX


def test_ten_megabyte_string_is_cut_fast_and_bounded() -> None:
    """A 10 MB string is cut to the limit plus the marker."""
    out = safe_str("é" * 10_000_000, 1000)
    assert len(out) <= 1000 + MARKER_MAX
    assert out.endswith(f"[truncated {10_000_000 - 1000} chars]")


# --- safe_str: the shapes of queries and answers ----------------------------------------------------------------


def test_str_is_itself() -> None:
    """A string within the limit is returned as is."""
    query = "what is the refund window?"
    assert safe_str(query, 100) is query


@pytest.mark.parametrize("value", [b"caf\xc3\xa9", bytearray(b"caf\xc3\xa9"), memoryview(b"caf\xc3\xa9")])
def test_bytes_like_decode_as_utf8(value: bytes | bytearray | memoryview) -> None:
    """Bytes, bytearray and memoryview decode as UTF-8."""
    assert safe_str(value, 100) == "café"


def test_invalid_utf8_is_replaced() -> None:
    """Invalid bytes become U+FFFD instead of raising."""
    assert safe_str(b"ok \xff\xfe", 100) == "ok \ufffd\ufffd"


def test_long_bytes_are_cut_on_a_character_boundary_and_count_bytes() -> None:
    """Oversized bytes keep at most ``limit`` characters, never half a character, and count bytes cut."""
    data = "é".encode() * 1000  # 2000 bytes
    out, cut = safe_text(data, 10)
    assert cut
    assert out == "é" * 10 + "…[truncated 1980 bytes]"
    assert "\ufffd" not in out


def test_huge_invalid_bytes_are_bounded() -> None:
    """Ten megabytes of invalid UTF-8 read only a window and stay within the bound."""
    out = safe_str(b"\xff" * 10_000_000, 50)
    assert len(out) <= 50 + MARKER_MAX
    assert out.startswith("\ufffd" * 50)


def test_non_contiguous_memoryview() -> None:
    """A strided memoryview is copied, then decoded."""
    view = memoryview(b"aXbXcX")[::2]
    assert safe_str(view, 10) == "abc"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, "3"), (2.5, "2.5"), (True, "True"), (float("nan"), "nan"), (Decimal("1.10"), "1.10")],
)
def test_numbers_and_bools_are_str(value: object, expected: str) -> None:
    """Numbers and booleans give their ``str``."""
    assert safe_str(value, 100) == expected


def test_int_too_long_for_str_does_not_raise() -> None:
    """An integer beyond Python's digit limit for ``str`` becomes a short description."""
    assert safe_str(10**5000, 100).startswith("<int of ")


def test_openai_message_dict_gives_its_content() -> None:
    """A chat message mapping, as a query, gives its ``content``; ``safe_str`` shows it as data."""
    assert query_text({"role": "user", "content": "hello"}) == "hello"
    assert json.loads(safe_str({"role": "user", "content": "hello"}, 100)) == {"role": "user", "content": "hello"}


def test_content_parts_join_text_and_skip_images() -> None:
    """Content parts give their text parts joined by newlines; image parts are skipped."""
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "look at this"},
            {"type": "image_url", "image_url": {"url": "data:..."}},
            {"type": "text", "text": "and this"},
        ],
    }
    assert query_text(message) == "look at this\nand this"


def test_bare_content_parts_list_gives_text() -> None:
    """A list of typed content parts passed as the query itself gives its text."""
    assert query_text([{"type": "text", "text": "q"}]) == "q"


def test_list_of_messages_gives_the_last_user_message() -> None:
    """A conversation gives its last user message, as the query rule says."""
    conversation = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        LangChainMessage("hello"),
        TextOnly("bye"),
    ]
    assert query_text(conversation) == "hi"
    assert query_text([LangChainMessage("hello"), TextOnly("bye")]) == "bye"  # no roles: the last with text


def test_langchain_message_with_content_blocks() -> None:
    """A LangChain message whose content is a list of blocks gives the text blocks."""
    assert query_text(LangChainMessage(["plain", {"type": "text", "text": "block"}])) == "plain\nblock"


def test_tool_call_message_without_content_falls_back_to_json() -> None:
    """A message with ``content: None`` is shown as JSON, so the tool call is visible."""
    out = query_text({"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]})
    assert json.loads(out)["tool_calls"] == [{"id": "1"}]


def test_plain_dict_and_list_become_json() -> None:
    """Data that is not a message becomes compact, non-ASCII-escaping JSON."""
    assert json.loads(safe_str({"a": [1, "é"]}, 100)) == {"a": [1, "é"]}
    assert "é" in safe_str({"a": "é"}, 100)
    assert json.loads(safe_str(["x", "y"], 100)) == ["x", "y"]


def test_json_with_odd_values() -> None:
    """NaN becomes null, bytes decode, odd keys become strings and odd values their ``str``."""
    out = json.loads(safe_str({1: float("nan"), None: b"b", "obj": Fraction(1, 4), "set": {3}}, 200))
    assert out == {"1": None, "null": "b", "obj": 0.25, "set": [3]}


def test_plain_object_gives_its_str() -> None:
    """An object that is no message gives its ``str``, unquoted."""

    class Answer:
        def __str__(self) -> str:
            return "forty-two"

    assert safe_str(Answer(), 100) == "forty-two"


def test_object_whose_str_raises_falls_back_to_repr() -> None:
    """When ``__str__`` raises, ``repr`` is used."""

    class Half:
        def __str__(self) -> str:
            raise RuntimeError

        def __repr__(self) -> str:
            return "Half()"

    assert safe_str(Half(), 100) == "Half()"


def test_hostile_object_gives_placeholder() -> None:
    """An object whose str, repr and attributes all raise gives a placeholder naming its type."""
    assert safe_str(Hostile(), 100) == "<unrepresentable Hostile>"
    assert json.loads(safe_str([Hostile()], 100)) == ["<unrepresentable Hostile>"]


def test_recursive_list_and_dict_terminate() -> None:
    """Self-referencing containers are marked instead of recursing forever."""
    items: list[Any] = [1]
    items.append(items)
    mapping: dict[str, Any] = {}
    mapping["self"] = mapping
    assert json.loads(safe_str(items, 100)) == [1, "<recursive>"]
    assert json.loads(safe_str(mapping, 100)) == {"self": "<recursive>"}


def test_deep_nesting_is_depth_limited() -> None:
    """Nesting far deeper than the depth limit is cut, not recursed into."""
    value: Any = "leaf"
    for _ in range(10_000):
        value = [value]
    out = safe_str(value, 1000)
    assert "…" in out
    assert "leaf" not in out


def test_wide_structure_is_bounded() -> None:
    """A million-element list costs a bounded conversion and is cut to the limit."""
    out = safe_str(list(range(1_000_000)), 200)
    assert len(out) <= 200 + MARKER_MAX


def test_bad_limit_does_not_raise() -> None:
    """A limit that is not an integer still gives bounded text."""
    assert safe_str("x" * 5000, None) == "x" * 1000 + "…[truncated 4000 chars]"  # type: ignore[arg-type]


def test_type_name_of_hostile_metaclass() -> None:
    """``type_name`` falls back when a metaclass makes ``__qualname__`` raise."""

    class Meta(type):
        def __getattribute__(cls, name: str) -> Any:
            if name == "__qualname__":
                raise RuntimeError
            return super().__getattribute__(name)

    assert type_name(Meta("X", (), {})()) == "object"


# --- finite_float ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.5, 0.5),
        (3, 3.0),
        (Decimal("0.25"), 0.25),
        (Fraction(1, 2), 0.5),
        (float("nan"), None),
        (float("inf"), None),
        (-math.inf, None),
        (10**400, None),
        (True, None),
        ("0.5", None),
        (b"1", None),
        (None, None),
        (object(), None),
        (BadFloat(), None),
        (Hostile(), None),
    ],
)
def test_finite_float(value: object, expected: float | None) -> None:
    """Real numbers become floats; NaN, infinities, bools, strings and failures become None."""
    assert finite_float(value) == expected


def test_finite_float_numpy_scalars() -> None:
    """numpy scalars convert through ``__float__``; a NaN one does not."""
    import numpy as np
    assert finite_float(np.float32(0.5)) == 0.5
    assert finite_float(np.int64(7)) == 7.0
    assert finite_float(np.float64("nan")) is None
    assert finite_float(np.array([1.0, 2.0])) is None


# --- metadata_json --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, {}, [], ""])
def test_metadata_json_empty_is_none(value: object) -> None:
    """No metadata, or empty metadata, gives None."""
    assert metadata_json(value, 1000) is None


def test_metadata_json_round_trips_plain_metadata() -> None:
    """Plain JSON metadata comes back as the same object."""
    meta = {"source": "handbook.pdf", "page": 3, "tags": ["a", "b"], "score": 0.5, "ok": True}
    assert json.loads(metadata_json(meta, 1000) or "") == meta


def test_metadata_json_converts_odd_values() -> None:
    """Keys become strings, NaN and infinities null, objects their ``str``, hostile ones a placeholder."""
    out = json.loads(metadata_json({1: math.nan, "inf": -math.inf, "h": Hostile(), "d": Decimal("2")}, 1000) or "")
    assert out == {"1": None, "inf": None, "h": "<unrepresentable Hostile>", "d": 2.0}


def test_metadata_json_recursive() -> None:
    """A metadata mapping that contains itself terminates."""
    meta: dict[str, Any] = {"a": 1}
    meta["me"] = meta
    assert json.loads(metadata_json(meta, 1000) or "") == {"a": 1, "me": "<recursive>"}


def test_metadata_json_non_mapping_is_wrapped() -> None:
    """A non-mapping value is kept as ``{"value": ...}``."""
    assert json.loads(metadata_json([1, 2], 100) or "") == {"value": [1, 2]}


@pytest.mark.parametrize("limit", [0, 64, 100, 300, 5000])
def test_metadata_json_is_valid_and_bounded(limit: int) -> None:
    """Oversized metadata stays valid JSON within ``max(limit, 64)`` and counts the keys it left out."""
    meta = {f"k{i}": "v" * 200 for i in range(50)} | {"quote": '"' * 500, "nested": {"x": ["y" * 900]}}
    out = metadata_json(meta, limit)
    assert out is not None
    assert len(out) <= max(limit, 64)
    parsed = json.loads(out)
    assert parsed.get("_cp_truncated", 0) >= 1


def test_metadata_json_long_string_value_is_cut_not_dropped() -> None:
    """A single long string value is cut to fit, with the marker counting the original's characters."""
    out = json.loads(metadata_json({"window": "w" * 5000}, 300) or "")
    assert out["window"].startswith("w" * 100)
    assert out["window"].endswith("chars]")
    assert str(5000 - out["window"].index("…")) in out["window"]


def test_metadata_json_items_raising_gives_none() -> None:
    """A mapping whose iteration raises gives None instead of raising."""

    class Broken(dict[str, Any]):
        def items(self) -> Any:
            raise RuntimeError

        def __iter__(self) -> Any:
            raise RuntimeError

    assert metadata_json(Broken(a=1), 100) is None


# --- properties -------------------------------------------------------------------------------------------------


class Odd:
    """An object of no known shape, optionally with a hostile ``__str__``."""

    def __init__(self, explode: bool) -> None:
        self.explode = explode

    def __str__(self) -> str:
        if self.explode:
            raise RuntimeError("boom")
        return "odd"


leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.binary()
    | st.decimals()
    | st.builds(Odd, st.booleans())
    | st.builds(Hostile)
)
values = st.recursive(
    leaves,
    lambda children: (
        st.lists(children)
        | st.tuples(children, children)
        | st.dictionaries(st.text() | st.integers(), children)
        | st.builds(LangChainMessage, st.text() | st.lists(children))
    ),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(value=values, limit=st.integers(min_value=-5, max_value=300))
def test_safe_str_never_raises_and_is_bounded(value: object, limit: int) -> None:
    """Any JSON-like value, with odd objects mixed in, gives a str within ``limit + MARKER_MAX``."""
    out, cut = safe_text(value, limit)
    assert type(out) is str
    assert len(out) <= max(limit, 0) + MARKER_MAX
    assert safe_str(value, limit) == out
    if not cut:
        assert len(out) <= max(limit, 0) or out.startswith("<unrepresentable")


@settings(max_examples=200, deadline=None)
@given(value=values, limit=st.integers(min_value=-5, max_value=400))
def test_metadata_json_never_raises_and_is_valid(value: object, limit: int) -> None:
    """Any value gives None or a valid JSON object within ``max(limit, 64)`` characters."""
    out = metadata_json(value, limit)
    if out is not None:
        assert len(out) <= max(limit, 64)
        assert isinstance(json.loads(out), dict)


@settings(max_examples=100, deadline=None)
@given(value=values)
def test_finite_float_never_raises(value: object) -> None:
    """Any value gives None or a finite float."""
    out = finite_float(value)
    assert out is None or (type(out) is float and math.isfinite(out))
