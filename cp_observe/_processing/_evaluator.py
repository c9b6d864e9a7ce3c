"""The evaluator: a bounded queue feeding one daemon thread that runs an asyncio loop of judge calls.

``submit`` is what ``on_end`` calls: an append to a deque, and a wake-up of the loop only when it is not
already awake. It never waits, and it takes no lock that it could wait on: ``on_end`` runs wherever a span
ends, and a span ends inside the garbage collector when it collects an abandoned decorated generator, on
whatever thread, at whatever line, possibly inside one of our own locked blocks. So the queue bound is a
deque of tokens (reserve, then check), a refusal is counted in a ``Tally``, and the thread (after a fork,
on the next submit) is started under a lock that submit only tries. A refused target keeps its ``Ended``
(references only) in a bounded deque: its name (the user's ``data_source`` callable), its metrics and the
release of its held span are done by the evaluator thread on its next tick, never on the caller's. Beyond
the bound a refusal is labelled from its span alone (no user code) and counted in ``refused_unnamed``.
Everything else happens on the thread named ``cp-observe-evaluator``, one pass per span: decoded once into a
``Record`` (``_record.py``), assembled (``_assembly.py``), then at most ``concurrency`` at once down the path
(``_path.py``: resolve, gates, judge, emit, account).

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
from collections.abc import Callable, Mapping
from typing import Any

from cp_observe import _names as n
from cp_observe._config._sampling import sample_key
from cp_observe._config._settings import Settings
from cp_observe._emission._emit import Emitter
from cp_observe._internal import report_internal_error
from cp_observe._log import logger
from cp_observe._processing._accounting import Accounting, Finish, Finished
from cp_observe._processing._assembly import Assembler, Fold, Skip
from cp_observe._processing._cascade import Cascade
from cp_observe._processing._gates import Gates
from cp_observe._processing._path import INTERNAL_ERROR, Path
from cp_observe._processing._record import Ended, Record, decode, name_of
from cp_observe._processing._resolver import DocumentResolver
from cp_observe._tally import Tally
from cp_observe._types import Judge

__all__ = ["Evaluator"]

_TICK_S = 0.1
_WAKE_BATCH = 64  # at least this many queued before submit wakes the loop early
_SIGNAL_BOUND_FACTOR = 4
_MIN_REFUSED_KEPT = 1024  # refused targets kept for naming per tick, at least (else _SIGNAL_BOUND_FACTOR x queue)


class Evaluator:
    """Owns the queue, the thread, its loop and the accounting."""

    def __init__(
        self,
        *,
        judge: Judge,
        emitter: Emitter,
        options: Settings,
        data_source: Callable[[Mapping[str, Any]], str | None] | None = None,
        on_finished: Finished | None = None,
        on_tick: Callable[[], None] | None = None,
        cascade: Cascade | None = None,
        resolver: DocumentResolver | None = None,
        received: bool = False,
    ) -> None:
        self.received = received
        self.resolver = resolver
        self.data_source = data_source  # the user's mapping: called on this evaluator's thread only
        self.finish = Finish(Accounting(), emitter, on_finished)  # on_finished: told of every finished target
        self.on_tick = on_tick
        self.emitter = emitter
        # Of the options it reads queue_size, concurrency, turn_timeout_s, max_pending_traces, and the path's and
        # the gates' (_path.Path, _gates.Gates).
        self.options = options
        self.queue_size = options.queue_size
        self.concurrency = options.concurrency
        self.gates = Gates(options)
        self._path = Path(judge=judge, cascade=cascade, gates=self.gates, resolver=resolver, emitter=emitter,
                          options=options, finish=self.finish)
        self._wake_at = max(_WAKE_BATCH, self.queue_size // 2)
        self._refused_bound = max(_MIN_REFUSED_KEPT, _SIGNAL_BOUND_FACTOR * self.queue_size)
        self._reset()

    def _reset(self) -> None:
        """Fresh state: at construction and in a forked child (the parent's thread does not exist there)."""
        self._queue: deque[Ended] = deque()
        # One token per target queued or being admitted: submit appends one, then checks the bound and takes
        # one back when over it; the evaluator thread takes one per target it moves out of the queue. The tokens
        # are alike, so taking "one" back is exact whichever one it is, and no lock is needed (a finalizer may
        # be the one submitting). Admission never exceeds the bound; racing submitters may refuse early.
        self._tokens: deque[None] = deque()
        self._thread_lock = threading.Lock()  # serialises starting the thread; submit only tries it
        self.accounting = self.finish.accounting = Accounting()
        segments = self.emitter.segments
        self.assembler = Assembler(turn_timeout_s=self.options.turn_timeout_s,
                                    max_pending_traces=self.options.max_pending_traces,
                                    segments=segments.resolve if segments else None,
                                    segment_attributes=tuple(a for a, _ in segments.labels) if segments else (),
                                    received=self.received)
        self.assembler.on_split = self.emitter.count_split
        self._ready: deque[Record] = deque()
        self._inflight: set[asyncio.Task[None]] = set()
        self._load = 0  # written by the evaluator thread only: targets assembled, ready or running
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._wake_pending = False
        self._started = threading.Event()
        self._closed = False
        self._idle_waiters: list[concurrent.futures.Future[None]] = []
        # Refused targets, accounted in stats at once; their naming, metrics and release wait for the evaluator
        # thread. Bounded (_refused_bound); beyond it a refusal is labelled from its span alone, in a Tally.
        self._refused: deque[tuple[Ended, str]] = deque()
        self._refused_unnamed: Tally[tuple[str, str, str, str]] = Tally()  # (name, kind, reason, stage)
        self.refused_unnamed = 0  # refusals beyond the bound, labelled without the data_source mapping

    def after_fork(self) -> None:
        """Called in a forked child: start over with an empty queue and no thread (started on the next submit)."""
        self._reset()
        if self.resolver is not None:
            self.resolver.after_fork()

    def start(self) -> None:
        """Start the evaluator thread now (at creation), so no request ever waits for it."""
        self._start_thread()

    # --- producer side (any thread; on_end) ----------------------------------------------------------------
    def depth(self) -> int:
        """Targets queued, waiting for an answer, ready or being judged."""
        return len(self._tokens) + self._load

    def submit(self, ended: Ended) -> bool:
        """Queue an ended span; False (and counted dropped, for a target) when the queue is full or closed.

        Targets count against ``queue_size``. An agent's answer or a root's end is tiny and is what releases
        the retrievals waiting for it, so it is taken even when targets are refused (up to a hard bound):
        refusing it would leave those retrievals holding every slot until their turn timeout.
        """
        queued = len(self._queue)
        if ended.target:
            tokens = self._tokens
            tokens.append(None)  # reserve a place, then check: every admitted target saw itself counted
            if self._closed or len(tokens) + self._load > self.queue_size:
                tokens.pop()
                self._refuse(ended, "shutdown" if self._closed else "queue_full")
                return False
            self._queue.append(ended)
        elif self._closed or queued >= _SIGNAL_BOUND_FACTOR * self.queue_size:
            return False
        else:
            self._queue.append(ended)
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

    def _refuse(self, ended: Ended, reason: str) -> None:
        """Count a refused target on the caller's thread in O(1): no user code, no metric, no export, no wait."""
        self.accounting.refused(reason)
        if len(self._refused) < self._refused_bound:  # named, counted and released by the evaluator thread
            self._refused.append((ended, reason))
            return
        name, _, stage = name_of(ended)  # beyond the bound: from the span alone, no user code
        self._refused_unnamed.add((name, ended.kind, reason, stage))

    def _emit_refused(self) -> None:
        """On the evaluator thread (or at shutdown): the naming, metrics and releases that ``_refuse`` deferred."""
        while self._refused:
            ended, reason = self._refused.popleft()
            try:
                self.finish(decode(ended, self.data_source), n.OUTCOME_DROPPED, reason, refused=True)
            except Exception as exc:  # noqa: BLE001 - already counted dropped; only its labels are lost
                report_internal_error("refused target", exc)
        unnamed = self._refused_unnamed.drain()
        for (name, kind, reason, stage), count in unnamed.items():
            self.refused_unnamed += count
            # Labelled as its decoded record would be, but for the data_source mapping; nothing to release.
            record = Record(kind, None, 0, 0, False, False, False, "", "", 0,  # type: ignore[arg-type]
                            {}, False, name, True, stage)
            for _ in range(count):
                self.finish(record, n.OUTCOME_DROPPED, reason, refused=True)
        if unnamed:
            logger.warning("refused targets beyond the bound were labelled without the data_source mapping",
                           count=sum(unnamed.values()), bound=self._refused_bound)

    def drop(self, ended: Ended, reason: str) -> None:
        """Count a target sampled and dropped without queueing it (``serve``'s recovery: ``expired``)."""
        if ended.target:
            record = self.assembler.complete(decode(ended, self.data_source))
            self.finish(record, n.OUTCOME_DROPPED, reason, sampled=True)

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
        # Whatever the thread did not take is counted here (the thread has stopped or is abandoned).
        self._emit_refused()
        while self._queue:
            ended = self._queue.popleft()
            if ended.target:
                self._tokens.popleft()
                self.drop(ended, "shutdown")

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
        if self._refused or self._refused_unnamed:
            self._emit_refused()
        now = time.monotonic()
        outcomes: list[Record | Skip | Fold] = []
        while self._queue:
            ended = self._queue[0]
            if ended.target:
                self._load += 1  # counted before its token goes, so depth() and the bound never read low
                self._tokens.popleft()
            self._queue.popleft()
            outcomes.extend(self._assembled(ended, now))
        outcomes.extend(self.assembler.flush() if flush else self.assembler.expire(now))
        self.gates.tick()  # the pacing window's boundary: new sample rates, a new burst allowance
        if self.on_tick is not None:
            try:
                self.on_tick()
            except Exception as exc:  # noqa: BLE001 - the hold failing must not stop the evaluator
                logger.warning("expiring held spans failed", error_type=type(exc).__name__)
        for outcome in outcomes:
            if isinstance(outcome, Skip):
                self.finish(outcome.record, n.OUTCOME_SKIPPED, outcome.reason)
            elif isinstance(outcome, Fold):
                self.finish(outcome.record, "")  # judged (and counted) under another span, or not at all
            else:
                self._ready.append(outcome)
        while self._ready and len(self._inflight) < self.concurrency:
            task = asyncio.get_running_loop().create_task(self._path.run(self._ready.popleft()))
            self._inflight.add(task)
            task.add_done_callback(self._task_done)
        self._load = self.assembler.pending + len(self._ready) + len(self._inflight)
        self._notify_idle()

    def _assembled(self, ended: Ended, now: float) -> list[Record | Skip | Fold]:
        """Decode one span and hand it to assembly; a target counted sampled when it is a retrieval of its own."""
        try:
            record = decode(ended, self.data_source)
            counts, out = self.assembler.add(record, now)
            if record.target and counts:
                self.finish.sampled(record)
                self.gates.saw(sample_key(record.attributes, record.kind == "retriever"), record.sampling_reason)
            return out
        except Exception as exc:  # noqa: BLE001 - one span failing to decode must not stop the evaluator
            report_internal_error("decode", exc)
            if ended.target:
                self.accounting.outcome(n.OUTCOME_FAILED, INTERNAL_ERROR, sampled=True)
            return []

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._step()

    def _flush_now(self, waiter: concurrent.futures.Future[None]) -> None:
        self._idle_waiters.append(waiter)
        self._step(flush=True)

    def _notify_idle(self) -> None:
        busy = self._queue or self._ready or self._inflight or self.assembler.pending
        if self._idle_waiters and not busy:
            for waiter in self._idle_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._idle_waiters.clear()

    def _stop_now(self, done: concurrent.futures.Future[None]) -> None:
        for task in list(self._inflight):
            task.cancel()
        for ready in self._ready:
            self.finish(ready, n.OUTCOME_DROPPED, "shutdown")
        self._ready.clear()
        for outcome in self.assembler.flush():
            if not isinstance(outcome, Fold):
                self.finish(outcome if isinstance(outcome, Record) else outcome.record, n.OUTCOME_DROPPED,
                             "shutdown")
        self._running = False
        if self._wake is not None:
            self._wake.set()
        done.set_result(None)


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
