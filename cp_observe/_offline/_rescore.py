"""Dataset lines judged again: each line's stored contexts against its stored answer (or query), by one judge.

``cp-observe dataset --judge`` re-scores the evaluations it selected, so a test set can be re-judged with
another model or prompt (or at the batch price, ``--batch``) without the host's retriever. A line keeps what
production recorded (query, contexts, answer, ids, data source, segments) and gets the new verdicts, reasons,
score, average precision and judge model. Its ``rerank`` figures, which came from the old judge's verdicts, are
dropped. A line whose judgement fails is left out and named, never written with its old verdicts.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from cp_observe._errors import CpObserveError
from cp_observe._judging._evaluate import evaluate
from cp_observe._types import Judge, Reference
from cp_observe.dataset._record import Record

__all__ = ["Rescored", "rescore"]

_CONCURRENCY = 8


@dataclass
class Rescored:
    """The lines judged again, in input order, and those that could not be (position, why)."""

    records: list[Record] = field(default_factory=list)
    failed: list[tuple[int, str]] = field(default_factory=list)
    cost_usd: float | None = 0.0


def rescore(records: Sequence[Record], judge: Judge, *, concurrency: int = _CONCURRENCY) -> Rescored:
    """Judge every record's contexts again with ``judge``, at most ``concurrency`` calls at a time."""
    return asyncio.run(_rescore(records, judge, concurrency))


async def _rescore(records: Sequence[Record], judge: Judge, concurrency: int) -> Rescored:
    gate = asyncio.Semaphore(concurrency)

    async def one(record: Record) -> tuple[Record, float | None] | str:
        against = record.answer if record.reference == "output" and record.answer is not None else record.query
        reference: Reference = "output" if against is record.answer else "query"
        async with gate:
            try:
                result = await evaluate(judge, query=record.query, reference_text=against, reference=reference,
                                        contexts=record.contexts)
            except CpObserveError as exc:
                return f"{type(exc).__name__}: {str(exc)[:200]}"
        judged = dataclasses.replace(
            record, verdicts=[v.relevant for v in result.verdicts], reasons=[v.reason for v in result.verdicts],
            score=result.score, average_precision=result.average_precision, judge_model=result.judge_model,
            reference=reference, rerank=None)
        return judged, result.cost_usd

    done = Rescored()
    for position, outcome in enumerate(await asyncio.gather(*(one(r) for r in records))):
        if isinstance(outcome, str):
            done.failed.append((position, outcome))
            continue
        record, cost = outcome
        done.records.append(record)
        done.cost_usd = None if cost is None or done.cost_usd is None else done.cost_usd + cost
    return done
