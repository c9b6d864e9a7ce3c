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
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from opentelemetry.sdk.trace import TracerProvider

from cp_observe._batch._providers import provider_for
from cp_observe._batch._requests import BatchRequest
from cp_observe._batch._session import BatchSession, Waited
from cp_observe._batch._transports import AnsweringTransport, RecordingTransport, SyncCaller, contexts_in
from cp_observe._errors import ConfigurationError
from cp_observe._judging._llm_judge import LLMJudge
from cp_observe._judging._prices import Price, batch_price_of, price_of
from cp_observe._types import Usage
from cp_observe._traces._source import Source
from cp_observe._wiring._providers import judge_from_settings
from cp_observe.replay._dry_run import COMPLETION_TOKENS_PER_CONTEXT, estimate_tokens
from cp_observe.replay._progress import Progress
from cp_observe.replay._run import ReplayOptions, ReplayResult, replay

__all__ = ["BatchOptions", "BatchReport", "batch_replay", "report_lines", "state_directory"]


@dataclass(frozen=True)
class BatchOptions:
    """How a batch run waits and resumes."""

    state: Path | None = None  # the run's directory; default ``<output>.batch``
    wait: bool = True  # poll until every batch ended; else submit (or look) once and stop
    poll_s: float = 30.0
    retry_failed: bool = False  # submit the requests earlier batches failed again
    azure_deployment: str | None = None  # Azure's global-batch deployment


@dataclass
class BatchReport:
    """What the batches did: requests, batches, failures, the billed dollars, corrective calls apart."""

    provider: str = ""
    directory: str = ""
    resumed: bool = False
    requests: int = 0
    merged: int = 0  # calls merged into an identical request
    submitted_now: int = 0
    estimated_usd: float | None = None
    waited: Waited | None = None
    complete: bool = False
    answered: int = 0
    failed_requests: int = 0
    failed_list: str = ""
    failed_examples: list[str] = dataclasses.field(default_factory=list)  # the first few, "custom_id: why"
    batch_usd: float | None = None
    batch_prompt_tokens: int = 0
    batch_completion_tokens: int = 0
    corrective_calls: int = 0
    corrective_usd: float | None = None
    standard_usd: float | None = None  # the same tokens at the synchronous price, for comparison


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
    stream = stream if stream is not None else sys.stderr
    key = settings.judge_api_key.get_secret_value() if settings.judge_api_key else None
    provider = provider_for(settings.judge, settings.judge_api_base, key, batch.azure_deployment)
    vendor, _, name = settings.judge.partition("/")
    report = BatchReport(provider=provider.name)
    directory = state_directory(options, batch)
    session = BatchSession(directory, provider, settings.judge)
    report.directory, report.resumed = str(directory), session.resumed

    stream.write("batch: recording the judge's calls (first pass over the inputs, no model called)\n")
    stream.flush()
    recorder = _llm_judge(settings)
    recording = RecordingTransport(session.start_recording())
    recorder.use_transport(recording)
    first = dataclasses.replace(options, output=None, otlp_endpoint=None, budget_usd=None)
    try:
        recorded = replay(sources, first, judge=recorder, progress=Progress(enabled=False),
                          tracer_provider=TracerProvider())
    finally:
        session.finish_recording()
    if recorded.stopped == "interrupted":  # replay stops reading on Ctrl-C; a partial record is never submitted
        raise KeyboardInterrupt
    log = session.log
    assert log is not None
    report.requests, report.merged = len(log.ids), log.repeats
    stream.write(f"batch: {report.requests} requests recorded ({report.merged} identical calls merged)\n")
    stream.flush()

    price = batch_price_of(vendor, name)
    session.recover(stream)
    pending = list(session.pending(retry_failed=batch.retry_failed))
    report.estimated_usd = session.estimate(pending, price, _tokens)
    if pending and options.budget_usd is not None:
        if report.estimated_usd is None:
            raise ConfigurationError(f"--budget-usd: litellm's table has no batch price for {settings.judge}")
        if report.estimated_usd > options.budget_usd:
            raise ConfigurationError(
                f"--budget-usd {options.budget_usd:g}: the {len(pending)} requests to submit are estimated at "
                f"${report.estimated_usd:.4f} at the batch price; nothing was submitted (raise the budget, or "
                f"lower --max-evaluations or --sample-rate)")
    if pending:
        session.submit(pending, stream)
    report.submitted_now = session.submitted_now
    waited = session.wait(poll_s=batch.poll_s, wait=batch.wait, progress=stream)
    report.waited, report.complete = waited, waited.complete
    if not waited.complete:
        return None, report
    report.failed_requests, failed_path, report.failed_examples = session.write_failed(log.ids)
    report.failed_list = str(failed_path)

    answerer = _llm_judge(settings)
    standard: Price | None = price_of(vendor, name)
    answering = AnsweringTransport(session.results(), price, SyncCaller(provider, standard))
    answerer.use_transport(answering)
    result = replay(sources, dataclasses.replace(options, budget_usd=None), judge=answerer, progress=progress,
                    tracer_provider=tracer_provider)
    report.answered = answering.answered
    report.batch_usd = answering.batch_cost_usd
    report.batch_prompt_tokens = answering.batch_prompt_tokens
    report.batch_completion_tokens = answering.batch_completion_tokens
    report.corrective_calls = answering.corrective_calls
    report.corrective_usd = answering.corrective_cost_usd
    if standard is not None:
        report.standard_usd = standard.cost(Usage(1, answering.batch_prompt_tokens, answering.batch_completion_tokens))
    return result, report


def _llm_judge(settings: Any) -> LLMJudge:
    judge = judge_from_settings(settings)
    if not isinstance(judge, LLMJudge):
        raise ConfigurationError("--batch needs an LLM judge (a provider/model string), not 'lexical'")
    return judge


def _tokens(request: BatchRequest) -> tuple[int, int]:
    """Estimated prompt and completion tokens of one request (the dry run's estimate)."""
    prompt = sum(estimate_tokens(str(m.get("content", ""))) + 4 for m in request.messages)
    return prompt, COMPLETION_TOKENS_PER_CONTEXT * max(contexts_in(request.messages), 1) + 10


def report_lines(report: BatchReport) -> list[str]:
    """The batch part of the terminal summary."""
    lines = [f"  batch ({report.provider}, {report.directory}{', resumed' if report.resumed else ''}): "
             f"{report.requests} requests ({report.merged} identical calls merged), "
             f"{report.submitted_now} submitted by this run"]
    if not report.complete:
        waited = report.waited
        left = waited.in_progress if waited is not None else 0
        lines.append(f"  batches still open ({left} requests in progress): run the same command again to resume")
        return lines
    billed = "unknown (no batch price)" if report.batch_usd is None else f"${report.batch_usd:.4f}"
    standard = "" if report.standard_usd is None else f" (the same tokens at the standard price: " \
                                                      f"${report.standard_usd:.4f})"
    lines.append(f"  billed at the batch price: {billed} for {report.batch_prompt_tokens} prompt + "
                 f"{report.batch_completion_tokens} completion tokens{standard}")
    corrective = "unknown" if report.corrective_usd is None else f"${report.corrective_usd:.4f}"
    lines.append(f"  corrective calls (synchronous, standard price): {report.corrective_calls}, {corrective}")
    if report.failed_requests:
        lines.append(f"  {report.failed_requests} batch requests failed (their evaluations are counted failed), "
                     f"listed in {report.failed_list}: run again with --batch-retry-failed to submit them again")
        lines.extend(f"    {example}" for example in report.failed_examples)
    return lines
