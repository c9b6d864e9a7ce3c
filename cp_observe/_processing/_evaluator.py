"""The evaluator: a bounded queue feeding one daemon thread that runs an asyncio loop of judge calls.

``submit`` is what ``on_end`` calls: an append to a deque, and a wake-up of the loop only when it is not
already awake. It never waits, and it takes no lock that it could wait on: ``on_end`` runs wherever a span
ends, and a span ends inside the garbage collector when it collects an abandoned decorated generator, on
whatever thread, at whatever line, possibly inside one of our own locked blocks. So the queue bound is a
deque of tokens (reserve, then check), a refusal is counted in a ``Tally``, and the thread (after a fork,
on the next submit) is started under a lock that submit only tries. The metrics of a refused target and
the release of its held span are done by the evaluator thread on its next tick, never on the caller's.
Everything else happens on the thread named ``cp-observe-evaluator``: turn assembly, the rate cap, the
budget, the circuit breaker, at most ``concurrency`` judge calls at once (each made by ``_judgement.call_judge``,
with instrumentation suppressed, so the judge's own HTTP calls are not traced or scored), and emission.

Accounting: each target is counted sampled exactly once and ends in exactly one of scored, failed,
dropped or skipped, so ``sampled == scored + failed + dropped + skipped`` once nothing is pending.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from cp_observe import _names as n
from cp_observe._capture._conventions import reranker_model_of, top_k_of
from cp_observe._config._sampling import sample_key
from cp_observe._config._settings import Settings
from cp_observe._emission._emit import Emitter, Target
from cp_observe._log import logger
from cp_observe._processing._accounting import Accounting
from cp_observe._processing._assembly import Assembler, Fold, Item, Ready, Skip
from cp_observe._processing._cascade import Cascade
from cp_observe._processing._gates import CircuitBreaker, Gates
from cp_observe._processing._judgement import call_judge
from cp_observe._processing._resolver import DocumentResolver
from cp_observe._tally import Tally
from cp_observe._types import Judge, ScoreResult

__all__ = ["Evaluator"]

_TICK_S = 0.1
_WAKE_BATCH = 64  # at least this many queued before submit wakes the loop early
_SIGNAL_BOUND_FACTOR = 4


class Evaluator:
    """Owns the queue, the thread, its loop and the accounting."""

    def __init__(
        self,
        *,
        judge: Judge,
        emitter: Emitter,
        options: Settings,
        on_finished: Callable[[Item, ScoreResult | None], None] | None = None,
        on_tick: Callable[[], None] | None = None,
        cascade: Cascade | None = None,
        resolver: DocumentResolver | None = None,
        received: bool = False,
    ) -> None:
        self.received = received
        self.judge = judge
        self.cascade = cascade
        self.resolver = resolver
        self._said_no_text = False  # the missing-text remedy is logged once (evaluator thread only)
        self.on_finished = on_finished
        self.on_tick = on_tick
        self.emitter = emitter
        # Of the options it reads queue_size, concurrency, turn_timeout_s, max_pending_traces, max_judged_contexts,
        # evaluation_timeout_s, and the gates' (_gates.Gates).
        self.options = options
        self.queue_size = options.queue_size
        self.concurrency = options.concurrency
        self.gates = Gates(options)
        self._wake_at = max(_WAKE_BATCH, self.queue_size // 2)
        self._reset()

    @property
    def circuit(self) -> CircuitBreaker:
        """The circuit breaker before the judge."""
        return self.gates.circuit

    def _reset(self) -> None:
        """Fresh state: at construction and in a forked child (the parent's thread does not exist there)."""
        self._queue: deque[Item] = deque()
        # One token per target queued or being admitted: submit appends one, then checks the bound and takes
        # one back when over it; the evaluator thread takes one per target it moves out of the queue. The tokens
        # are alike, so taking "one" back is exact whichever one it is, and no lock is needed (a finalizer may
        # be the one submitting). Admission never exceeds the bound; racing submitters may refuse early.
        self._tokens: deque[None] = deque()
        self._thread_lock = threading.Lock()  # serialises starting the thread; submit only tries it
        self.accounting = Accounting()
        segments = self.emitter.segments
        self._assembler = Assembler(turn_timeout_s=self.options.turn_timeout_s,
                                    max_pending_traces=self.options.max_pending_traces,
                                    segment_attributes=tuple(a for a, _ in segments.labels) if segments else (),
                                    received=self.received)
        self._assembler.on_split = self.emitter.count_split
        self._ready: deque[Ready] = deque()
        self._inflight: set[asyncio.Task[None]] = set()
        self._load = 0  # written by the evaluator thread only: targets assembled, ready or running
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._wake_pending = False
        self._started = threading.Event()
        self._closed = False
        self._idle_waiters: list[concurrent.futures.Future[None]] = []
        # Refused targets, accounted in stats at once; their metrics (by labels) and, in hold mode, the release
        # of their held spans wait for the evaluator thread. Both bounded: the keys by the data sources and
        # agents, the items by the held-span bound (only held spans' items are kept).
        self._refused: Tally[tuple[str, str, str, str, str]] = Tally()  # (name, kind, sampling, reason, stage)
        self._refused_items: deque[Item] = deque()

    def after_fork(self) -> None:
        """Called in a forked child: start over with an empty queue and no thread (started on the next submit)."""
        self._reset()
        if self.resolver is not None:
            self.resolver.after_fork()

    @property
    def split_traces(self) -> int:
        """Traces whose spans arrived more than turn_timeout_s apart (after their retrievals were released)."""
        return self._assembler.split_traces

    def start(self) -> None:
        """Start the evaluator thread now (at creation), so no request ever waits for it."""
        self._start_thread()

    # --- producer side (any thread; on_end) ----------------------------------------------------------------
    def depth(self) -> int:
        """Targets queued, waiting for an answer, ready or being judged."""
        return len(self._tokens) + self._load

    def submit(self, item: Item) -> bool:
        """Queue an ended span; False (and counted dropped, for a target) when the queue is full or closed.

        Targets count against ``queue_size``. An agent's answer or a root's end is tiny and is what releases
        the retrievals waiting for it, so it is taken even when targets are refused (up to a hard bound):
        refusing it would leave those retrievals holding every slot until their turn timeout.
        """
        queued = len(self._queue)
        if item.target:
            tokens = self._tokens
            tokens.append(None)  # reserve a place, then check: every admitted target saw itself counted
            if self._closed or len(tokens) + self._load > self.queue_size:
                tokens.pop()
                self._refuse(item, "shutdown" if self._closed else "queue_full")
                return False
            self._queue.append(item)
        elif self._closed or queued >= _SIGNAL_BOUND_FACTOR * self.queue_size:
            return False
        else:
            self._queue.append(item)
        if self._thread is None:
            self._start_thread()
        # The loop wakes by itself every _TICK_S and drains everything; an explicit wake-up is a syscall (and a
        # GIL hand-off) on the request path, and waking mid-burst makes the evaluator's work compete with the
        # burst for the GIL, so it is sent only when the queue is half full (then a tick could come too late).
        if queued + 1 >= self._wake_at and not self._wake_pending and self._loop is not None:
            self._wake_pending = True
            try:
                self._loop.call_soon_threadsafe(self._set_wake)
            except RuntimeError:  # the loop closed between the check and the call
                self._wake_pending = False
        return True

    def _refuse(self, item: Item, reason: str) -> None:
        """Count a refused target on the caller's thread in O(1): no metric update, no export, no I/O, no wait."""
        self.accounting.refused(reason)
        self._refused.add((item.name, item.kind, item.sampling_reason, reason, item.stage))
        if self.on_finished is not None:
            item.outcome = f"{n.OUTCOME_DROPPED}:{reason}"  # one slot store: no lock
            self._refused_items.append(item)  # released by the evaluator thread (or by shutdown)

    def _emit_refused(self) -> None:
        """On the evaluator thread (or at shutdown): the metrics and releases that ``_refuse`` deferred."""
        refused = self._refused.drain()
        for (name, kind, _, reason, stage), count in refused.items():
            # What Emitter.labels(_target(item, ...)) gives: an agent target is labelled with its own name. No
            # segment labels: a target refused at the queue was never read past its name (on_end stays O(1)).
            labels = {n.GEN_AI_DATA_SOURCE_ID: name, n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME, n.STAGE: stage}
            if kind != "retriever":
                labels[n.GEN_AI_AGENT_NAME] = name
            try:
                for _ in range(count):
                    self.emitter.count_sampled(labels)
                    self.emitter.count(n.OUTCOME_DROPPED, reason, labels)
            except Exception as exc:  # noqa: BLE001 - a failing meter must not stop the evaluator
                logger.warning("counting refused targets failed", error_type=type(exc).__name__)
        while self._refused_items:
            self._finished(self._refused_items.popleft(), None)

    def drop(self, item: Item, reason: str) -> None:
        """Count a target sampled and dropped without queueing it (``serve``'s recovery: ``expired``)."""
        if item.target:
            self._drop(item, reason)

    def _segments(self, item: Item) -> tuple[tuple[str, str], ...]:
        """The item's segment labels, resolved once (so an overflow is counted once per target)."""
        values = self.emitter.segments
        if values is None:
            return ()
        if item.segments is None:
            item.segments = values.resolve(item.attributes, item.enclosing, item.reranked)
        return item.segments

    def _drop(self, item: Item, reason: str) -> None:
        target = _target(item, "", item.sampling_reason, segments=self._segments(item))
        self.accounting.outcome(n.OUTCOME_DROPPED, reason, sampled=True)
        self.emitter.count_sampled(Emitter.base_labels(target))  # the sampled counter has no segment labels
        self.emitter.count(n.OUTCOME_DROPPED, reason, Emitter.labels(target))
        item.outcome = f"{n.OUTCOME_DROPPED}:{reason}"
        self._finished(item, None)

    def _finished(self, item: Item, result: ScoreResult | None) -> None:
        if self.on_finished is not None:
            try:
                self.on_finished(item, result)
            except Exception as exc:  # noqa: BLE001 - a failing export must not stop the accounting
                logger.warning("releasing a held span failed", error_type=type(exc).__name__)

    def _start_thread(self) -> None:
        # Only tried: a submit from a finalizer may land while this very thread is starting the thread (the
        # next submit starts it then, if the holder did not).
        if not self._thread_lock.acquire(blocking=False):
            return
        try:
            if self._thread is not None or self._closed:
                return
            thread = threading.Thread(target=self._run_thread, name="cp-observe-evaluator", daemon=True)
            thread.start()
            self._thread = thread
        finally:
            self._thread_lock.release()
        # No wait for the thread to be running: the loop wakes on its own every _TICK_S and drains the queue.

    # --- flush and shutdown (any thread) ----------------------------------------------------------------------
    def flush(self, timeout_s: float) -> bool:
        """Judge everything queued or waiting (waiting retrievals against their queries); True if done in time."""
        if self._thread is not None and self._loop is None:
            self._started.wait(max(0.0, timeout_s))  # created a moment ago: its loop is being set up
        loop = self._loop
        if loop is None or self._thread is None:
            self._emit_refused()
            return True
        waiter: concurrent.futures.Future[None] = concurrent.futures.Future()
        try:
            loop.call_soon_threadsafe(self._flush_now, waiter)
        except RuntimeError:
            return True
        try:
            waiter.result(timeout=max(0.0, timeout_s))
        except concurrent.futures.TimeoutError:
            return False
        return True

    def shutdown(self, timeout_s: float) -> None:
        """Stop taking work, drain within ``timeout_s``, count what could not finish as dropped (shutdown)."""
        self._closed = True  # one bool, written once: submit reads it without a lock
        deadline = time.monotonic() + timeout_s
        self.flush(timeout_s)
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            done: concurrent.futures.Future[None] = concurrent.futures.Future()
            try:
                loop.call_soon_threadsafe(self._stop_now, done)
                done.result(timeout=max(0.1, deadline - time.monotonic()))
            except (RuntimeError, concurrent.futures.TimeoutError):
                pass
            thread.join(max(0.1, deadline - time.monotonic()))
        if self.resolver is not None:
            self.resolver.shutdown()  # its threads end; a call still running is not waited for
        # Whatever the thread did not take is counted here (the thread has stopped or is abandoned).
        self._emit_refused()
        while self._queue:
            item = self._queue.popleft()
            if item.target:
                self._tokens.popleft()
                self._drop(item, "shutdown")

    # --- the evaluator thread ------------------------------------------------------------------------------
    def _run_thread(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._wake = asyncio.Event()
        self._started.set()
        try:
            loop.run_until_complete(self._main())
        except Exception as exc:  # noqa: BLE001 - never let the thread die loudly into the host's stderr
            logger.error("cp-observe evaluator stopped", error_type=type(exc).__name__)
        finally:
            _close_loop(loop)

    def _set_wake(self) -> None:
        self._wake_pending = False
        if self._wake is not None:
            self._wake.set()

    async def _main(self) -> None:
        assert self._wake is not None
        self._running = True
        while self._running:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=_TICK_S)
            self._wake.clear()
            self._step()
        if self._inflight:
            # Let cancelled judgements run their handlers so each is counted exactly once.
            await asyncio.gather(*self._inflight, return_exceptions=True)

    def _step(self, *, flush: bool = False) -> None:
        if self._refused or self._refused_items:
            self._emit_refused()
        now = time.monotonic()
        outcomes: list[Ready | Skip | Fold] = []
        while self._queue:
            item = self._queue[0]
            if item.target:
                self._load += 1  # counted before its token goes, so depth() and the bound never read low
                self._tokens.popleft()
            self._queue.popleft()
            added = self._assembler.add(item, now)  # may find the span is not a retrieval of its own (counts)
            if item.target and item.counts:
                self.accounting.sampled()
                self.gates.saw(sample_key(item.attributes, item.kind == "retriever"), item.sampling_reason)
                self.emitter.count_sampled(Emitter.labels(_target(item, "", item.sampling_reason)))
            outcomes.extend(added)
        outcomes.extend(self._assembler.flush() if flush else self._assembler.expire(now))
        self.gates.tick()  # the pacing window's boundary: new sample rates, a new burst allowance
        if self.on_tick is not None:
            try:
                self.on_tick()
            except Exception as exc:  # noqa: BLE001 - see _finished
                logger.warning("expiring held spans failed", error_type=type(exc).__name__)
        for outcome in outcomes:
            if isinstance(outcome, Skip):
                self._finish_skip(outcome.item, outcome.reason)
            elif isinstance(outcome, Fold):
                self._finished(outcome.item, None)  # judged (and counted) under another span, or not at all
            else:
                self._ready.append(outcome)
        while self._ready and len(self._inflight) < self.concurrency:
            task = asyncio.get_running_loop().create_task(self._evaluate(self._ready.popleft()))
            self._inflight.add(task)
            task.add_done_callback(self._task_done)
        self._load = self._assembler.pending + len(self._ready) + len(self._inflight)
        self._notify_idle()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._step()

    def _flush_now(self, waiter: concurrent.futures.Future[None]) -> None:
        self._idle_waiters.append(waiter)
        self._step(flush=True)

    def _notify_idle(self) -> None:
        busy = self._queue or self._ready or self._inflight or self._assembler.pending
        if self._idle_waiters and not busy:
            for waiter in self._idle_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._idle_waiters.clear()

    def _stop_now(self, done: concurrent.futures.Future[None]) -> None:
        for task in list(self._inflight):
            task.cancel()
        for ready in self._ready:
            self._finish_drop(ready.item, "shutdown")
        self._ready.clear()
        for outcome in self._assembler.flush():
            if not isinstance(outcome, Fold):
                self._finish_drop(outcome.item, "shutdown")
        self._running = False
        if self._wake is not None:
            self._wake.set()
        done.set_result(None)

    def _finish_drop(self, item: Item, reason: str) -> None:
        labels = Emitter.labels(_target(item, "", item.sampling_reason, segments=self._segments(item)))
        self.accounting.outcome(n.OUTCOME_DROPPED, reason)
        self.emitter.count(n.OUTCOME_DROPPED, reason, labels)
        item.outcome = f"{n.OUTCOME_DROPPED}:{reason}"
        self._finished(item, None)

    def _finish_skip(self, item: Item, reason: str) -> None:
        labels = Emitter.labels(_target(item, "", item.sampling_reason, segments=self._segments(item)))
        self.accounting.outcome(n.OUTCOME_SKIPPED, reason)
        self.emitter.count(n.OUTCOME_SKIPPED, reason, labels)
        item.outcome = f"{n.OUTCOME_SKIPPED}:{reason}"
        self._finished(item, None)

    async def _evaluate(self, ready: Ready) -> None:
        item = ready.item
        target = _target(item, ready.reference, item.sampling_reason, ready.agent_name,
                         segments=self._segments(item))
        user_error = item.attributes.get(n.CP_USER_ERROR) if item.attributes else None
        if isinstance(user_error, str) and user_error:  # a callback the user gave raised: nothing sound to judge
            self._finish_skip(item, user_error[:64])
            return
        contexts = item.contexts()
        if contexts is None:
            contexts = await self._resolved(item, target.data_source)
            if contexts is None:
                return  # skipped, and counted, by _resolved
        target.returned = _returned(item, contexts)
        options = self.options
        try:
            outcome = await call_judge(ready, contexts, llm=self.judge, cascade=self.cascade, gates=self.gates,
                                  rerank=target.stage == n.STAGE_RERANK, limit=options.max_judged_contexts,
                                  timeout_s=options.evaluation_timeout_s)
        except asyncio.CancelledError:
            self._finish_drop(item, "shutdown")
            raise
        if outcome.kind == n.OUTCOME_SKIPPED:
            self._finish_skip(item, outcome.reason)
            return
        self.accounting.outcome(outcome.kind, outcome.reason)
        if outcome.result is None:
            error = outcome.error
            logger.info("evaluation failed", reason=outcome.reason, error_type=type(error).__name__,
                        data_source=target.data_source)
            self._emit_safely(self.emitter.failed, target, error, outcome.reason, start_ns=outcome.start_ns,
                              end_ns=outcome.end_ns, model=outcome.model,
                              **({"cheap": True} if outcome.cheap else {}))
        else:
            self._emit_safely(self.emitter.scored, target, outcome.result, start_ns=outcome.start_ns,
                              end_ns=outcome.end_ns, model=outcome.model,
                              **({"cascade": outcome.cascade} if outcome.cascade is not None else {}))
        item.outcome = outcome.kind
        self._finished(item, outcome.result)

    async def _resolved(self, item: Item, data_source: str) -> list[str] | None:
        """The text of documents named by id only, through the resolver; ``None`` once the item is skipped."""
        ids = item.document_ids()
        if ids is None:
            self._finish_skip(item, "no_content")
            return None
        if self.resolver is None or any(i is None for i in ids):
            if not self._said_no_text:
                self._said_no_text = True
                logger.warning(
                    "retrievals carry documents without text, so the judge has nothing to read; they are skipped "
                    "as no_document_text. Record the text (OpenInference retrieval.documents.{i}.document.content, "
                    "or cp-observe's decorators), or give a document_resolver: a callable "
                    "(document_id, data_source) -> text, or module:function for serve and replay",
                    data_source=data_source, resolver=self.resolver is not None)
            self._finish_skip(item, n.SKIP_NO_DOCUMENT_TEXT)
            return None
        resolved = await self.resolver.texts([i for i in ids if i is not None], data_source)
        if isinstance(resolved, str):
            self._finish_skip(item, resolved)
            return None
        return resolved

    @staticmethod
    def _emit_safely(emit: Any, *args: Any, **kwargs: Any) -> None:
        try:
            emit(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - an exporter or meter failing must not kill the evaluator
            logger.warning("emitting an evaluation failed", error_type=type(exc).__name__)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Close the loop as ``asyncio.run`` does: cancel what is left (litellm leaves a logging worker), then close."""
    try:
        pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    except Exception as exc:  # noqa: BLE001 - closing must not fail the thread's exit
        logger.debug("closing the evaluator loop", error_type=type(exc).__name__)
    finally:
        loop.close()


def _target(item: Item, reference: str, sampling_reason: str, agent_name: str | None = None, *,
            segments: tuple[tuple[str, str], ...] = ()) -> Target:
    name = item.name
    return Target(
        span_context=item.span_context,
        data_source=name,
        agent_name=agent_name if item.kind == "retriever" else name,
        reference=reference,
        sampling_reason=sampling_reason,
        attributes=item.attributes,
        segments=segments,
        stage=item.stage,
        top_k=top_k_of(item.attributes) if item.kind == "retriever" and item.attributes else None,
        reranker_model=reranker_model_of(item.attributes) if item.attributes else None,
    )


def _returned(item: Item, contexts: Sequence[str]) -> int:
    """How many documents the retrieval returned: the decorator's count (it may keep fewer), else those read."""
    counted = item.attributes.get(n.CP_CONTEXT_COUNT) if item.attributes else None
    return counted if isinstance(counted, int) and not isinstance(counted, bool) else len(contexts)
