"""The path of one assembled record: resolve documents, gates, judge, emit, account; one pass, one boundary.

``Path.run`` takes a record assembly completed and carries it down the stages in order, each in its own module:
the documents a retrieval names by id only resolved (``_resolver.py``), the gates (``_gates.py``) and the judge
call, plain, reranker or cascade (``_judgement.py``, ``_cascade.py``), the evaluation emitted
(``_emission/_emit.py``), and the target finished (``_accounting.Finish``). One error boundary surrounds the
stages: a failure of ours becomes the outcome ``failed/internal_error`` (logged, counted), never a lost target
or a dead evaluator. Runs on the evaluator thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from cp_observe import _names as n
from cp_observe._config._settings import Settings
from cp_observe._emission._emit import Emitter
from cp_observe._internal import report_internal_error
from cp_observe._log import logger
from cp_observe._processing._accounting import Finish, target_of
from cp_observe._processing._cascade import Cascade
from cp_observe._processing._gates import Gates
from cp_observe._processing._judgement import Outcome, call_judge
from cp_observe._processing._record import Record
from cp_observe._processing._resolver import DocumentResolver
from cp_observe._types import Judge

__all__ = ["Path"]

INTERNAL_ERROR = "internal_error"


class Path:
    """The stages after assembly, for one processor; ``run`` is called once per ready record."""

    def __init__(self, *, judge: Judge, cascade: Cascade | None, gates: Gates, resolver: DocumentResolver | None,
                 emitter: Emitter, options: Settings, finish: Finish) -> None:
        self.judge = judge
        self.cascade = cascade
        self.gates = gates
        self.resolver = resolver
        self.emitter = emitter
        self.options = options  # reads max_judged_contexts and evaluation_timeout_s
        self.finish = finish
        self._said_no_text = False  # the missing-text remedy is logged once

    async def run(self, record: Record) -> None:
        """Judge ``record``, emit its evaluation and finish it, exactly once whatever happens.

        Raises:
            asyncio.CancelledError: the evaluator is shutting down (the target is finished dropped first).
        """
        contexts: Sequence[str] = ()
        try:
            contexts, outcome = await self._judged(record)
        except asyncio.CancelledError:
            self.finish(record, n.OUTCOME_DROPPED, "shutdown")
            raise
        except Exception as exc:  # noqa: BLE001 - the one boundary: our failure is an outcome, not a lost target
            report_internal_error("evaluation", exc)
            outcome = Outcome(n.OUTCOME_FAILED, INTERNAL_ERROR)
        emitted = outcome.kind != n.OUTCOME_SKIPPED and outcome.reason != INTERNAL_ERROR
        if emitted:  # the emitter counts the outcome of what it emits
            self._emit(record, outcome, contexts)
        self.finish(record, outcome.kind, outcome.reason, outcome.result, emitted=emitted)

    async def _judged(self, record: Record) -> tuple[Sequence[str], Outcome]:
        """Resolve, gate and judge: the contexts judged and the outcome (skipped: no contexts)."""
        if record.user_error:  # a callback the user gave raised: nothing sound to judge
            return (), Outcome(n.OUTCOME_SKIPPED, record.user_error)
        contexts = record.contexts
        if contexts is None:
            resolved = await self._resolved(record)
            if isinstance(resolved, str):
                return (), Outcome(n.OUTCOME_SKIPPED, resolved)
            contexts = resolved
        options = self.options
        return contexts, await call_judge(record, contexts, llm=self.judge, cascade=self.cascade, gates=self.gates,
                                          limit=options.max_judged_contexts, timeout_s=options.evaluation_timeout_s)

    async def _resolved(self, record: Record) -> list[str] | str:
        """The text of documents named by id only, through the resolver; else the reason it is skipped."""
        ids = record.document_ids
        if ids is None:
            return "no_content"
        if self.resolver is None or any(i is None for i in ids):
            if not self._said_no_text:
                self._said_no_text = True
                logger.warning(
                    "retrievals carry documents without text, so the judge has nothing to read; they are skipped "
                    "as no_document_text. Record the text (OpenInference retrieval.documents.{i}.document.content, "
                    "or cp-observe's decorators), or give a document_resolver: a callable "
                    "(document_id, data_source) -> text, or module:function for serve and replay",
                    data_source=record.name, resolver=self.resolver is not None)
            return n.SKIP_NO_DOCUMENT_TEXT
        return await self.resolver.texts([i for i in ids if i is not None], record.name)

    def _emit(self, record: Record, outcome: Outcome, contexts: Sequence[str]) -> None:
        """Emit the evaluation (span, log record, metrics, sinks); a failing exporter is logged, never raised."""
        target = target_of(record)
        target.returned = record.returned if record.returned is not None else len(contexts)
        try:
            if outcome.result is None:
                error = outcome.error
                logger.info("evaluation failed", reason=outcome.reason, error_type=type(error).__name__,
                            data_source=target.data_source)
                self.emitter.failed(target, error, outcome.reason,  # type: ignore[arg-type]
                                    start_ns=outcome.start_ns, end_ns=outcome.end_ns, model=outcome.model,
                                    **({"cheap": True} if outcome.cheap else {}))
            else:
                self.emitter.scored(target, outcome.result, start_ns=outcome.start_ns, end_ns=outcome.end_ns,
                                    model=outcome.model,
                                    **({"cascade": outcome.cascade} if outcome.cascade is not None else {}))
        except Exception as exc:  # noqa: BLE001 - an exporter or meter failing must not kill the evaluator
            logger.warning("emitting an evaluation failed", error_type=type(exc).__name__)
