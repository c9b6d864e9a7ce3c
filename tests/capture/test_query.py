"""One query rule: the decorators, the offline scorer and the conventions' JSON inputs read the same query."""

from __future__ import annotations

import json
from typing import Any

import pytest

import cp_observe
from cp_observe import _names as n
from cp_observe._capture._answer import query_in, query_text
from cp_observe._capture._conventions import query_of
from cp_observe._offline._scorer import ContextPrecisionOptions, ContextPrecisionScorer
from cp_observe.testing import FakeJudge
from tests.conftest import Otel

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "first question"},
    {"role": "assistant", "content": "an answer"},
    {"role": "user", "content": [{"type": "text", "text": "capital"}, {"type": "image_url"}, "of France?"]},
]

#: Values a query can arrive as (a decorated call's argument, a scorer input, a span's JSON input), with the
#: query the rule gives.
VALUES: list[tuple[str, Any, str]] = [
    ("string", "capital of France?", "capital of France?"),
    ("query_before_question", {"question": "Q", "query": "capital?"}, "capital?"),
    ("llamaindex_query_str", {"query_str": "capital?", "custom_embedding_strs": None}, "capital?"),
    ("query_before_messages", {"messages": CHAT, "query": "capital?"}, "capital?"),
    ("last_user_message", CHAT, "capital\nof France?"),
    ("messages_under_a_field", {"input": {"messages": CHAT[:2]}}, "first question"),
    ("genai_parts", [{"role": "user", "parts": [{"type": "text", "content": "g?"}]}], "g?"),
    ("strings", ["one", "two"], "one\ntwo"),
    ("blank_field_skipped", {"query": " ", "question": "Q"}, "Q"),
    ("data_is_its_own_text", {"filters": {"year": 2024}}, '{"filters": {"year": 2024}}'),
]


@pytest.mark.parametrize(("label", "value", "expected"), VALUES, ids=[v[0] for v in VALUES])
def test_rule(label: str, value: Any, expected: str) -> None:
    """Each documented shape gives the documented query; a value naming none is its own text."""
    assert query_text(value) == expected
    assert query_in(value) == (None if label == "data_is_its_own_text" else expected)


@pytest.mark.parametrize(("label", "value", "expected"), VALUES, ids=[v[0] for v in VALUES])
def test_decorator_scorer_and_conventions_read_the_same_query(
    otel: Otel, cp_observe_judge: FakeJudge, label: str, value: Any, expected: str
) -> None:
    """The same value as ``@retriever``'s argument, the scorer's input and each span convention gives one query."""
    processor = otel.processor(cp_observe_judge)

    @cp_observe.retriever(name="kb")
    def search(query: Any) -> list[str]:
        return ["Paris is the capital of France."]

    search(value)
    assert processor.force_flush(10_000)
    [call] = cp_observe_judge.calls
    offline = FakeJudge()
    ContextPrecisionScorer(offline, ContextPrecisionOptions(context=["Paris."])).run(input=value, output="Paris.")
    text = json.dumps(value)
    routes = {
        "input.value": {n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.INPUT_VALUE: text,
                        n.INPUT_MIME_TYPE: n.MIME_JSON},
        "traceloop.entity.input": {n.TRACELOOP_ENTITY_INPUT: text},
    }
    found = {route: query_of(attributes) for route, attributes in routes.items()}
    if label == "data_is_its_own_text":  # the span's own JSON text, as recorded
        assert found == {"input.value": text, "traceloop.entity.input": None}
    else:
        assert found == dict.fromkeys(routes, expected)
    assert call.query == offline.calls[0].query == expected


def test_a_json_input_value_without_a_mime_type() -> None:
    """An ``input.value`` that starts like JSON is parsed; one that does not parse is its own text."""
    assert query_of({n.INPUT_VALUE: json.dumps(CHAT)}) == "capital\nof France?"
    assert query_of({n.INPUT_VALUE: "[draft] capital?"}) == "[draft] capital?"
    assert query_of({n.INPUT_VALUE: json.dumps({"tags": []})}) == json.dumps({"tags": []})
