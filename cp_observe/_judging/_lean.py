"""The lean judge transport: OpenAI chat completions on one pooled HTTP client, without importing litellm.

litellm stays the provider layer: it decides what a model string means. For the providers whose wire format
*is* OpenAI's chat completions (``LEAN_PROVIDERS``), what litellm would send is fixed once per judge (the URL,
the wire model name, the headers with the key from the argument or the provider's environment variable) and
sent on one pooled ``aiohttp`` session per event loop; the price comes once per model from litellm's own price table
(`_judging/_prices.py`), the cost from the response's ``usage`` and ``service_tier`` (`_judging/_usage.py`).
Everything else (``route`` returns ``None``) takes ``litellm.acompletion``. ``tests/judging/test_lean_transport.py``
checks that both paths put equal requests on the wire and read equal verdicts, usage and cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from cp_observe._judging._prices import Price, price_of
from cp_observe._judging._usage import read_usage
from cp_observe._types import Usage

__all__ = ["LEAN_PROVIDERS", "LeanConnectionError", "LeanStatusError", "LeanTransport", "Route", "route"]

# provider prefix -> (key variable, base variables in litellm's order, default base, key when none, Accept)
_PROVIDERS: dict[str, tuple[str, tuple[str, ...], str | None, str | None, str]] = {
    "openai": ("OPENAI_API_KEY", ("OPENAI_BASE_URL", "OPENAI_API_BASE"), "https://api.openai.com/v1", None,
               "application/json"),
    "hosted_vllm": ("HOSTED_VLLM_API_KEY", ("HOSTED_VLLM_API_BASE",), None, "fake-api-key", "*/*"),
}
LEAN_PROVIDERS = tuple(_PROVIDERS)
# Parameters both providers pass into the body unchanged; any other litellm keyword takes litellm's path.
_PASSTHROUGH = frozenset({"temperature", "top_p", "seed", "max_tokens", "stop", "presence_penalty",
                          "frequency_penalty", "reasoning_effort", "service_tier", "prompt_cache_key"})


@dataclass(frozen=True, slots=True)
class Route:
    """What litellm would send for one model, fixed once: where, as which model, with which headers."""

    provider: str
    url: str
    wire_model: str
    headers: Mapping[str, str]
    price: Price | None


def route(model: str, api_base: str | None, api_key: str | None, kwargs: Mapping[str, Any]) -> Route | None:
    """The lean route for ``model``, or ``None`` when litellm's own path must take it.

    ``None`` for: a provider outside ``LEAN_PROVIDERS`` (or a bare model name, whose provider litellm infers),
    a keyword outside the pass-through set, no endpoint, an OpenAI model with no key anywhere (litellm's path
    then reports the missing key). (``LLMJudge(transport="litellm")`` never asks.)
    """
    provider, slash, name = model.partition("/")
    spec = _PROVIDERS.get(provider)
    if not slash or not name or spec is None or not set(kwargs) <= _PASSTHROUGH:
        return None
    key_variable, base_variables, default_base, default_key, accept = spec
    base = api_base or next((os.environ[v] for v in base_variables if os.environ.get(v)), None) or default_base
    key = api_key or os.environ.get(key_variable) or default_key
    if not base or not key:
        return None
    headers = {
        "accept": accept,
        "accept-encoding": "gzip, deflate",
        "connection": "keep-alive",
        "authorization": f"Bearer {key}",
        "content-type": "application/json",
    }
    return Route(provider, base.rstrip("/") + "/chat/completions", name, headers, price_of(provider, name))


class LeanStatusError(Exception):
    """A non-2xx answer: ``status_code``, ``headers`` (for ``Retry-After``) and the body's text in the message."""

    def __init__(self, status_code: int, headers: Mapping[str, str], text: str) -> None:
        super().__init__(f"HTTP {status_code}: {text[:1000]}")
        self.status_code = status_code
        self.headers = headers


class LeanConnectionError(ConnectionError):
    """The connection failed or broke (retried like litellm's ``APIConnectionError``)."""


@dataclass(frozen=True, slots=True)
class LeanReply:
    """What one call returned: the reply text, its usage, and the cost when the model has a price."""

    text: str
    usage: Usage
    cost_usd: float | None


class LeanTransport:
    """One pooled ``aiohttp.ClientSession`` per event loop for one judge's route (the evaluator keeps one loop).

    aiohttp, not httpx: about a quarter of httpx's CPU per call (``benchmarks/HISTORY.md``), and ``serve``
    imports it anyway. A session belongs to the loop it was made on, so each loop gets its own; the sessions
    of loops that have closed since are closed on the next call (from the new loop: their sockets are gone
    with their loop, so closing only marks them closed and keeps aiohttp from warning about them later).
    """

    def __init__(self, route: Route, timeout: float) -> None:
        self.route = route
        self._timeout = timeout
        self._sessions: dict[asyncio.AbstractEventLoop, Any] = {}  # bounded: loops that are alive, plus one
        self._client_timeout: Any = None

    async def _session_here(self) -> Any:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is not None and not session.closed:
            return session
        import aiohttp  # a dependency of litellm and of serve; imported on a judge's first call only

        self._forget_closed_loops()
        if self._client_timeout is None:
            self._client_timeout = aiohttp.ClientTimeout(total=self._timeout)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))  # aiohttp's own user-agent
        self._sessions[loop] = session
        return session

    async def complete(
        self, messages: list[dict[str, str]], params: Mapping[str, Any], *, timeout: float | None = None
    ) -> LeanReply:
        """POST one chat completion; raise ``LeanStatusError``, ``LeanConnectionError`` or ``TimeoutError``.

        ``timeout`` replaces the transport's own for this call (the flex tier's, which may queue for minutes).
        """
        import aiohttp

        session = await self._session_here()
        body = orjson.dumps({"model": self.route.wire_model, "messages": messages, **params})
        seconds = self._timeout if timeout is None else timeout
        client_timeout = self._client_timeout if timeout is None else aiohttp.ClientTimeout(total=timeout)
        try:
            async with session.post(self.route.url, data=body, headers=self.route.headers,
                                    timeout=client_timeout) as response:
                payload = await response.read()
                status, headers = response.status, response.headers
        except TimeoutError:
            raise TimeoutError(f"the judge did not answer in {seconds:g} s") from None
        except aiohttp.ClientError as exc:
            raise LeanConnectionError(f"{type(exc).__name__}: {exc}") from None
        if status >= 300:
            raise LeanStatusError(status, headers, payload.decode("utf-8", "replace"))
        return _reply(payload, self.route.price)

    def _forget_closed_loops(self) -> None:
        for other, old in list(self._sessions.items()):
            if other.is_closed():
                self._sessions.pop(other, None)
                _forget(old)

    def __del__(self) -> None:
        # A finalizer: attribute updates only, no lock, no loop (the closed loops' sessions are only marked).
        with contextlib.suppress(Exception):  # a finalizer must not raise; aiohttp then warns at worst
            self._forget_closed_loops()


def _forget(session: Any) -> None:
    """Mark a session of a closed loop closed, so aiohttp does not warn about it when it is collected.

    Its connections went with their loop; closing its connector then only marks it closed (aiohttp does no
    loop work for a closed loop), and the no-op the close returns is run to its end right here.
    """
    connector = session.connector
    session.detach()
    if connector is not None:
        closing = connector.close().__await__()
        with contextlib.suppress(StopIteration):
            next(closing)


def _reply(payload: bytes, price: Price | None) -> LeanReply:
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise LeanStatusError(200, {}, "the reply is not JSON: " + payload[:200].decode("utf-8", "replace")) from None
    text: Any = ""
    try:
        text = data["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        text = ""
    usage, tier = read_usage(data if isinstance(data, dict) else {})
    cost = price.cost(usage, tier) if price is not None else None
    return LeanReply(text if isinstance(text, str) else str(text), usage, cost)
