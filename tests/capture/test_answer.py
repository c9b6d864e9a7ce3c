"""One answer rule: the hook, the offline scorer and output.value all judge against the same text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cp_observe import _names as n
from cp_observe._capture._answer import answer_from_attribute, answer_text
from cp_observe._offline._scorer import message_text
from cp_observe.testing import FakeJudge
from tests.conftest import Otel
from tests.turn_support import make_turn


class Reply:
    """An agent result object with both ``content`` and ``answer``."""

    def __init__(self) -> None:
        self.content = "raw model message"
        self.answer = "the final answer"


OUTPUTS: list[tuple[str, Any, str | None]] = [
    ("string", "Paris is the capital.", "Paris is the capital."),
    ("answer_before_content", {"content": "raw model message", "answer": "the final answer"}, "the final answer"),
    ("message", {"role": "assistant", "content": "Paris."}, "Paris."),
    ("content_parts", {"content": [{"type": "text", "text": "Par"}, {"type": "image"}, "is"]}, "Par\nis"),
    ("messages", [{"role": "user", "content": "q?"}, {"role": "assistant", "content": "A."}], "A."),
    ("strings", ["one", "two"], "one\ntwo"),
    ("object", Reply(), "the final answer"),
    ("none", None, None),
    ("blank", "   ", None),
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


def test_json_output_value_is_read_by_the_same_rule() -> None:
    """A JSON ``output.value`` (as other instrumentations record a result) is parsed, then read by the rule."""
    value = json.dumps({"content": "raw model message", "answer": "the final answer"})
    assert answer_from_attribute(value, "application/json", 1_000) == "the final answer"
    assert answer_from_attribute(value, None, 1_000) == value
    assert answer_from_attribute(None, "application/json", 1_000) is None
    assert n.OUTPUT_MIME_TYPE == "output.mime_type"


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


def _documented_list_rule(items: list[Any]) -> str | None:
    """Rule 4 of cp_observe._capture._answer, read literally (blank results are no answer)."""
    if all(type(item) is str for item in items):
        text = "\n".join(items)
    else:
        roles = [item.get("role") if isinstance(item, dict) else None for item in items]
        if not any(isinstance(role, str) for role in roles) and not all(
            isinstance(item, dict) and "content" in item for item in items
        ):
            return answer_text(json.loads(json.dumps(items)), 10_000)  # data: its JSON text
        chosen = [item for item, role in zip(items, roles, strict=True) if role == "assistant"] or items
        texts = []
        for item in chosen:
            if isinstance(item, (str, int)):
                if str(item):
                    texts.append(str(item))  # a bare text (or number) among messages is its own text
            elif isinstance(item, dict):
                field = next((item[k] for k in ("answer", "output", "content", "text", "response")
                              if isinstance(item.get(k), str)), None)
                if field:
                    texts.append(field)
        text = "\n".join(texts)
    return None if not text or text.isspace() else text


@settings(max_examples=300, deadline=None)
@given(st.lists(_message, min_size=1, max_size=5))
def test_list_answers_follow_the_documented_rule(items: list[Any]) -> None:
    """A list of strings or chat messages gives the text the documented rule names, message by message."""
    assert answer_text(items, 10_000) == _documented_list_rule(items)
