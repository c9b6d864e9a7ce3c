"""One batch run of any offline command: record, price, submit, wait, answer; the command gives the two passes.

A command that judges (``replay``, ``calibrate --judge``, ``dataset --judge``) runs its own work twice with an
``LLMJudge`` it is given: once recording the calls (``first``), once answered from the batches' results
(``second``). Between the two, this module checks the budget at the batch price, submits what no batch holds
(after resolving a create a stopped run left unfinished), and waits or stops. The report is the same for every
command, and so are the summary's lines.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from cp_observe._batch._providers import provider_for
from cp_observe._batch._requests import BatchRequest
from cp_observe._batch._session import BatchSession, Waited
from cp_observe._batch._transports import AnsweringTransport, RecordingTransport, SyncCaller
from cp_observe._errors import ConfigurationError
from cp_observe._judging._llm_judge import LLMJudge
from cp_observe._judging._prices import Price, batch_price_of, price_of
from cp_observe._types import Usage

__all__ = ["BatchOptions", "BatchReport", "report_lines", "run_two_passes"]

T = TypeVar("T")


@dataclass(frozen=True)
class BatchOptions:
    """How a batch run waits and resumes."""

    state: Path | None = None  # the run's directory; default beside the command's output
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


def run_two_passes(settings: Any, directory: Path, *, make_judge: Callable[[], LLMJudge],
                   first: Callable[[LLMJudge], object], second: Callable[[LLMJudge], T], batch: BatchOptions,
                   budget_usd: float | None, tokens: Callable[[BatchRequest], tuple[int, int]],
                   stream: IO[str]) -> tuple[T | None, BatchReport]:
    """``first`` with a recording judge, the batches, then ``second`` with an answering one (``None``: still open).

    ``make_judge`` builds the judge of ``settings``, whose provider's batch API runs the batches. ``first``
    raises ``KeyboardInterrupt`` when it was stopped before it recorded everything (a partial record is never
    submitted). ``tokens`` estimates one request's prompt and completion tokens for the budget.

    Raises:
        ConfigurationError: the judge has no batch API, the budget is below the batch's estimate, or the
            directory belongs to another judge.
        BatchApiError: a batch API call failed (what was submitted is on disk; run again to resume).
    """
    judge_model = settings.judge
    key = settings.judge_api_key.get_secret_value() if settings.judge_api_key else None
    provider = provider_for(judge_model, settings.judge_api_base, key, batch.azure_deployment)
    vendor, _, name = judge_model.partition("/")
    report = BatchReport(provider=provider.name)
    session = BatchSession(directory, provider, judge_model)
    report.directory, report.resumed = str(directory), session.resumed

    stream.write("batch: recording the judge's calls (first pass over the inputs, no model called)\n")
    stream.flush()
    recorder = make_judge()
    recorder.use_transport(RecordingTransport(session.start_recording()))
    try:
        first(recorder)
    finally:
        session.finish_recording()
    log = session.log
    assert log is not None
    report.requests, report.merged = len(log.ids), log.repeats
    stream.write(f"batch: {report.requests} requests recorded ({report.merged} identical calls merged)\n")
    stream.flush()

    price = batch_price_of(vendor, name)
    session.recover(stream)
    pending = list(session.pending(retry_failed=batch.retry_failed))
    report.estimated_usd = session.estimate(pending, price, tokens)
    if pending and budget_usd is not None:
        if report.estimated_usd is None:
            raise ConfigurationError(f"--budget-usd: litellm's table has no batch price for {judge_model}")
        if report.estimated_usd > budget_usd:
            raise ConfigurationError(
                f"--budget-usd {budget_usd:g}: the {len(pending)} requests to submit are estimated at "
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

    answerer = make_judge()
    standard: Price | None = price_of(vendor, name)
    answering = AnsweringTransport(session.results(), price, SyncCaller(provider, standard))
    answerer.use_transport(answering)
    result = second(answerer)
    report.answered = answering.answered
    report.batch_usd = answering.batch_cost_usd
    report.batch_prompt_tokens = answering.batch_prompt_tokens
    report.batch_completion_tokens = answering.batch_completion_tokens
    report.corrective_calls = answering.corrective_calls
    report.corrective_usd = answering.corrective_cost_usd
    if standard is not None:
        report.standard_usd = standard.cost(Usage(1, answering.batch_prompt_tokens, answering.batch_completion_tokens))
    return result, report


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
