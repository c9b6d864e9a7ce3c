"""``run_evals`` results written as dataset lines, so ``cp-observe report`` (and ``--compare``) reads a run.

One line per item the scorer scored, in the format ``cp-observe dataset`` writes (``dataset/_record.py``):
the item's query, the contexts the scorer judged (the candidate retriever's, for a ``contexts_from_output``
scorer), the answer judged against, the new verdicts, reasons and score. An item from ``load_dataset`` keeps
its trace and span ids, data source and segments, so the report pairs it with the production evaluation it
re-ran; any other item gets the data source ``run_evals``. Items whose target or scorer failed are not
written; ``EvalRunResult.failed`` counts them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cp_observe._capture._answer import query_text
from cp_observe._offline._evals import EvalRunResult
from cp_observe._offline._scorer import ContextPrecisionScorer, message_text
from cp_observe.dataset._record import Record, write_records

__all__ = ["write_eval_results"]


def write_eval_results(path: str | Path, results: EvalRunResult, scorer: ContextPrecisionScorer) -> int:
    """Write what ``scorer`` gave in ``results`` to ``path`` as dataset lines; returns the lines written.

    Raises:
        DatasetError: ``path`` cannot be written.
    """
    now = time.time_ns()
    records = []
    for item in results.items:
        result = item.scorer_results.get(scorer.id)
        if result is None:
            continue
        data: Mapping[str, Any] = item.item if isinstance(item.item, Mapping) else {}
        raw_input = data.get("input") if data else item.item
        if scorer.options.contexts_from_output:
            answer: str | None = message_text(data.get("answer")) if data.get("answer") is not None else None
        else:
            answer = message_text(item.output) if item.output is not None else None
        segments = data.get("segments")
        records.append(Record(
            query=query_text(raw_input), contexts=scorer.contexts_of(raw_input, item.output),
            answer=answer if result.reference == "output" else None, score=result.score,
            average_precision=result.average_precision, verdicts=[v.relevant for v in result.verdicts],
            reasons=[v.reason for v in result.verdicts], reference=result.reference,
            trace_id=str(data.get("trace_id", "")), span_id=str(data.get("span_id", "")),
            data_source=str(data.get("data_source", "run_evals")),
            segments={str(k): str(v) for k, v in segments.items()} if isinstance(segments, Mapping) else {},
            time_unix_nano=now, judge_model=result.judge_model,
        ))
    return write_records(path, records)
