"""``LLMJudge``: one call judges every context; misaligned replies are repaired or refused.

Flow for one judgement of ``n`` contexts:

1. Verdicts already in the bounded cache are reused; only the others go to the model.
2. One call asks for ``{"verdicts": [{"context_index", "verdict", "reason"}]}`` with structured output
   (``json_schema``), falling back to ``json_object`` and then to plain text when the server refuses it.
3. A reply whose indices are missing, repeated, out of range or shifted gets one corrective retry.
4. Whatever is still missing is judged one context per call; if that fails too, ``JudgeError``.

Transport failures (timeouts, connection errors, 429 and 5xx) are retried with exponential backoff,
honouring ``Retry-After``. What each call sends beside the messages (temperature, reasoning effort, service
tier, prompt cache key) is decided once per judge by `_judging/_params.py`; a parameter a model answers 400 to
is dropped for the rest of the judge's life. On the flex tier, a capacity refusal (a 429 that is not a rate
limit, or a 400 for a model without flex) sends that request again at the standard tier, counted in
``tier_fallbacks`` and logged once; a rate-limit 429 is retried as any other. The API key is only ever sent
to the provider; it is scrubbed from every message this module raises or logs.

Which provider path a model takes: a model whose provider speaks OpenAI's chat completions
(``_lean.LEAN_PROVIDERS``) goes through the lean transport (`_judging/_lean.py`: one pooled session, the
request fixed once, the price once, litellm not imported); any other, or ``transport="litellm"``, through
``litellm.acompletion``. Retries, fallbacks and the parsing below are the same for both.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cp_observe._errors import JudgeError, JudgeTransportError
from cp_observe._judging._cache import LRUCache
from cp_observe._judging._digest import content_digest
from cp_observe._judging._lean import LeanReply, LeanTransport, route
from cp_observe._judging._litellm import load_litellm
from cp_observe._judging._params import EFFORTS, TIERS, rejected_parameter, request_params
from cp_observe._judging._prices import Price, model_price, price_of, table_entry
from cp_observe._judging._prompt import (
    PROMPT_VERSION,
    Budget,
    build_prompt,
    check_prompt,
    corrective_message,
    prompt_label,
    verdicts_schema,
)
from cp_observe._judging._usage import read_usage
from cp_observe._judging._verdicts import Alignment, align, parse_reply
from cp_observe._log import logger
from cp_observe._types import Judgement, Usage, Verdict

__all__ = ["LLMJudge"]

StructuredOutput = Literal["auto", "json_schema", "json_object", "none"]
Transport = Literal["auto", "litellm"]
TRANSPORTS: tuple[Transport, ...] = ("auto", "litellm")
_MODES: tuple[StructuredOutput, ...] = ("json_schema", "json_object", "none")
_RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
_MAX_RETRY_AFTER_S = 60.0
_FALLBACK_CONCURRENCY = 4
#: The flex tier's HTTP timeout by default: providers advise up to 15 minutes, as a flex request may queue.
FLEX_TIMEOUT_S = 900.0
_SECRET_VARIABLE = re.compile(r"(API_KEY|_KEY|TOKEN|SECRET)$", re.IGNORECASE)
# Key-shaped tokens (OpenAI/Anthropic "sk-...", Bearer tokens) are scrubbed even when we do not know the key.
_KEY_LIKE = re.compile(r"\b(sk-[A-Za-z0-9_\-]{6,}|Bearer\s+[A-Za-z0-9._\-]{8,})")


@dataclass(slots=True)
class _Reply:
    text: str
    usage: Usage
    cost_usd: float | None


class LLMJudge:
    """A judge backed by any model litellm can call (OpenAI, Anthropic, Ollama, vLLM, llama.cpp, ...).

    Args:
        model: a litellm model string, e.g. ``"openai/gpt-4o-mini"`` or ``"ollama/llama3.1"``.
        api_base: the endpoint, for self-hosted or proxied models.
        api_key: the key; when omitted litellm reads the provider's usual environment variable.
        timeout: seconds allowed for one HTTP call.
        max_retries: transport retries per call (429, 5xx, timeouts, connection errors).
        structured_output: ``"auto"`` tries ``json_schema``, then ``json_object``, then plain text, and
            remembers what the server accepted; or force one of those modes.
        reason_language: the language the judge writes its per-context reasons in (e.g. ``"Japanese"``).
        llm_reason: also ask the model for an overall reason (one more call); by default the reason is
            built from the verdicts, which is exact and free.
        cache_size: how many per-context verdicts to keep (LRU); 0 disables the cache.
        budget: character budgets for the prompt; long contexts are cut and the cut is recorded.
        backoff_base: first retry delay in seconds, doubled per attempt with jitter.
        backoff_max: the longest delay between retries in seconds.
        transport: ``"auto"`` takes the lean path for the providers it covers (``openai/``, ``hosted_vllm/``)
            and ``litellm.acompletion`` for the rest; ``"litellm"`` always takes ``litellm.acompletion``.
        prompt_version: the judge prompt, one of ``PROMPT_VERSIONS`` (the previous ones are kept for a rollout).
        reasons: what the judge writes reasons for: ``"all"`` verdicts, only ``"no"`` verdicts, or ``"none"``.
        reasoning_effort: for models that reason: ``"auto"`` (the lowest above none for OpenAI's reasoning
            models, ``minimal`` for Gemini's, nothing sent to others) or a level sent as given.
        service_tier: sent as ``service_tier`` when set (``"flex"``: batch prices, slower, may refuse).
        flex_timeout: seconds allowed for one HTTP call on the flex tier (``timeout`` applies otherwise).
        **litellm_kwargs: passed to ``litellm.acompletion`` unchanged; they override the judge's own
            parameters (``temperature``, ``reasoning_effort``, ...).
    """

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        structured_output: StructuredOutput = "auto",
        reason_language: str | None = None,
        llm_reason: bool = False,
        cache_size: int = 10_000,
        budget: Budget | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        transport: Transport = "auto",
        prompt_version: str = PROMPT_VERSION,
        reasons: str = "all",
        reasoning_effort: str = "auto",
        service_tier: str | None = None,
        flex_timeout: float = FLEX_TIMEOUT_S,
        **litellm_kwargs: Any,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError("model must be a non-empty litellm model string")
        if timeout <= 0:
            raise ValueError("timeout must be > 0 seconds")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if structured_output not in ("auto", *_MODES):
            raise ValueError(f"structured_output must be one of auto, {', '.join(_MODES)}")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}")
        check_prompt(prompt_version, reasons)
        if reasoning_effort not in EFFORTS:
            raise ValueError(f"reasoning_effort must be one of {', '.join(EFFORTS)}")
        if service_tier is not None and service_tier not in TIERS:
            raise ValueError(f"service_tier must be one of {', '.join(TIERS)}, or None")
        if flex_timeout <= 0:
            raise ValueError("flex_timeout must be > 0 seconds")
        self._model = model
        self._api_base = api_base
        self._api_key = api_key
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self._modes: list[StructuredOutput] = list(_MODES) if structured_output == "auto" else [structured_output]
        self.reason_language = reason_language
        self.llm_reason = llm_reason
        self.budget = budget or Budget()
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._kwargs = litellm_kwargs
        self._version = prompt_version
        self.reasons = reasons
        self.reasoning_effort = reasoning_effort
        self.service_tier = service_tier
        self.flex_timeout = float(flex_timeout)
        self._params: dict[str, Any] | None = None  # the judge's own parameters, decided on the first call
        #: Requests sent again at the standard tier after the flex tier refused them (capacity or no flex).
        self.tier_fallbacks = 0
        self._fallback_logged = False
        self._cache: LRUCache[Verdict] = LRUCache(cache_size)
        self._transport: Transport = transport
        self._lean: LeanTransport | None = None
        self._lean_resolved = False
        self._price: Price | None = None
        self._price_resolved = False
        # Verdicts being asked for right now, by cache key: one entry per context of a call in flight (so bounded
        # by concurrency x contexts), each removed when its call ends. Used by one event loop at a time per key.
        self._inflight: dict[str, asyncio.Future[Verdict | None]] = {}

    def __repr__(self) -> str:
        # Never show the key.
        return f"LLMJudge(model={self._model!r}, api_base={self._api_base!r}, timeout={self.timeout})"

    @property
    def model(self) -> str:
        """The litellm model string."""
        return self._model

    @property
    def prompt_version(self) -> str:
        """The prompt's label on the score series and in the verdict cache (`_judging/_identity.py` reads it)."""
        return prompt_label(self._version, self.reasons)

    @property
    def path(self) -> str:
        """Which provider path calls take: ``"lean"`` or ``"litellm"`` (resolved once, on first use)."""
        return "lean" if self._lean_here() is not None else "litellm"

    def _lean_here(self) -> LeanTransport | None:
        if not self._lean_resolved:
            auto = self._transport == "auto"
            found = route(self._model, self._api_base, self._api_key, self._kwargs) if auto else None
            self._lean = LeanTransport(found, self.timeout) if found is not None else None
            self._lean_resolved = True
        return self._lean

    def use_transport(self, transport: Any) -> None:
        """Send every call through ``transport`` (``complete(messages, params) -> LeanReply``) instead.

        Batch judging's seam: the messages and parameters are built here exactly as for a synchronous call,
        and only where they go changes (recorded for a provider batch, or answered from its results).
        """
        self._lean = transport
        self._lean_resolved = True

    @property
    def price(self) -> Price | None:
        """The model's prices from litellm's table, looked up once; ``None``: unknown, so is every call's cost.

        A ``base_model`` keyword (litellm's way to price an Azure deployment by the model it runs) is priced
        instead of the model string, under the model's provider when it names none.
        """
        if not self._price_resolved:
            base = self._kwargs.get("base_model")
            if isinstance(base, str) and base.strip():
                provider = self._model.partition("/")[0] if "/" in self._model else ""
                self._price = model_price(base) if "/" in base else price_of(provider, base.strip())
            else:
                self._price = model_price(self._model)  # the lean route's price too: both look up provider/name
            self._price_resolved = True
        return self._price

    @property
    def cache(self) -> LRUCache[Verdict]:
        """The verdict cache (its ``hits``/``misses``/``evictions`` counters are useful in benchmarks)."""
        return self._cache

    async def judge(self, query: str, reference: str, contexts: Sequence[str]) -> Judgement:
        """Return one verdict per context, in rank order.

        Raises:
            JudgeError: no aligned verdict could be obtained for every context.
            JudgeTransportError: the endpoint kept failing after the retries.
        """
        spend = _Spend()
        try:
            return await self._judge(query, reference, contexts, spend)
        except JudgeError as exc:  # the replies before the failure were billed: the error carries their cost
            exc.cost_usd = exc.cost_usd + spend.cost if exc.cost_usd is not None and spend.cost is not None else None
            raise

    async def _judge(self, query: str, reference: str, contexts: Sequence[str], spend: _Spend) -> Judgement:
        n = len(contexts)
        language = self.reason_language or ""
        label = self.prompt_version
        keys = [content_digest(self._model, label, language, query, reference, c) for c in contexts]
        found: dict[int, Verdict] = {}
        waiting: dict[int, asyncio.Future[Verdict | None]] = {}
        loop = asyncio.get_running_loop()
        for i, key in enumerate(keys):
            hit = self._cache.get(key)
            if hit is not None:
                found[i] = Verdict(i, hit.relevant, hit.reason)
                continue
            pending = self._inflight.get(key)
            if pending is not None and not pending.done() and pending.get_loop() is loop:
                waiting[i] = pending  # another judgement on this loop is asking for it now
        todo = [i for i in range(n) if i not in found and i not in waiting]
        cached = n - len(todo)
        await self._judge_into(query, reference, contexts, keys=keys, todo=todo, found=found, spend=spend, loop=loop)
        if waiting:
            # shield: this judgement timing out must not cancel the call another judgement is waiting on.
            answers = await asyncio.gather(*(asyncio.shield(f) for f in waiting.values()))
            again = []
            for i, answer in zip(waiting, answers, strict=True):
                if answer is None:
                    again.append(i)  # that call failed or was cancelled: ask for it here
                else:
                    found[i] = Verdict(i, answer.relevant, answer.reason)
            cached -= len(again)
            await self._judge_into(query, reference, contexts, keys=keys, todo=again, found=found, spend=spend,
                                   loop=loop)
        ordered = tuple(found[i] for i in range(n))
        reason = None
        if self.llm_reason and n:
            reason, extra = await self._write_reason(query, reference, ordered)
            spend.add(extra.usage, extra.cost)
        return Judgement(verdicts=ordered, model=self._model, usage=spend.usage, cost_usd=spend.cost,
                         truncated=tuple(sorted(spend.truncated)), cached=cached, reason=reason)

    async def _judge_into(  # the state of one judge() call, passed down
        self,
        query: str,
        reference: str,
        contexts: Sequence[str],
        *,
        keys: list[str],
        todo: list[int],
        found: dict[int, Verdict],
        spend: _Spend,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """Judge ``contexts[i]`` for ``i`` in ``todo`` in one call; cache them, and answer who waits on them.

        While the call runs, each key is in ``_inflight``: a concurrent judgement on the same loop asking the same
        question (the reranker over a retrieval's documents, say) awaits it instead of calling the model again.
        """
        if not todo:
            return
        mine: dict[str, asyncio.Future[Verdict | None]] = {}
        for i in todo:
            key = keys[i]
            pending = self._inflight.get(key)
            if key not in mine and (pending is None or pending.done() or pending.get_loop() is not loop):
                mine[key] = self._inflight[key] = loop.create_future()
        try:
            sub = [contexts[i] for i in todo]
            verdicts, usage, cost_or_none, sub_truncated = await self._judge_uncached(query, reference, sub)
            spend.add(usage, cost_or_none)
            spend.truncated.update(todo[i] for i in sub_truncated)
            for local, verdict in enumerate(verdicts):
                index = todo[local]
                found[index] = Verdict(index, verdict.relevant, verdict.reason)
                self._cache.put(keys[index], found[index])
                future = mine.get(keys[index])
                if future is not None and not future.done():
                    future.set_result(found[index])
        finally:
            for key, future in mine.items():
                if not future.done():
                    future.set_result(None)  # failed or cancelled: the waiters ask for it themselves
                if self._inflight.get(key) is future:
                    del self._inflight[key]

    async def _judge_uncached(
        self, query: str, reference: str, contexts: Sequence[str]
    ) -> tuple[list[Verdict], Usage, float | None, tuple[int, ...]]:
        n = len(contexts)
        prompt = build_prompt(query, reference, contexts, budget=self.budget, reason_language=self.reason_language,
                              version=self._version, reasons=self.reasons)
        spent = _Spend()
        reply = await self._complete(prompt.messages, spent)
        alignment = _align_text(reply.text, n)
        if len(alignment.verdicts) < n:
            logger.debug("judge reply misaligned; asking once more", model=self._model, problems=alignment.problems[:5])
            retry_messages = [
                *prompt.messages,
                {"role": "assistant", "content": reply.text[:8000]},
                corrective_message(n, alignment.indices),
            ]
            retry = await self._complete(retry_messages, spent)
            second = _align_text(retry.text, n)
            if second.trustworthy and len(second.verdicts) >= len(alignment.verdicts):
                alignment = second
            elif not alignment.trustworthy:
                alignment = Alignment()
        missing = alignment.missing(n)
        if missing:
            logger.debug("judging contexts one by one", model=self._model, count=len(missing))
            semaphore = asyncio.Semaphore(_FALLBACK_CONCURRENCY)

            async def one(i: int) -> tuple[int, Verdict | None]:
                async with semaphore:
                    return i, await self._judge_single(query, reference, contexts[i], spent)

            for i, verdict in await asyncio.gather(*(one(i) for i in missing)):
                if verdict is None:
                    raise JudgeError(
                        f"judge {self._model} gave no usable verdict for context {i} of {n} "
                        f"after a corrective retry and a per-context call",
                        calls=spent.usage.calls, cost_usd=spent.cost,
                    )
                alignment.verdicts[i] = Verdict(i, verdict.relevant, verdict.reason)
        verdicts = [alignment.verdicts[i] for i in range(n)]
        return verdicts, spent.usage, spent.cost, prompt.truncated

    async def _judge_single(self, query: str, reference: str, context: str, spent: _Spend) -> Verdict | None:
        prompt = build_prompt(query, reference, [context], budget=self.budget, reason_language=self.reason_language,
                              version=self._version, reasons=self.reasons)
        reply = await self._complete(prompt.messages, spent)
        entries = parse_reply(reply.text) or []
        usable = [e for e in entries if e.relevant is not None]
        if len(usable) != 1:
            return None
        return Verdict(0, bool(usable[0].relevant), usable[0].reason)

    async def _write_reason(self, query: str, reference: str, verdicts: Sequence[Verdict]) -> tuple[str, _Spend]:
        spent = _Spend()
        summary = "\n".join(  # a verdict without a reason (judge_reasons "no" or "none") is named bare
            f"- context {v.index + 1}: {'relevant' if v.relevant else 'not relevant'}"
            + (f" ({v.reason[:300]})" if v.reason else "")
            for v in verdicts
        )
        language = f" Write it in {self.reason_language}." if self.reason_language else ""
        messages = [
            {
                "role": "system",
                "content": "Explain in two sentences why the retrieval got this context precision score, "
                "given the per-context verdicts. Reply with plain text." + language,
            },
            {"role": "user", "content": f"Question: {query[:2000]}\nVerdicts in rank order:\n{summary}"},
        ]
        reply = await self._complete(messages, spent, structured=False)
        return reply.text.strip()[:2000], spent

    async def _complete(self, messages: list[dict[str, str]], spent: _Spend, *, structured: bool = True) -> _Reply:
        """One logical call: transport retries with backoff, structured-output fallback."""
        lean = self._lean_here()
        litellm: Any = load_litellm() if lean is None else None
        attempt = 0
        standard = False  # this request was refused by the flex tier: the rest of it goes at the standard tier
        while True:
            mode: StructuredOutput = self._modes[0] if structured else "none"
            kwargs: dict[str, Any] = {**self._own_params(), **self._kwargs}
            if standard:
                kwargs.pop("service_tier", None)
            flex = kwargs.get("service_tier") == "flex"
            timeout = self.flex_timeout if flex else self.timeout
            if mode != "none":
                kwargs["response_format"] = _response_format(mode, self.reasons)
            started = time.monotonic()
            try:
                if lean is not None:
                    response: Any = await lean.complete(messages, kwargs, timeout=timeout if flex else None)
                else:
                    response = await asyncio.wait_for(
                        litellm.acompletion(
                            model=self._model,
                            messages=messages,
                            api_base=self._api_base,
                            api_key=self._api_key,
                            timeout=timeout,
                            max_retries=0,
                            **kwargs,
                        ),
                        timeout=timeout + 5.0,
                    )
            except Exception as exc:  # noqa: BLE001 - classified below; nothing escapes unclassified
                spent.usage = spent.usage + Usage(calls=1)
                if structured and _refuses_response_format(exc, mode) and len(self._modes) > 1:
                    logger.info("judge refused structured output; falling back", model=self._model, mode=mode)
                    self._modes.pop(0)
                    continue
                if flex and _flex_refused(exc):
                    standard = True
                    self._count_tier_fallback(exc)
                    continue
                dropped = rejected_parameter(exc, kwargs)
                if dropped is not None and dropped not in self._kwargs and self._params and dropped in self._params:
                    logger.info("judge model rejects a parameter; no longer sending it", model=self._model,
                                parameter=dropped)
                    self._params.pop(dropped)
                    continue
                if attempt < self.max_retries and _retryable(exc):
                    delay = self._delay(attempt, exc)
                    attempt += 1
                    logger.debug("judge call failed; retrying", model=self._model, attempt=attempt, delay_s=delay,
                                 error=self._scrub(type(exc).__name__))
                    await asyncio.sleep(delay)
                    continue
                message = self._scrub(f"{type(exc).__name__}: {exc}")[:500]
                failure: JudgeError = (
                    JudgeTransportError(
                        f"judge {self._model} failed after {attempt + 1} attempts: {message}", calls=spent.usage.calls,
                        cost_usd=spent.cost,
                    )
                    if _retryable(exc)
                    else JudgeError(f"judge {self._model} call failed: {message}", calls=spent.usage.calls,
                                    cost_usd=spent.cost)
                )
                break
            reply = _lean_reply(response) if lean is not None else _reply_of(self.price, response)
            spent.add(reply.usage, reply.cost_usd)
            logger.debug("judge call", model=self._model, seconds=round(time.monotonic() - started, 3))
            return reply
        # Raised outside the except block, so the unscrubbed litellm error is not kept as __context__.
        raise failure

    def _own_params(self) -> dict[str, Any]:
        """The parameters this judge sends on its own, decided once from litellm's table (`_judging/_params.py`)."""
        if self._params is None:
            self._params = request_params(self._model, table_entry(self._model), prompt_label=self.prompt_version,
                                          reasoning_effort=self.reasoning_effort, service_tier=self.service_tier)
        return self._params

    def _count_tier_fallback(self, exc: BaseException) -> None:
        self.tier_fallbacks += 1
        if not self._fallback_logged:
            self._fallback_logged = True
            logger.warning("the flex tier refused a judge request; sending it at the standard tier (logged once, "
                           "counted in tier_fallbacks)", model=self._model, status=_status(exc))
        else:
            logger.debug("flex tier refused a judge request; standard tier", model=self._model, status=_status(exc))

    def _delay(self, attempt: int, exc: BaseException) -> float:
        retry_after = _retry_after(exc)
        if retry_after is not None:
            return min(retry_after, _MAX_RETRY_AFTER_S)
        return float(min(self.backoff_max, self.backoff_base * 2**attempt) * random.uniform(0.5, 1.0))

    def _scrub(self, text: str) -> str:
        """Remove every key litellm might have used: ours, and the provider variables' (the documented fallback)."""
        keys = [self._api_key] if self._api_key else []
        keys.extend(value for name, value in os.environ.items() if _SECRET_VARIABLE.search(name) and value)
        for key in keys:
            if key is None or len(key) < 8:
                continue
            text = text.replace(key, "***")
            # Providers echo keys partly masked ("sk-abc...wxyz"); drop the recognisable ends too.
            if len(key) >= 12:
                text = text.replace(key[:8], "***").replace(key[-4:], "***")
        return _KEY_LIKE.sub("***", text)


@dataclass(slots=True)
class _Spend:
    """What model calls cost (``cost`` is ``None`` once one reply's price is unknown), and which contexts they cut."""

    usage: Usage = field(default_factory=Usage)
    cost: float | None = 0.0
    truncated: set[int] = field(default_factory=set)

    def add(self, usage: Usage, cost: float | None) -> None:
        self.usage = self.usage + usage
        self.cost = self.cost + cost if self.cost is not None and cost is not None else None


def _response_format(mode: StructuredOutput, reasons: str) -> dict[str, Any]:
    if mode == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": "context_precision_verdicts", "schema": verdicts_schema(reasons), "strict": True},
        }
    return {"type": "json_object"}


def _align_text(text: str, n: int) -> Alignment:
    entries = parse_reply(text)
    if entries is None:
        alignment = Alignment(trustworthy=False)
        alignment.problems.append("no JSON in the reply")
        return alignment
    return align(entries, n)


def _lean_reply(response: LeanReply) -> _Reply:
    return _Reply(response.text, response.usage, response.cost_usd)


def _reply_of(price: Price | None, response: Any) -> _Reply:
    """Text, usage and cost of a litellm reply, priced here (litellm's ``completion_cost`` is not used)."""
    try:
        text = response.choices[0].message.content or ""
    except (AttributeError, IndexError, TypeError):
        text = ""
    usage, tier = read_usage(response)
    cost = price.cost(usage, tier) if price is not None else None
    return _Reply(text if isinstance(text, str) else str(text), usage, cost)


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    name = type(exc).__name__
    if name in {"Timeout", "APIConnectionError", "RateLimitError", "InternalServerError", "ServiceUnavailableError",
                "BadGatewayError"}:
        return True
    status = _status(exc)
    return status in _RETRYABLE_STATUS


_RATE_LIMIT_WORDS = ("rate_limit", "rate limit", "quota", "too many requests")
_NO_FLEX_WORDS = ("service_tier", "service tier", "flex")


def _flex_refused(exc: BaseException) -> bool:
    """A flex-tier refusal: a capacity 429 (or Groq's 498), not a rate limit; or a 400 naming the tier.

    A rate-limit 429 names its limit (OpenAI's ``rate_limit_exceeded``, ``insufficient_quota``); a capacity 429
    (OpenAI's "resource unavailable") does not. A model without flex answers 400 naming ``service_tier``.
    """
    status = _status(exc)
    text = str(exc).lower()
    if status in (429, 498) or type(exc).__name__ == "RateLimitError":
        return not any(word in text for word in _RATE_LIMIT_WORDS)
    if status == 400 or type(exc).__name__ == "BadRequestError":
        return any(word in text for word in _NO_FLEX_WORDS)
    return False


def _refuses_response_format(exc: BaseException, mode: StructuredOutput) -> bool:
    if mode == "none":
        return False
    status = _status(exc)
    # 400/422/501 are the usual refusals; llama-cpp-python's server wraps its validation error in a 500.
    if status not in (400, 422, 500, 501) and type(exc).__name__ not in {
        "BadRequestError", "UnsupportedParamsError", "InternalServerError"
    }:
        return False
    text = str(exc).lower()
    return any(word in text for word in ("response_format", "json_schema", "json schema", "response format",
                                         "structured output", "json_object"))


def _retry_after(exc: BaseException) -> float | None:
    headers: Any = getattr(exc, "litellm_response_headers", None) or getattr(exc, "headers", None)
    if not headers:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
    if not headers:
        return None
    try:
        value = headers.get("retry-after") or headers.get("Retry-After")
    except Exception:  # noqa: BLE001 - odd header containers; no Retry-After then
        return None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        import email.utils  # the rare HTTP-date form: imported here, it costs configure() nothing

        parsed = email.utils.parsedate_to_datetime(str(value)) if str(value).strip() else None
        if parsed is None:
            return None
        return max(0.0, parsed.timestamp() - time.time())
