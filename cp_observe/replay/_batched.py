"""``cp-observe replay --batch``: the replay run twice around provider batches, scoring and emission unchanged.

1. First pass: the same ``replay`` (reading, filters, sampling, turn assembly, the processor) with the judge's
   calls recorded instead of sent (``_batch/_transports.py``) and its evaluations sent nowhere.
2. The recorded requests not yet in a batch are priced at the batch price and checked against
   ``--budget-usd`` (refused whole when over it: nothing is submitted), split to the provider's limits and
   submitted; the batch ids are on disk before the next one is created.
3. Wait: the batches are polled, progress on stderr, results fetched as each ends. Stopped (Ctrl-C, a kill,
   ``wait=False``), the same command run again resumes the batches instead of submitting again.
4. Second pass: the same ``replay`` again, its judge answered from the results; what the batch did not hold
   (a corrective call after a misaligned reply) is called synchronously and counted apart.

Evaluation spans are made by the same code as in a synchronous replay, in the second pass: each starts when
its judgement starts and ends when it is scored, so its duration is the lookup of the batch's answer plus any
corrective call, not the hours the batch queued (the summary gives the batches' own times). The judge
duration histogram records the same span.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from opentelemetry.sdk.trace import TracerProvider

from cp_observe._batch._requests import BatchRequest
from cp_observe._batch._run import BatchOptions, BatchReport, report_lines, run_two_passes
from cp_observe._batch._transports import contexts_in
from cp_observe._errors import ConfigurationError
from cp_observe._judging._llm_judge import LLMJudge
from cp_observe._traces._source import Source
from cp_observe._wiring._providers import judge_from_settings
from cp_observe.replay._dry_run import COMPLETION_TOKENS_PER_CONTEXT, estimate_tokens
from cp_observe.replay._progress import Progress
from cp_observe.replay._run import ReplayOptions, ReplayResult, replay

__all__ = ["BatchOptions", "BatchReport", "batch_replay", "llm_judge", "report_lines", "request_tokens",
           "state_directory"]


def request_tokens(request: BatchRequest) -> tuple[int, int]:
    """A request's estimated prompt and completion tokens (the dry run's estimate), for the budget at submission."""
    prompt = sum(estimate_tokens(str(m.get("content", ""))) + 4 for m in request.messages)
    return prompt, COMPLETION_TOKENS_PER_CONTEXT * max(contexts_in(request.messages), 1) + 10


def state_directory(options: ReplayOptions, batch: BatchOptions) -> Path:
    """Where the run's batches are kept: ``batch.state``, else beside ``--output``."""
    if batch.state is not None:
        return batch.state
    if options.output is None:
        raise ConfigurationError("--batch keeps its batches beside --output FILE: give it, or --batch-state DIR")
    return options.output.with_name(options.output.name + ".batch")


def batch_replay(sources: Sequence[Source], options: ReplayOptions, batch: BatchOptions, *,
                 progress: Progress | None = None, stream: IO[str] | None = None,
                 tracer_provider: TracerProvider | None = None) -> tuple[ReplayResult | None, BatchReport]:
    """Replay ``sources`` with the judge's calls sent as provider batches; ``None`` while batches are open.

    Raises:
        ConfigurationError: the judge has no batch API, the budget is below the batch's estimate, or the
            state directory belongs to another judge.
    """
    if options.dry_run:
        raise ConfigurationError("--batch and --dry-run do not go together (--dry-run estimates without judging)")
    settings = options.settings()
    directory = state_directory(options, batch)

    def first(recorder: LLMJudge) -> None:
        recorded = replay(sources, dataclasses.replace(options, output=None, otlp_endpoint=None, budget_usd=None),
                          judge=recorder, progress=Progress(enabled=False), tracer_provider=TracerProvider())
        if recorded.stopped == "interrupted":  # replay stops reading on Ctrl-C; a partial record is never submitted
            raise KeyboardInterrupt

    def second(answerer: LLMJudge) -> ReplayResult:
        return replay(sources, dataclasses.replace(options, budget_usd=None), judge=answerer, progress=progress,
                      tracer_provider=tracer_provider)

    return run_two_passes(settings, directory, make_judge=lambda: llm_judge(settings), first=first, second=second,
                          batch=batch, budget_usd=options.budget_usd, tokens=request_tokens,
                          stream=stream if stream is not None else sys.stderr)


def llm_judge(settings: Any) -> LLMJudge:
    """The judge of ``settings`` as an ``LLMJudge``, which a batch run needs (not 'lexical')."""
    judge = judge_from_settings(settings)
    if not isinstance(judge, LLMJudge):
        raise ConfigurationError("--batch needs an LLM judge (a provider/model string), not 'lexical'")
    return judge
