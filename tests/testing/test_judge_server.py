"""The loopback judge server: every behaviour over plain HTTP, and the ones litellm must see, through litellm."""

from __future__ import annotations

import http.client
import json
import math
import os

# litellm fetches its model cost map from the network at import unless told not to. Set before anything that
# might import litellm (cp_observe itself may); litellm is imported inside the tests.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from cp_observe._judging._prompt import build_prompt
from cp_observe.testing import (
    JudgeServer,
    RecordedRequest,
    delay,
    fixed,
    raw,
    reset,
    status,
    word_overlap_policy,
)

QUERY = "Who wrote Hamlet?"
REFERENCE = "Hamlet was written by William Shakespeare."
CONTEXTS = ["Shakespeare wrote plays in London.", "Bananas are yellow.", "The tragedy of HAMLET, prince of Denmark."]
JSON_SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "verdicts", "schema": {"type": "object"}}}
# No proxy, whatever the environment says: these requests go to loopback only.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    with JudgeServer() as judge:
        yield judge


def judge_messages(contexts: Sequence[str] = CONTEXTS) -> list[dict[str, str]]:
    return build_prompt(QUERY, REFERENCE, contexts).messages


def chat(messages: list[dict[str, str]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"model": "judge-test", "messages": judge_messages() if messages is None else messages, **extra}


def send(
    server: JudgeServer, body: object = None, *, path: str = "/v1/chat/completions", method: str = "POST"
) -> tuple[int, dict[str, str], Any]:
    data = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}{path}",
        data=data,
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test", "X-Trace": "t-1"},
        method=method,
    )
    try:
        with OPENER.open(request, timeout=5) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def content_of(reply: dict[str, Any]) -> str:
    content = reply["choices"][0]["message"]["content"]
    assert isinstance(content, str)
    return content


def verdicts_of(reply: dict[str, Any]) -> list[tuple[int, str]]:
    return [(v["context_index"], v["verdict"]) for v in json.loads(content_of(reply))["verdicts"]]


def estimate(chars: int) -> int:
    return math.ceil(chars / 4)


async def complete(server: JudgeServer, timeout: float = 5.0, **extra: Any) -> Any:
    import litellm

    return await litellm.acompletion(
        model="openai/judge-test",
        api_base=server.url,
        api_key="sk-test",
        max_retries=0,
        timeout=timeout,
        messages=judge_messages(),
        **extra,
    )


# --- plain HTTP ---------------------------------------------------------------------------------------------


def test_good_answers_a_judge_prompt_with_the_policy_verdicts() -> None:
    """good() parses the judge prompt and answers one verdict per context in the chat.completion shape."""
    with JudgeServer() as server:
        code, headers, reply = send(server, chat())
    assert code == 200
    assert headers["Content-Type"] == "application/json"
    assert reply["object"] == "chat.completion"
    assert reply["model"] == "judge-test"
    assert reply["id"].startswith("chatcmpl-")
    assert isinstance(reply["created"], int)
    assert reply["choices"][0]["message"]["role"] == "assistant"
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert verdicts_of(reply) == [(0, "yes"), (1, "no"), (2, "yes")]
    prompt_chars = sum(len(m["content"]) for m in judge_messages())
    usage = reply["usage"]
    assert usage["prompt_tokens"] == estimate(prompt_chars)
    assert usage["completion_tokens"] == estimate(len(content_of(reply)))
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_word_overlap_policy_needs_a_shared_word_of_four_letters() -> None:
    """The default policy ignores case, short words and digits."""
    assert word_overlap_policy("q", "The cat sat on 2024 MATS", ["the cat", "mats here", "2024 sat"]) == [
        False,
        True,
        False,
    ]


def test_good_asks_the_policy_given_at_construction_or_later() -> None:
    """The server's policy decides good()'s verdicts and can be swapped while running."""
    seen: list[tuple[str, str, list[str]]] = []

    def everything(query: str, reference: str, contexts: Sequence[str]) -> list[bool]:
        seen.append((query, reference, list(contexts)))
        return [True] * len(contexts)

    with JudgeServer(policy=everything) as server:
        assert verdicts_of(send(server, chat())[2]) == [(0, "yes"), (1, "yes"), (2, "yes")]
        server.policy = lambda query, reference, contexts: [False for _ in contexts]
        assert verdicts_of(send(server, chat())[2]) == [(0, "no"), (1, "no"), (2, "no")]
    assert seen == [(QUERY, REFERENCE, CONTEXTS)]


def test_good_answers_yes_per_context_number_of_a_foreign_prompt(server: JudgeServer) -> None:
    """A prompt of another shape gets a yes per distinct CONTEXT N, or a single yes at index 0."""
    numbered = [{"role": "user", "content": "Context 1: a\ncontext 3: b\nCONTEXT 1 again"}]
    assert verdicts_of(send(server, chat(numbered))[2]) == [(1, "yes"), (3, "yes")]
    plain = [{"role": "system", "content": "Context 7"}, {"role": "user", "content": "Is this useful?"}]
    assert verdicts_of(send(server, chat(plain))[2]) == [(0, "yes")]


def test_fixed_sends_verdicts_indices_and_reasons_verbatim(server: JudgeServer) -> None:
    """fixed() keeps verdict spellings, maps booleans to yes/no and uses the given indices and reasons."""
    server.script(fixed(["Yes.", " YES ", "no", False], indices=[0, 2, 5, 1], reasons=["a", "b", "c", "d"]))
    reply = send(server, chat())[2]
    assert json.loads(content_of(reply)) == {
        "verdicts": [
            {"context_index": 0, "verdict": "Yes.", "reason": "a"},
            {"context_index": 2, "verdict": " YES ", "reason": "b"},
            {"context_index": 5, "verdict": "no", "reason": "c"},
            {"context_index": 1, "verdict": "no", "reason": "d"},
        ]
    }
    server.script(fixed([True]))
    assert verdicts_of(send(server, chat())[2]) == [(0, "yes")]


def test_fixed_refuses_mismatched_arguments() -> None:
    """fixed() checks its arguments when the script is written, not when a request arrives."""
    with pytest.raises(ValueError, match="as many"):
        fixed(["yes", "no"], indices=[0])
    with pytest.raises(ValueError, match="as many"):
        fixed(["yes"], reasons=["a", "b"])
    with pytest.raises(TypeError):
        fixed("yes")


@pytest.mark.parametrize(
    "content",
    ['{"verdicts": [{"context_index": 0,', '```json\n{"verdicts": []}\n```', "I think yes?", "", "{'single': 1}"],
)
def test_raw_sends_the_content_verbatim(server: JudgeServer, content: str) -> None:
    """raw() puts its text into the assistant message untouched."""
    server.script(raw(content))
    code, _, reply = send(server, chat())
    assert code == 200
    assert content_of(reply) == content


def test_status_429_sends_retry_after_and_an_openai_error(server: JudgeServer) -> None:
    """status(429) answers with its headers and an OpenAI-style error body."""
    server.script(status(429, headers={"Retry-After": "1"}))
    code, headers, reply = send(server, chat())
    assert code == 429
    assert headers["Retry-After"] == "1"
    assert set(reply["error"]) == {"message", "type", "param", "code"}
    assert reply["error"]["type"] == "rate_limit_error"
    assert reply["error"]["code"] == "rate_limit_exceeded"


def test_status_500_and_a_custom_body(server: JudgeServer) -> None:
    """status() defaults to a server_error body and sends a given body instead when there is one."""
    server.script(status(500), status(503, body={"detail": "warming up"}))
    code, _, reply = send(server, chat())
    assert code == 500
    assert reply["error"]["type"] == "server_error"
    assert send(server, chat())[::2] == (503, {"detail": "warming up"})
    with pytest.raises(ValueError, match="400-599"):
        status(200)


def test_delay_answers_after_waiting(server: JudgeServer) -> None:
    """delay() waits, then answers like the behaviour it wraps."""
    server.script(delay(0.2, then=fixed(["no"])))
    started = time.monotonic()
    reply = send(server, chat())[2]
    assert time.monotonic() - started >= 0.2
    assert verdicts_of(reply) == [(0, "no")]
    assert server.requests[0].behaviour == "delay(0.2, fixed)"
    with pytest.raises(ValueError):
        delay(-1)


def test_reset_sends_part_of_the_body_then_resets(server: JudgeServer) -> None:
    """reset() announces a longer body than it sends and then resets the TCP connection."""
    server.script(reset())
    body = json.dumps(chat()).encode()
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: judge\r\nContent-Length: %d\r\n\r\n" % len(body)
    received = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as client:
        client.sendall(request + body)
        with pytest.raises(ConnectionResetError):
            while chunk := client.recv(65536):
                received += chunk
    head, _, partial = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    announced = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    assert 0 < len(partial) < announced
    assert send(server, chat())[0] == 200  # the server lives on


def test_refuse_json_schema_answers_400_but_serves_json_object() -> None:
    """refuse_json_schema refuses only json_schema, records and counts it, and leaves the script alone."""
    with JudgeServer(refuse_json_schema=True) as server:
        server.script(fixed(["no"]))
        code, _, reply = send(server, chat(response_format=JSON_SCHEMA_FORMAT))
        assert code == 400
        assert reply["error"]["type"] == "invalid_request_error"
        assert reply["error"]["param"] == "response_format"
        assert "json_schema" in reply["error"]["message"]
        assert "not supported" in reply["error"]["message"]
        assert verdicts_of(send(server, chat(response_format={"type": "json_object"}))[2]) == [(0, "no")]
        assert send(server, chat())[0] == 200
        assert server.calls == 3
        assert [r.behaviour for r in server.requests] == ["refuse_json_schema", "fixed", "good"]


def test_script_runs_in_order_then_the_default(server: JudgeServer) -> None:
    """Scripted behaviours answer one request each, in order, then the default answers."""
    server.script(status(500), raw("one"))
    server.script(raw("two"))
    server.default = raw("default")
    answers = [send(server, chat()) for _ in range(5)]
    assert answers[0][0] == 500
    assert [content_of(reply) for _, _, reply in answers[1:]] == ["one", "two", "default", "default"]
    assert server.default.name == "raw"


def test_requests_are_recorded_and_cleared(server: JudgeServer) -> None:
    """Each request is recorded with path, lower-cased headers, parsed body, time and behaviour."""
    before = time.monotonic()
    send(server, chat(temperature=0))
    send(server, path="/v1/models", method="GET")
    recorded = server.requests
    assert [r.path for r in recorded] == ["/v1/chat/completions", "/v1/models"]
    first = recorded[0]
    assert isinstance(first, RecordedRequest)
    assert first.method == "POST"
    assert first.headers["authorization"] == "Bearer sk-test"
    assert first.headers["x-trace"] == "t-1"
    assert first.body["temperature"] == 0
    assert before <= first.received <= recorded[1].received <= time.monotonic()
    assert [r.behaviour for r in recorded] == ["good", "models"]
    assert server.calls == 1
    server.clear()
    assert server.requests == []
    assert server.calls == 0


def test_models_and_unknown_paths(server: JudgeServer) -> None:
    """GET /v1/models lists the test model; unknown paths and wrong methods answer JSON errors."""
    code, _, models = send(server, path="/v1/models", method="GET")
    assert code == 200
    assert models["data"][0]["id"] == "judge-test"
    code, _, missing = send(server, chat(), path="/v2/nothing")
    assert code == 404
    assert missing["error"]["type"] == "not_found_error"
    assert send(server, path="/v1/chat/completions", method="GET")[0] == 405
    assert send(server, chat(), path="/chat/completions")[0] == 200
    assert server.calls == 1


def test_bad_json_and_streaming_are_refused(server: JudgeServer) -> None:
    """A body that is not a JSON object, or stream=true, gets a 400 and is still recorded."""
    code, _, reply = send(server, b"{not json")
    assert code == 400
    assert reply["error"]["type"] == "invalid_request_error"
    assert send(server, [1, 2])[0] == 400
    code, _, reply = send(server, chat(stream=True))
    assert code == 400
    assert reply["error"]["param"] == "stream"
    assert [r.behaviour for r in server.requests] == ["bad_request", "bad_request", "stream_refused"]
    assert server.requests[0].body is None
    assert server.calls == 3


def test_a_failing_policy_answers_500_and_the_server_survives() -> None:
    """An exception in a behaviour becomes a 500 answer; the next request is served."""

    def broken(query: str, reference: str, contexts: Sequence[str]) -> list[bool]:
        raise RuntimeError("policy exploded")

    with JudgeServer(policy=broken) as server:
        code, _, reply = send(server, chat())
        assert code == 500
        assert "policy exploded" in reply["error"]["message"]
        server.policy = word_overlap_policy
        assert send(server, chat())[0] == 200


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "example.com", "::"])
def test_only_loopback_hosts_are_accepted(host: str) -> None:
    """Binding anywhere but loopback is refused before any socket is opened."""
    with pytest.raises(ValueError, match="loopback"):
        JudgeServer(host=host)


def test_bad_settings_are_refused() -> None:
    """Port and latency are checked at construction and when set."""
    with pytest.raises(ValueError):
        JudgeServer(port=70000)
    with pytest.raises(ValueError):
        JudgeServer(latency=-0.1)
    judge = JudgeServer()
    with pytest.raises(ValueError):
        judge.latency = float("inf")


def test_lifecycle_url_port_restart_and_idempotent_stop() -> None:
    """url and port need a running server; stop() is idempotent and a stopped server starts again."""
    judge = JudgeServer(host="localhost")
    with pytest.raises(RuntimeError):
        _ = judge.url
    with judge:
        assert judge.url == f"http://127.0.0.1:{judge.port}/v1"
        with pytest.raises(RuntimeError, match="already running"):
            judge.start()
    judge.stop()
    judge.stop()
    judge.start()
    try:
        assert send(judge, chat())[0] == 200
    finally:
        judge.stop()


def test_stop_returns_promptly_while_a_request_waits() -> None:
    """stop() cuts a long delay short, drops its connection and joins every thread."""
    judge = JudgeServer().start()
    serving_thread = f"cp-observe-judge-server-{judge.port}"
    judge.script(delay(30))
    outcome: list[object] = []
    client = threading.Thread(target=lambda: outcome.append(_try_send(judge)))
    client.start()
    assert judge.wait_for_requests(1)
    started = time.monotonic()
    judge.stop()
    assert time.monotonic() - started < 2
    client.join(timeout=5)
    assert not client.is_alive()
    assert isinstance(outcome[0], Exception)
    assert serving_thread not in {t.name for t in threading.enumerate()}


def test_stop_closes_idle_keep_alive_connections() -> None:
    """A client holding a keep-alive connection open does not hold stop() up."""
    judge = JudgeServer().start()
    port = judge.port
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("POST", "/v1/chat/completions", json.dumps(chat()), {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        response.read()
        assert not response.will_close
        started = time.monotonic()
        judge.stop()
        assert time.monotonic() - started < 2
    finally:
        connection.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_latency_is_added_without_serialising_requests(server: JudgeServer) -> None:
    """Latency delays every answer, concurrently: four requests take about one latency, not four."""
    server.latency = 0.3
    barrier = threading.Barrier(4)
    codes: list[int] = []

    def one() -> None:
        barrier.wait(timeout=5)
        codes.append(send(server, chat())[0])

    threads = [threading.Thread(target=one) for _ in range(4)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    elapsed = time.monotonic() - started
    assert codes == [200] * 4
    assert 0.3 <= elapsed < 0.9
    assert server.latency == 0.3


def test_wait_for_requests_gives_up_at_the_timeout(server: JudgeServer) -> None:
    """wait_for_requests() returns False when too few requests arrive in time."""
    assert server.wait_for_requests(0, timeout=0)
    assert not server.wait_for_requests(1, timeout=0.05)


def _try_send(server: JudgeServer) -> object:
    try:
        return send(server, chat())
    except Exception as error:  # noqa: BLE001 - the test inspects whatever litellm raised
        return error


# --- through litellm ----------------------------------------------------------------------------------------


async def test_litellm_accepts_good_answers(server: JudgeServer) -> None:
    """litellm parses good()'s completion, usage included, and sends what the server recorded."""
    response = await complete(server, response_format={"type": "json_object"})
    content = json.loads(response.choices[0].message.content)
    assert [v["verdict"] for v in content["verdicts"]] == ["yes", "no", "yes"]
    assert response.usage.prompt_tokens == estimate(sum(len(m["content"]) for m in judge_messages()))
    (recorded,) = server.requests
    assert recorded.body["model"] == "judge-test"
    assert recorded.body["response_format"] == {"type": "json_object"}
    assert recorded.headers["authorization"] == "Bearer sk-test"


async def test_litellm_accepts_fixed_and_raw_answers(server: JudgeServer) -> None:
    """litellm hands fixed() and raw() contents through untouched."""
    server.script(fixed(["Yes.", " YES "], indices=[0, 3]), raw('```json\n{"verdicts": [\n```'))
    first = await complete(server)
    assert json.loads(first.choices[0].message.content)["verdicts"][1] == {
        "context_index": 3,
        "verdict": " YES ",
        "reason": "fixed verdict from the test script",
    }
    second = await complete(server)
    assert second.choices[0].message.content == '```json\n{"verdicts": [\n```'


async def test_litellm_raises_rate_limit_error_on_429(server: JudgeServer) -> None:
    """A 429 with Retry-After reaches litellm as RateLimitError, with no retry when max_retries=0."""
    from litellm.exceptions import RateLimitError

    server.script(status(429, headers={"Retry-After": "1"}))
    with pytest.raises(RateLimitError):
        await complete(server)
    assert server.calls == 1


async def test_litellm_raises_internal_server_error_on_500(server: JudgeServer) -> None:
    """A 500 reaches litellm as InternalServerError."""
    from litellm.exceptions import InternalServerError

    server.script(status(500))
    with pytest.raises(InternalServerError):
        await complete(server)


async def test_litellm_times_out_on_a_long_delay(server: JudgeServer) -> None:
    """A delay longer than litellm's timeout reaches it as litellm.Timeout."""
    from litellm.exceptions import Timeout

    server.script(delay(5))
    started = time.monotonic()
    with pytest.raises(Timeout):
        await complete(server, timeout=0.3)
    assert time.monotonic() - started < 3


async def test_litellm_sees_a_reset_as_a_connection_error(server: JudgeServer) -> None:
    """A reset reaches litellm 1.110 as InternalServerError("Connection error."), not APIConnectionError."""
    from litellm.exceptions import InternalServerError

    server.script(reset())
    with pytest.raises(InternalServerError, match="Connection error"):
        await complete(server)
    assert server.requests[0].behaviour == "reset"


async def test_litellm_raises_bad_request_when_json_schema_is_refused() -> None:
    """refuse_json_schema reaches litellm as BadRequestError; json_object is then accepted."""
    from litellm.exceptions import BadRequestError

    with JudgeServer(refuse_json_schema=True) as server:
        with pytest.raises(BadRequestError, match="json_schema"):
            await complete(server, response_format=JSON_SCHEMA_FORMAT)
        response = await complete(server, response_format={"type": "json_object"})
        assert json.loads(response.choices[0].message.content)["verdicts"]
        assert server.calls == 2
    assert [r.behaviour for r in server.requests] == ["refuse_json_schema", "good"]
