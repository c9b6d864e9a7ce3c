"""The scorer API, shaped like the reference scorer: ``create_context_precision_scorer(model, options).run()``."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cp_observe._capture._answer import answer_text, query_text
from cp_observe._judging._evaluate import evaluate
from cp_observe._judging._judges import resolve_judge
from cp_observe._judging._map import validate_scale
from cp_observe._types import Judge, Reference, ScoreResult

__all__ = [
    "ContextPrecisionOptions",
    "ContextPrecisionScorer",
    "create_context_precision_scorer",
    "message_text",
]

ContextExtractor = Callable[[Any, Any], Sequence[Any]]


class ContextPrecisionOptions(BaseModel):
    """Options of the scorer; camelCase names of the reference scorer are accepted too.

    Attributes:
        context: the retrieved contexts in rank order (fixed for every run).
        context_extractor: ``(input, output) -> contexts``, called on each run; wins over ``context``.
        scale: the score's upper bound (default 1).
        contexts_from_output: the target is a retriever: its output *is* the contexts, in rank order, and they
            are judged against the item's stored ``answer`` (``run_evals`` passes it as ``expected``; a
            ``load_dataset`` item carries it), or against the query when the item has none. Excludes
            ``context`` and ``context_extractor``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", populate_by_name=True, frozen=True)

    context: list[Any] | None = None
    context_extractor: ContextExtractor | None = Field(default=None, alias="contextExtractor")
    scale: float = 1.0
    contexts_from_output: bool = Field(default=False, alias="contextsFromOutput")

    @field_validator("scale")
    @classmethod
    def _check_scale(cls, value: float) -> float:
        return validate_scale(value)


class ContextPrecisionScorer:
    """Scores how well relevant contexts are ranked, with an LLM (or offline) judge.

    Create it with ``create_context_precision_scorer``. ``run`` and ``arun`` take the same ``input`` and
    ``output`` as the reference scorer: the input holds the query, the output is the answer the contexts
    are judged against (the query is used when there is no answer; ``ScoreResult.reference`` says which).
    """

    id = "context-precision-scorer"
    name = "Context Precision"

    def __init__(self, judge: Judge, options: ContextPrecisionOptions, *, scorer_id: str | None = None) -> None:
        self.judge = judge
        self.options = options
        if scorer_id:
            self.id = scorer_id

    async def arun(self, *, input: Any, output: Any = None, expected: Any = None) -> ScoreResult:
        """Score one input/output pair.

        ``expected`` is the stored answer of a data set item; only a retriever scorer (``contexts_from_output``)
        judges against it, since any other scorer's output is itself the answer.

        Raises:
            JudgeError: the judge could not give one aligned verdict per context.
        """
        query = query_text(input)
        if self.options.contexts_from_output:
            answer = message_text(expected) if expected is not None else ""
        else:
            answer = message_text(output) if output is not None else ""
        contexts = self.contexts_of(input, output)
        reference: Reference = "output" if answer.strip() else "query"
        return await evaluate(
            self.judge,
            query=query,
            reference_text=answer if reference == "output" else query,
            reference=reference,
            contexts=contexts,
            scale=self.options.scale,
        )

    def run(self, *, input: Any, output: Any = None, expected: Any = None) -> ScoreResult:
        """Synchronous ``arun``; works inside a running event loop too (it then runs on a helper thread)."""
        result: ScoreResult = run_sync(self.arun(input=input, output=output, expected=expected))
        return result

    def contexts_of(self, input: Any, output: Any) -> list[str]:
        """The context texts this scorer judges for one input/output pair, in rank order."""
        from cp_observe._capture._extract import extract_contexts

        if self.options.contexts_from_output:
            raw_contexts: Any = output
        elif self.options.context_extractor is not None:
            raw_contexts = self.options.context_extractor(input, output)
        else:
            raw_contexts = self.options.context
        return [c.text for c in extract_contexts(raw_contexts, max_items=10_000).contexts]


def create_context_precision_scorer(
    model: str | Judge,
    options: ContextPrecisionOptions | Mapping[str, Any] | None = None,
    *,
    scorer_id: str | None = None,
) -> ContextPrecisionScorer:
    """Create a context precision scorer.

    Args:
        model: a litellm model string (``"openai/gpt-4o-mini"``), ``"lexical"`` for the offline judge, or
            any object implementing the ``Judge`` protocol.
        options: ``context`` or ``context_extractor`` (one is required; the extractor wins when both are
            given), or ``contexts_from_output`` (a retriever target), and ``scale``, as a mapping or
            ``ContextPrecisionOptions``.
        scorer_id: the key of this scorer in ``run_evals`` results (default ``"context-precision-scorer"``).

    Raises:
        ValueError: neither context nor extractor (nor ``contexts_from_output``), an empty context list, a bad
            scale or model.
    """
    if options is None:
        raise ValueError("options must give context or context_extractor")
    opts = options if isinstance(options, ContextPrecisionOptions) else ContextPrecisionOptions.model_validate(options)
    if opts.contexts_from_output:
        if opts.context is not None or opts.context_extractor is not None:
            raise ValueError("contexts_from_output takes the contexts from the target's output: "
                             "give neither context nor context_extractor")
    elif opts.context_extractor is None:
        if opts.context is None:
            raise ValueError("options must give context or context_extractor")
        if len(opts.context) == 0:
            raise ValueError("options.context is empty: give at least one context, or a context_extractor")
    elif not callable(opts.context_extractor):
        raise ValueError("context_extractor must be callable as (input, output) -> contexts")
    return ContextPrecisionScorer(resolve_judge(model), opts, scorer_id=scorer_id)


def message_text(value: Any) -> str:
    """The text of an output (or of an input message), by the one answer rule of ``cp_observe._capture._answer``."""
    return answer_text(value) or ""


def run_sync(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, even when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="cp-observe-run") as pool:
        return pool.submit(asyncio.run, coro).result()
