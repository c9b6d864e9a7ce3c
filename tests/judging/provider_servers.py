"""Loopback servers speaking the wire formats of the providers litellm serves besides OpenAI's.

Each answers a cp-observe judge prompt the way the test kit's ``JudgeServer`` does (the test policy,
``word_overlap_policy``, decides the verdicts), but in its provider's own request and response shape:
Anthropic messages, Gemini ``generateContent``, Azure OpenAI deployments and Cohere v2 chat. Token counts are
reported in the provider's usage fields, so a test can check the cost computed from them; a test can instead
give the usage block verbatim (``usage_fixture``, a provider's documented usage), fields to add at the top of
the reply (``top_fields``, e.g. ``service_tier``) and reply texts to send first (``texts``, e.g. one that does
not parse). The ``openai`` format (``/chat/completions``) serves the lean path. Standard library only; every
request is recorded.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cp_observe.testing import word_overlap_policy
from cp_observe.testing._prompt_reader import parse_judge_prompt

__all__ = ["PROVIDERS", "ProviderServer", "Recorded"]

PROVIDERS = ("anthropic", "gemini", "azure", "cohere")


@dataclass(frozen=True)
class Recorded:
    """One request: its path, lower-cased headers and JSON body."""

    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class ProviderServer:
    """A loopback server answering judge prompts in ``provider``'s wire format (one of ``PROVIDERS``)."""

    provider: str
    requests: list[Recorded] = field(default_factory=list)
    #: (prompt_tokens, completion_tokens) of every answer, in order.
    usage: list[tuple[int, int]] = field(default_factory=list)
    #: the usage block of every answer, verbatim (``usageMetadata`` for Gemini), instead of counted tokens.
    usage_fixture: dict[str, Any] | None = None
    #: fields added at the top level of every answer.
    top_fields: dict[str, Any] = field(default_factory=dict)
    #: reply texts sent, in order, before the test policy's answers.
    texts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.provider not in _FORMATS:
            raise ValueError(f"provider must be one of {tuple(_FORMATS)}, got {self.provider!r}")
        self._lock = threading.Lock()  # guards requests and usage
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                status, payload = owner._answer(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=f"{self.provider}-server", daemon=True)

    @property
    def url(self) -> str:
        """The base URL to give litellm as ``api_base``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> ProviderServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _answer(self, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        with self._lock:
            self.requests.append(Recorded(path, headers, body))
        reader, writer, expected = _FORMATS[self.provider]
        if not re.fullmatch(expected, path.split("?", 1)[0]) or not isinstance(body, dict):
            return 404, {"error": {"message": f"no route for {path} in the {self.provider} format"}}
        messages = reader(body)
        parsed = parse_judge_prompt(messages)
        if parsed is None:
            return 400, {"error": {"message": "not a cp-observe judge prompt"}}
        flags = word_overlap_policy(*parsed)
        content = json.dumps(
            {"verdicts": [{"context_index": i, "verdict": "yes" if f else "no", "reason": "test policy"}
                          for i, f in enumerate(flags)]}
        )
        prompt_tokens = sum(len(m["content"]) for m in messages) // 4 + 1
        completion_tokens = len(content) // 4 + 1
        with self._lock:
            self.usage.append((prompt_tokens, completion_tokens))
            if self.texts:
                content = self.texts.pop(0)
        reply = writer(body, content, prompt_tokens, completion_tokens)
        if self.usage_fixture is not None:
            reply["usageMetadata" if self.provider == "gemini" else "usage"] = self.usage_fixture
        return 200, {**reply, **self.top_fields}


def _text_of(blocks: Any) -> str:
    if isinstance(blocks, str):
        return blocks
    if isinstance(blocks, list):
        return "".join(b.get("text", "") for b in blocks if isinstance(b, dict))
    return ""


def _anthropic_messages(body: dict[str, Any]) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": _text_of(body.get("system"))}]
    messages += [{"role": m["role"], "content": _text_of(m.get("content"))} for m in body.get("messages", [])]
    return messages


def _anthropic_reply(body: dict[str, Any], text: str, prompt: int, completion: int) -> Any:
    return {
        "id": "msg_loopback", "type": "message", "role": "assistant", "model": body.get("model"),
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }


def _gemini_messages(body: dict[str, Any]) -> list[dict[str, str]]:
    system = body.get("system_instruction") or body.get("systemInstruction") or {}
    messages = [{"role": "system", "content": _text_of(system.get("parts"))}]
    messages += [{"role": "user" if c.get("role") != "model" else "assistant", "content": _text_of(c.get("parts"))}
                 for c in body.get("contents", [])]
    return messages


def _gemini_reply(body: dict[str, Any], text: str, prompt: int, completion: int) -> Any:
    return {
        "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": completion,
                          "totalTokenCount": prompt + completion},
        "modelVersion": "gemini-2.5-flash",
    }


def _openai_messages(body: dict[str, Any]) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": _text_of(m.get("content"))} for m in body.get("messages", [])]


def _azure_reply(body: dict[str, Any], text: str, prompt: int, completion: int) -> Any:
    return {
        "id": "chatcmpl-loopback", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def _cohere_reply(body: dict[str, Any], text: str, prompt: int, completion: int) -> Any:
    tokens = {"input_tokens": prompt, "output_tokens": completion}
    return {
        "id": "cohere-loopback", "finish_reason": "COMPLETE",
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        "usage": {"billed_units": tokens, "tokens": tokens},
    }


# provider -> (request reader, response writer, the path litellm posts to)
_FORMATS: dict[str, tuple[Any, Any, str]] = {
    "anthropic": (_anthropic_messages, _anthropic_reply, r"/v1/messages"),
    "gemini": (_gemini_messages, _gemini_reply, r"/models/[\w.-]+:generateContent"),
    "azure": (_openai_messages, _azure_reply, r"/openai/deployments/[\w.-]+/chat/completions"),
    "cohere": (_openai_messages, _cohere_reply, r"/(v2/chat)?"),
    "openai": (_openai_messages, _azure_reply, r"/(v1/)?chat/completions"),
}
