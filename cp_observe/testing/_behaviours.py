"""What the loopback judge server answers: behaviours (good, fixed, raw, status, delay, reset) and replies.

A behaviour turns one chat completion request into one reply; ``JudgeServer`` picks a behaviour per request
from its script or its default. Standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final

from cp_observe.testing._prompt_reader import parse_judge_prompt

__all__ = ["Behaviour", "Policy", "delay", "fixed", "good", "raw", "reset", "status", "word_overlap_policy"]

Policy = Callable[[str, str, Sequence[str]], Sequence[bool]]
"""Decides the verdicts of ``good()``: ``(query, reference, contexts) -> one bool per context``."""

_MODEL_ID: Final = "judge-test"
_WORD: Final = re.compile(r"[^\W\d_]{4,}")
_FOREIGN_CONTEXT: Final = re.compile(r"\bcontext\s+(\d+)\b", re.IGNORECASE)
_ERROR_TYPES: Final = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def word_overlap_policy(query: str, reference: str, contexts: Sequence[str]) -> list[bool]:
    """Mark a context relevant when it shares a word of 4+ letters with the reference: the default test policy.

    Case-insensitive; digits and punctuation never count. It makes test outcomes predictable, and is not a
    judge: never read its verdicts as a measure of retrieval quality.
    """
    wanted = _words(reference)
    return [bool(_words(context) & wanted) for context in contexts]


@dataclass(frozen=True, slots=True)
class _Call:
    """What a behaviour gets to answer one chat completion request."""

    body: Mapping[str, Any]
    policy: Policy
    stopping: threading.Event
    completion_id: str


@dataclass(frozen=True, slots=True)
class _Reply:
    """An HTTP answer; ``reset`` sends half of ``payload`` and then resets the connection."""

    status: int
    payload: bytes
    headers: tuple[tuple[str, str], ...] = ()
    reset: bool = False


class _Stopped(Exception):
    """The server is stopping: drop the connection without an answer."""


@dataclass(frozen=True, slots=True)
class Behaviour:
    """How the server answers one chat completion request. Make one with ``good()``, ``fixed()``, etc."""

    name: str
    _answer: Callable[[_Call], _Reply] = field(repr=False, compare=False)


def good() -> Behaviour:
    """Answer like a judge: one verdict per context, decided by the server's policy.

    The prompt is read with ``parse_judge_prompt`` (``cp_observe.testing._prompt_reader``). A prompt of
    another shape (another strategy's) gets a ``"yes"`` for every distinct number N found as ``CONTEXT N``
    (any case) in its user messages, with ``context_index`` N in ascending order, or one ``"yes"`` with
    index 0 when none is found.
    """
    return Behaviour("good", _answer_good)


def fixed(
    verdicts: Sequence[str | bool],
    indices: Sequence[int] | None = None,
    reasons: Sequence[str] | None = None,
) -> Behaviour:
    """Answer with exactly these verdicts: strings verbatim (``" YES "``), booleans as ``"yes"``/``"no"``.

    Args:
        verdicts: the ``verdict`` values, in order; their number need not match the contexts.
        indices: the ``context_index`` values; ``0..n-1`` by default.
        reasons: the ``reason`` values; a placeholder sentence by default.

    Raises:
        ValueError: when ``indices`` or ``reasons`` differ in length from ``verdicts``.
        TypeError: when ``verdicts`` is a single string.

    """
    if isinstance(verdicts, str):
        raise TypeError("fixed() takes a sequence of verdicts, not one string")
    words = [("yes" if v else "no") if isinstance(v, bool) else v for v in verdicts]
    where = list(range(len(words))) if indices is None else list(indices)
    why = ["fixed verdict from the test script"] * len(words) if reasons is None else list(reasons)
    if len(where) != len(words) or len(why) != len(words):
        raise ValueError("fixed() needs as many indices and reasons as verdicts")
    content = _verdicts_content(words, where, why)
    return Behaviour("fixed", lambda call: _completion(call, content))


def raw(content: str) -> Behaviour:
    """Answer with this assistant message content verbatim: fenced, truncated or malformed JSON, garbage."""
    return Behaviour("raw", lambda call: _completion(call, content))


def status(
    code: int, *, body: Mapping[str, Any] | str | bytes | None = None, headers: Mapping[str, str] | None = None
) -> Behaviour:
    """Answer with an HTTP error, e.g. ``status(429, headers={"Retry-After": "1"})`` or ``status(500)``.

    Args:
        code: an HTTP status from 400 to 599.
        body: a JSON object, or text/bytes sent verbatim; by default an OpenAI-style
            ``{"error": {"message", "type", "param", "code"}}``.
        headers: extra response headers; ``Content-Type`` defaults to ``application/json``.

    Raises:
        ValueError: when ``code`` is not an error status.

    """
    if not 400 <= code <= 599:
        raise ValueError(f"status() takes an HTTP error status (400-599), got {code}")
    if body is None:
        payload = _dumps(_error(code))
    elif isinstance(body, str):
        payload = body.encode("utf-8")
    elif isinstance(body, bytes):
        payload = body
    else:
        payload = _dumps(dict(body))
    reply = _Reply(code, payload, tuple((headers or {}).items()))
    return Behaviour(f"status({code})", lambda call: reply)


def delay(seconds: float, then: Behaviour | None = None) -> Behaviour:
    """Wait ``seconds`` (cut short by ``stop()``, which drops the connection), then answer like ``then``.

    Raises:
        ValueError: when ``seconds`` is negative or not finite.

    """
    wait = _seconds(seconds, "seconds")
    follow = then or good()

    def answer(call: _Call) -> _Reply:
        if call.stopping.wait(wait):
            raise _Stopped
        return follow._answer(call)

    return Behaviour(f"delay({wait:g}, {follow.name})", answer)


def reset() -> Behaviour:
    """Send the status line, headers and half of a completion body, then reset the connection (TCP RST).

    ``Content-Length`` announces the whole body; the socket is closed with ``SO_LINGER`` 0, so the client
    sees a reset (or a short body) rather than a clean end of stream.
    """
    return Behaviour("reset", lambda call: dataclasses.replace(_completion(call, '{"verdicts": []}'), reset=True))


def _answer_good(call: _Call) -> _Reply:
    messages = call.body.get("messages")
    dicts = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    parsed = parse_judge_prompt(dicts)
    if parsed is None:
        text = " ".join(str(m.get("content")) for m in dicts if m.get("role") == "user")
        where = sorted({int(n) for n in _FOREIGN_CONTEXT.findall(text)}) or [0]
        reason = "not a cp_observe judge prompt; JudgeServer answers yes"
        content = _verdicts_content(["yes"] * len(where), where, [reason] * len(where))
    else:
        flags = [bool(flag) for flag in call.policy(*parsed)]
        words = ["yes" if flag else "no" for flag in flags]
        reasons = [
            f"the test policy finds context {i} {'relevant' if f else 'irrelevant'}" for i, f in enumerate(flags)
        ]
        content = _verdicts_content(words, range(len(flags)), reasons)
    return _completion(call, content)


def _completion(call: _Call, content: str) -> _Reply:
    prompt_tokens = _tokens(_message_chars(call.body.get("messages")))
    completion_tokens = _tokens(len(content))
    return _json_reply(
        200,
        {
            "id": call.completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": call.body.get("model", _MODEL_ID),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        },
    )


def _verdicts_content(verdicts: Sequence[str], indices: Sequence[int], reasons: Sequence[str]) -> str:
    entries = [
        {"context_index": i, "verdict": v, "reason": r} for i, v, r in zip(indices, verdicts, reasons, strict=True)
    ]
    return json.dumps({"verdicts": entries})


def _error(code: int, message: str | None = None, *, param: str | None = None) -> dict[str, Any]:
    if message is None:
        try:
            message = f"{code} {HTTPStatus(code).phrase}"
        except ValueError:
            message = f"HTTP {code}"
    kind = _ERROR_TYPES.get(code, "server_error" if code >= 500 else "invalid_request_error")
    error_code = "rate_limit_exceeded" if code == 429 else None
    return {"error": {"message": message, "type": kind, "param": param, "code": error_code}}


def _json_reply(code: int, obj: object, headers: tuple[tuple[str, str], ...] = ()) -> _Reply:
    return _Reply(code, _dumps(obj), headers)


def _dumps(obj: object) -> bytes:
    return json.dumps(obj).encode("utf-8")


def _loads(payload: bytes | None) -> Any:
    if not payload:
        return None
    try:
        return json.loads(payload)
    except ValueError:  # covers JSONDecodeError and UnicodeDecodeError
        return None


def _message_chars(messages: object) -> int:
    if not isinstance(messages, list):
        return 0
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return total


def _tokens(chars: int) -> int:
    return -(-chars // 4)  # ceil(chars / 4) without floats


def _words(text: str) -> set[str]:
    return {word.lower() for word in _WORD.findall(text)}


def _seconds(value: float, what: str) -> float:
    seconds = float(value)
    if not 0.0 <= seconds < float("inf"):
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return seconds


