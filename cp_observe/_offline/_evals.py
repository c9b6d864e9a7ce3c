"""``run_evals``: run a target over a data set, score every item, report per-scorer means."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cp_observe._errors import CpObserveError
from cp_observe._offline._scorer import ContextPrecisionScorer, run_sync
from cp_observe._types import ScoreResult

__all__ = ["EvalItemResult", "EvalRunResult", "arun_evals", "run_evals"]


@dataclass(slots=True)
class EvalItemResult:
    """One item's run.

    Attributes:
        item: the data item as given.
        output: what the target returned (``None`` if it raised).
        scorer_results: ``ScoreResult`` by scorer id, for the scorers that succeeded.
        errors: error text by scorer id (or ``"target"``) for what failed; those items do not enter the means.
    """

    item: Any
    output: Any
    scorer_results: dict[str, ScoreResult] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class EvalRunResult:
    """The whole run: ``scores`` is the mean score per scorer id over the items it scored."""

    scores: dict[str, float]
    items: list[EvalItemResult]
    scored: dict[str, int]
    failed: dict[str, int]


async def arun_evals(
    data: Sequence[Any],
    scorers: Sequence[ContextPrecisionScorer],
    target: Any,
    on_item_complete: Callable[[EvalItemResult], Any] | None = None,
    concurrency: int = 4,
) -> EvalRunResult:
    """Async ``run_evals``."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if not scorers:
        raise ValueError("give at least one scorer")
    ids = [s.id for s in scorers]
    if len(set(ids)) != len(ids):
        raise ValueError(f"scorer ids must be unique, got {ids}; pass scorer_id= to create_context_precision_scorer")
    call = _target_callable(target)
    semaphore = asyncio.Semaphore(concurrency)
    results: list[EvalItemResult | None] = [None] * len(data)

    async def one(position: int, item: Any) -> None:
        async with semaphore:
            item_input = item.get("input") if isinstance(item, Mapping) else item
            expected = item.get("answer") if isinstance(item, Mapping) else None
            result = EvalItemResult(item=item, output=None)
            try:
                result.output = await _call(call, item_input)
            except Exception as exc:  # noqa: BLE001 - a failing target is recorded per item, the run goes on
                result.errors["target"] = f"{type(exc).__name__}: {exc}"
            else:
                for scorer in scorers:
                    try:
                        extra = {"expected": expected} if expected is not None else {}
                        result.scorer_results[scorer.id] = await scorer.arun(input=item_input, output=result.output,
                                                                             **extra)
                    except (CpObserveError, ValueError, TypeError) as exc:
                        result.errors[scorer.id] = f"{type(exc).__name__}: {exc}"
            results[position] = result
        if on_item_complete is not None:
            outcome = on_item_complete(result)
            if inspect.isawaitable(outcome):
                await outcome

    await asyncio.gather(*(one(i, item) for i, item in enumerate(data)))
    items = [r for r in results if r is not None]
    scores: dict[str, float] = {}
    scored: dict[str, int] = {}
    failed: dict[str, int] = {}
    for scorer_id in ids:
        values = [r.scorer_results[scorer_id].score for r in items if scorer_id in r.scorer_results]
        scored[scorer_id] = len(values)
        failed[scorer_id] = len(items) - len(values)
        scores[scorer_id] = sum(values) / len(values) if values else 0.0
    return EvalRunResult(scores=scores, items=items, scored=scored, failed=failed)


def run_evals(
    data: Sequence[Any],
    scorers: Sequence[ContextPrecisionScorer],
    target: Any,
    on_item_complete: Callable[[EvalItemResult], Any] | None = None,
    concurrency: int = 4,
) -> EvalRunResult:
    """Run ``target`` on each item's ``input``, score its output with every scorer, and average.

    Args:
        data: items, each a mapping with an ``input`` (a string or chat messages), or the input itself. An
            item's ``answer`` (a ``load_dataset`` item's stored answer) reaches the scorers as ``expected``:
            a retriever scorer (``contexts_from_output``) judges the target's contexts against it.
        scorers: scorers from ``create_context_precision_scorer``; results are keyed by ``scorer.id``.
        target: a callable (sync or async) taking the input, or an object with ``agenerate``/``generate``/
            ``ainvoke``/``invoke``/``run`` (an agent).
        on_item_complete: called with each ``EvalItemResult`` as it finishes (may be async).
        concurrency: how many items run at once.

    Returns:
        ``EvalRunResult`` with per-scorer means (over the items that scored) and the per-item results.
    """
    return run_sync(arun_evals(data, scorers, target, on_item_complete, concurrency))  # type: ignore[no-any-return]


def _target_callable(target: Any) -> Callable[[Any], Any]:
    for name in ("agenerate", "generate", "ainvoke", "invoke", "run"):
        method = getattr(target, name, None)
        if callable(method):
            return method  # type: ignore[no-any-return]
    if callable(target):
        return target  # type: ignore[no-any-return]
    raise ValueError("target must be callable or have a generate/invoke/run method")


async def _call(call: Callable[[Any], Any], value: Any) -> Any:
    if inspect.iscoroutinefunction(call):
        return await call(value)
    result = await asyncio.to_thread(call, value)
    if inspect.isawaitable(result):
        return await result
    return result
