"""One answer rule: the decorators, the offline scorer and every tracing convention judge against the same text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cp_observe import _names as n
from cp_observe._capture._answer import ANSWER_FIELDS, MAX_ITEMS, answer_of, answer_text, query_text
from cp_observe._capture._serialize import content_text
from cp_observe._offline._scorer import message_text
from cp_observe.testing import FakeJudge
from tests.conftest import Otel
from tests.turn_support import make_turn


class Reply:
    """An agent result object with both ``content`` and ``answer``."""

    def __init__(self) -> None:
        self.content = "raw model message"
        self.answer = "the final answer"


class Message:
    """A chat message object (as chat SDKs return), read through its ``role`` and ``content`` attributes."""

    def __init__(self, role: str, content: str | None) -> None:
        self.role = role
        self.content = content


TRANSCRIPT = [
    {"role": "user", "content": "q?"},
    {"role": "assistant", "content": "Let me look that up."},
    {"role": "tool", "content": "Paris"},
    {"role": "assistant", "content": "A."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
]

#: Values any convention can carry (JSON), with the answer the rule gives (``None``: no answer).
VALUES: list[tuple[str, Any, str | None]] = [
    ("string", "Paris is the capital.", "Paris is the capital."),
    ("output_before_response", {"output": "OUT", "response": "RESP"}, "OUT"),
    ("result", {"result": "R"}, "R"),
    ("answer_before_content", {"content": "raw model message", "answer": "the final answer"}, "the final answer"),
    ("blank_field_skipped", {"answer": "  ", "text": "T"}, "T"),
    ("message", {"role": "assistant", "content": "Paris."}, "Paris."),
    ("content_parts", {"content": [{"type": "text", "text": "Par"}, {"type": "image_url"}, "is"]}, "Par\nis"),
    ("last_assistant_message", TRANSCRIPT, "A."),
    ("no_assistant_last_message", [{"role": "user", "content": "q?"}, {"role": "tool", "content": "T"}], "T"),
    ("genai_parts", [{"role": "assistant", "parts": [{"type": "text", "content": "g"}], "finish_reason": "stop"}],
     "g"),
    ("nested_one_level", {"output": {"answer": "nested"}}, "nested"),
    ("messages_under_a_field", {"output": TRANSCRIPT}, "A."),
    ("at_max_depth", {"output": {"output": {"output": {"answer": "deep"}}}}, "deep"),
    ("beyond_max_depth", {"output": {"output": {"output": {"output": {"answer": "deep"}}}}}, None),
    ("strings", ["one", "two"], "one\ntwo"),
    ("data_is_no_answer", {"items": [1, 2], "count": 2}, None),
    ("numbers_are_no_messages", [1, 2, 3], None),
    ("json_null", None, None),
    ("blank", "   ", None),
]
OUTPUTS: list[tuple[str, Any, str | None]] = [
    *VALUES,
    ("object", Reply(), "the final answer"),
    ("message_objects", [Message("user", "q?"), Message("assistant", "A."), Message("assistant", None)], "A."),
    ("bytes", "é".encode(), "é"),
    ("number", 42, "42"),
]


@pytest.mark.parametrize(("label", "output", "expected"), OUTPUTS, ids=[o[0] for o in OUTPUTS])
def test_rule(label: str, output: Any, expected: str | None) -> None:
    """Each documented shape gives the documented text (``None``: no answer)."""
    assert answer_text(output, 1_000) == expected


@pytest.mark.parametrize(("label", "output", "expected"), OUTPUTS, ids=[o[0] for o in OUTPUTS])
def test_hook_and_scorer_read_the_same_text(
    otel: Otel, cp_observe_judge: FakeJudge, label: str, output: Any, expected: str | None
) -> None:
    """The text ``@agent`` judges retrievals against is the text the offline scorer (and run_evals) uses."""
    processor = otel.processor(cp_observe_judge)

    make_turn(docs=["Paris is the capital of France."], answer=output, agent="bot").ask("capital?")
    assert processor.force_flush(10_000)
    [call] = cp_observe_judge.calls
    query, reference = call.query, call.reference
    offline = message_text(output) if output is not None else ""
    if expected is None:
        assert reference == query  # no answer: judged against the query, as offline ("reference": "query")
        assert not offline.strip()
    else:
        assert reference == offline == expected


def _flat_messages(value: Any) -> dict[str, Any] | None:
    """``value`` as OpenInference's flattened ``llm.output_messages``, when it is a list of text messages."""
    if not isinstance(value, list) or not all(isinstance(m, dict) and "role" in m for m in value):
        return None
    attributes: dict[str, Any] = {}
    for i, message in enumerate(value):
        if not isinstance(message.get("content"), str):
            return None
        attributes[n.output_message_attribute(i, "role")] = message["role"]
        attributes[n.output_message_attribute(i, "content")] = message["content"]
    return attributes


def _routes(value: Any) -> dict[str, dict[str, Any]]:
    """Every convention ``value`` can travel by: the answer span's attributes, per route."""
    text = json.dumps(value)
    routes = {
        "output.value": {n.OPENINFERENCE_SPAN_KIND: n.KIND_AGENT, n.OUTPUT_VALUE: text,
                         n.OUTPUT_MIME_TYPE: n.MIME_JSON},
        "traceloop.entity.output": {n.TRACELOOP_ENTITY_OUTPUT: text},  # an OpenLLMetry workflow root
        "gen_ai.output.messages": {n.GEN_AI_OPERATION_NAME: n.OPERATION_CHAT, n.GEN_AI_OUTPUT_MESSAGES: text},
    }
    flat = _flat_messages(value)
    if flat is not None:
        routes["llm.output_messages"] = {n.OPENINFERENCE_SPAN_KIND: n.KIND_LLM, **flat}
    return routes


@pytest.mark.parametrize(("label", "value", "expected"), VALUES, ids=[v[0] for v in VALUES])
def test_every_convention_and_the_decorator_judge_against_the_same_answer(
    otel: Otel, cp_observe_judge: FakeJudge, label: str, value: Any, expected: str | None
) -> None:
    """The same value, returned by ``@agent`` or carried by each convention's span, is judged against one text."""
    processor = otel.processor(cp_observe_judge)
    tracer = otel.tracer_provider.get_tracer("app")
    docs = {f"{n.RETRIEVAL_DOCUMENTS}.0.document.content": "Paris is the capital of France."}
    make_turn(docs=["Paris is the capital of France."], answer=value, agent="bot").ask("decorator")
    routes = _routes(value)
    for route, attributes in routes.items():
        with tracer.start_as_current_span(f"answer by {route}") as span:
            with tracer.start_as_current_span("Retriever", attributes={
                    n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.INPUT_VALUE: route, **docs}):
                pass
            span.set_attributes(attributes)
        assert answer_of(attributes) == expected, route
    assert processor.force_flush(10_000)
    references = {call.query: call.reference for call in cp_observe_judge.calls}
    assert set(references) == {"decorator", *routes}
    for query, reference in references.items():
        assert reference == (query if expected is None else expected), query


def test_output_value_is_parsed_only_when_declared_json() -> None:
    """``output.value`` is JSON only under ``output.mime_type = application/json``; a JSON that does not parse
    is no answer."""
    value = json.dumps({"content": "raw model message", "answer": "the final answer"})
    assert answer_of({n.OUTPUT_VALUE: value, n.OUTPUT_MIME_TYPE: n.MIME_JSON}) == "the final answer"
    assert answer_of({n.OUTPUT_VALUE: value}) == value
    assert answer_of({n.OUTPUT_VALUE: "{not json", n.OUTPUT_MIME_TYPE: n.MIME_JSON}) is None
    assert answer_of({n.TRACELOOP_ENTITY_OUTPUT: "{not json"}) is None
    assert answer_of({}) is None


def test_conventions_in_order() -> None:
    """A span carrying several conventions: ``gen_ai.output.messages``, then ``llm.output_messages``, then
    ``traceloop.entity.output``, then ``output.value``; a convention that gives no answer gives way."""
    attributes = {
        n.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [{"type": "image"}]}]),
        n.output_message_attribute(0, "role"): "assistant",
        n.output_message_attribute(0, "content"): "oi",
        n.TRACELOOP_ENTITY_OUTPUT: json.dumps("traceloop"),
        n.OUTPUT_VALUE: "plain",
    }
    assert answer_of(attributes) == "oi"
    del attributes[n.output_message_attribute(0, "content")]
    assert answer_of(attributes) == "traceloop"


def test_lists_are_read_up_to_their_first_items() -> None:
    """A list longer than ``MAX_ITEMS`` is read up to its first ``MAX_ITEMS`` items, never beyond."""
    assert answer_text(["a"] * (MAX_ITEMS + 500), 100_000) == "\n".join(["a"] * MAX_ITEMS)
    late = [{"role": "user", "content": "q"}] * MAX_ITEMS + [{"role": "assistant", "content": "late"}]
    assert answer_text(late) == "q"  # the assistant message past the bound is not read


def test_one_content_part_reader() -> None:
    """Content parts read alike as an answer and as a query: OpenAI's ``text`` and GenAI's typed ``content``."""
    parts = [{"type": "text", "text": "Par"}, {"type": "text", "content": "is"}, {"type": "image_url"}]
    assert answer_text({"content": parts}) == content_text(parts, 100) == query_text({"content": parts}, 100)
    assert content_text(parts, 100) == "Par\nis"


def test_long_answers_are_cut_to_the_limit() -> None:
    """An answer longer than the limit keeps the limit's characters and a marker saying how many were cut."""
    assert answer_text({"answer": "x" * 30}, 10) == "x" * 10 + "…[truncated 20 chars]"


# --- the list rule, against a plain reading of the documented precedence -------------------------------------------

_message = st.one_of(
    st.text(max_size=8),
    st.fixed_dictionaries(
        {"content": st.one_of(st.text(max_size=8), st.none())},
        optional={"role": st.sampled_from(["user", "assistant", "system", 3]), "answer": st.text(max_size=4)},
    ),
    st.dictionaries(st.sampled_from(["text", "output", "x"]), st.text(max_size=5), max_size=2),
    st.integers(),
)


def _given(text: Any) -> bool:
    return isinstance(text, str) and bool(text.strip())


def _documented_list_rule(items: list[Any]) -> str | None:
    """Rule 3 of cp_observe._capture._answer, read literally (blank results are no answer)."""
    if all(type(item) is str for item in items):
        text = "\n".join(items)
        return text if _given(text) else None
    roles = [item.get("role") if isinstance(item, dict) else None for item in items]
    chosen = [item for item, role in zip(items, roles, strict=True) if role == "assistant"] or items
    for item in reversed(chosen):  # the last message that gives a text counts
        if isinstance(item, str) and _given(item):
            return item  # a bare text among messages is its own text
        if isinstance(item, dict):
            field = next((item[k] for k in ANSWER_FIELDS if _given(item.get(k))), None)
            if field is not None:
                return field  # type: ignore[no-any-return]
    return None  # numbers, blank messages: no text


@settings(max_examples=300, deadline=None)
@given(st.lists(_message, min_size=1, max_size=5))
def test_list_answers_follow_the_documented_rule(items: list[Any]) -> None:
    """A list of strings or chat messages gives the text the documented rule names."""
    assert answer_text(items, 10_000) == _documented_list_rule(items)
