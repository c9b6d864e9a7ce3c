"""Batch requests: the custom_id's shape and uniqueness, merged identical calls, the split to a provider's limits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cp_observe._batch._http import BatchApiError
from cp_observe._batch._requests import BatchRequest, RequestLog, read_requests, request_id, split
from cp_observe._batch._transports import contexts_in
from cp_observe._judging._prompt import build_prompt

_CUSTOM_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def test_custom_id_fits_every_provider_and_names_the_request() -> None:
    """1-64 characters of [A-Za-z0-9_-]; equal calls share it, a changed parameter or message does not."""
    messages = build_prompt("q", "an answer", ["one", "two"]).messages
    first = request_id(messages, {"temperature": 0})
    assert _CUSTOM_ID.match(first)
    assert request_id([dict(m) for m in messages], {"temperature": 0}) == first
    assert request_id(messages, {"temperature": 0.1}) != first
    assert request_id(messages[:1], {"temperature": 0}) != first


def test_identical_calls_are_merged(tmp_path: Path) -> None:
    """The log keeps one line per distinct call and counts the merged repeats."""
    log = RequestLog(tmp_path / "requests.jsonl")
    messages = build_prompt("q", "r", ["c"]).messages
    ids = [log.add(messages, {}), log.add(messages, {}), log.add(messages, {"seed": 1})]
    log.close()
    assert ids[0] == ids[1] != ids[2] and log.repeats == 1
    assert [r.custom_id for r in read_requests(tmp_path / "requests.jsonl")] == [ids[0], ids[2]]


def test_split_respects_count_and_bytes() -> None:
    """Groups never exceed the request count or the byte limit; every request is in exactly one group."""
    requests = [BatchRequest(f"id{i}", [], {}) for i in range(23)]
    sizes = {r.custom_id: 10 + i for i, r in enumerate(requests)}
    groups = list(split(iter(requests), lambda r: sizes[r.custom_id], 5, 60))
    assert [r for g in groups for r in g] == requests
    assert all(len(g) <= 5 and (len(g) == 1 or sum(sizes[r.custom_id] for r in g) <= 60) for g in groups)
    oversized = list(split(iter(requests[:2]), lambda r: 10**9, 5, 60))
    assert [len(g) for g in oversized] == [1, 1]  # too big alone: its own group, refused by the provider, not dropped


@pytest.mark.parametrize("n", [1, 2, 5, 20])
def test_contexts_are_counted_from_the_prompt(n: int) -> None:
    """The first pass's aligned placeholder reply needs the prompt's context count, block markers inside data aside."""
    contexts = [f"context {i} === END fake === " for i in range(n)]
    assert contexts_in(build_prompt("q", "r", contexts).messages) == n


def test_get_is_retried_and_a_key_in_an_error_is_masked() -> None:
    """An unreachable batch API: retried, then one error; a key-shaped token in a body never reaches the message."""
    from cp_observe._batch import _http

    slept: list[float] = []
    with pytest.raises(BatchApiError) as caught:
        _http._get("http://127.0.0.1:9/v1/batches/x", {}, sleep=slept.append)
    assert slept == [1.0, 2.0, 4.0] and caught.value.status == 0
    assert _http._KEY_LIKE.sub("***", "bad key sk-abcdefghijk1234") == "bad key ***"


def test_openai_batch_lines_leave_the_live_tier_out() -> None:
    """A flex tier parameter set for live calls stays out of a batch line (billed at the batch price anyway)."""
    import orjson

    from cp_observe._batch._api import Endpoint
    from cp_observe._batch._openai import OpenAIBatches

    batches = OpenAIBatches(Endpoint("http://127.0.0.1:9/v1", "sk-test"), "gpt-5-mini")
    request = BatchRequest("abc", [{"role": "user", "content": "x"}], {"service_tier": "flex", "seed": 1})
    line = orjson.loads(batches._line(request))
    assert line["body"] == {"model": "gpt-5-mini", "messages": request.messages, "seed": 1}
    assert line["url"] == "/v1/chat/completions" and line["custom_id"] == "abc"
    assert "sk-test" not in repr(batches._endpoint)
