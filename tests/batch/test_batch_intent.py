"""A create whose id never reached state.json is found again: by tag, by uploaded file, or by time and size."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from cp_observe._batch._anthropic import AnthropicBatches
from cp_observe._batch._api import Endpoint, Intent
from cp_observe._batch._http import BatchApiError
from cp_observe._batch._openai import OpenAIBatches
from cp_observe._batch._requests import BatchRequest, request_id
from cp_observe._batch._session import BatchSession
from cp_observe._errors import ConfigurationError
from tests.batch_support import BatchServer


class Killed(Exception):
    """The run died right after the provider made its batch."""


class DiesAfterCreate:
    """A provider whose run is killed between the create and the write of the id."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(self, requests: Sequence[BatchRequest], intent: Intent) -> str:
        self.inner.create(requests, intent)
        raise Killed


def _requests(count: int, word: str = "q") -> list[BatchRequest]:
    out = []
    for i in range(count):
        messages = [{"role": "system", "content": "judge"}, {"role": "user", "content": f"{word} {i}"}]
        out.append(BatchRequest(request_id(messages, {}), messages, {}))
    return out


def _killed(directory: Path, provider: Any, requests: list[BatchRequest]) -> None:
    with pytest.raises(Killed):
        BatchSession(directory, DiesAfterCreate(provider), "m").submit(requests)
    assert "intent" in json.loads((directory / "state.json").read_text())


def test_anthropic_takes_the_oldest_batch_of_its_size_and_names_the_others(tmp_path: Path) -> None:
    """No name to search by: the earliest unknown batch of the intent's size since it is taken, with a warning."""
    with BatchServer() as server:
        provider = AnthropicBatches(Endpoint(server.url, "sk-ant-test"), "claude-haiku-4-5")
        old = provider.create(_requests(3, "old"), Intent("o", 3, 0.0))
        server.batches[old].created_at = time.time() - 3600  # same size, an hour before the intent: not a candidate
        _killed(tmp_path, provider, _requests(3))
        provider.create(_requests(3, "other"), Intent("x", 3, 0.0))  # another program's batch, same size, later
        provider.create(_requests(2, "small"), Intent("y", 2, 0.0))  # another size: never a candidate
        _, ours, theirs, small = list(server.batches)
        progress = io.StringIO()
        session = BatchSession(tmp_path, provider, "m")
        assert session.resumed
        assert session.recover(progress) == ours
        said = progress.getvalue()
        assert "taken by time and size" in said and theirs in said and old not in said and small not in said
        assert server.created == 4
        assert BatchSession(tmp_path, provider, "m").recover() is None  # resolved once, on disk


def test_an_openai_batch_without_its_metadata_is_found_by_its_uploaded_file(tmp_path: Path) -> None:
    """Metadata dropped (an older Azure API version): the input file the intent recorded names the batch."""
    with BatchServer() as server:
        provider = OpenAIBatches(Endpoint(server.url + "/v1", "sk-test"), "gpt-4o-mini")
        _killed(tmp_path, provider, _requests(4))
        (batch,) = server.batches.values()
        batch.meta["metadata"] = {}
        assert json.loads((tmp_path / "state.json").read_text())["intent"]["file_id"] == batch.meta["input_file_id"]
        progress = io.StringIO()
        assert BatchSession(tmp_path, provider, "m").recover(progress) == batch.id
        assert "not submitted again" in progress.getvalue() and server.created == 1


def test_a_batch_list_that_fails_submits_nothing(tmp_path: Path) -> None:
    """The provider cannot be asked: the run stops, the intent stays, and nothing is created."""
    with BatchServer() as server:
        provider = OpenAIBatches(Endpoint(server.url + "/v1", "sk-test"), "gpt-4o-mini")
        _killed(tmp_path, provider, _requests(2))
        unreachable = OpenAIBatches(Endpoint("http://127.0.0.1:9", "sk-test"), "gpt-4o-mini")
        session = BatchSession(tmp_path, unreachable, "m")
        with pytest.raises(BatchApiError):
            session.recover()
        with pytest.raises(ConfigurationError, match="unresolved"):
            session.submit(_requests(2))
        assert server.created == 1
        assert "intent" in json.loads((tmp_path / "state.json").read_text())
