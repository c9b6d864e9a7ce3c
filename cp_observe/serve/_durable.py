"""The durable store of ``cp-observe serve``: what it answered 200 for stays on disk until its outcome is counted.

SQLite from the standard library, in WAL mode with ``synchronous=FULL`` (each commit is fsynced), in
``data_dir/intake.sqlite3``. Three tables, each keyed by (trace id, span id):

- ``spans``: the sampled spans the processor takes (targets, and the answer and root spans their turn assembly
  needs), each as a one-span OTLP ``ExportTraceServiceRequest`` (resource, scope and span; the parent's
  ``is_remote`` written into the span's flags), so ``_convert`` turns it back into the same ``ReadableSpan``.
- ``outbox``: an evaluation span about to be exported, stored before the export so a crash after it does not
  judge its target again: the next start re-exports the same span (same span id) instead.
- ``done``: tombstones of targets whose outcome was counted, written in the same transaction that removes them,
  kept ``max_age_s``: a redelivered span (the sender retrying a request a crash left unanswered) is not fed again.

One writer thread (``cp-observe-durable``) owns the connection and batches whatever is queued (request threads'
rows, the export thread's outbox, the evaluator's removals) into one transaction and one fsync: a group
commit. A request thread waits for its batch, bounded by ``COMMIT_WAIT_S``. Producers only append to a deque
and set an event (the evaluator thread's ``on_finished`` may block briefly, never on a lock this store holds
while waiting for it). The in-memory index (keys, bytes, ages, tombstones) is guarded by ``_lock``, taken by
request threads, the export thread and the writer, never on a path a finalizer can reach.

Bounds: ``claim`` refuses a request (the service answers 429) when the stored bytes would pass ``max_bytes``
(``store_full``) or the oldest stored target is older than ``max_age_s`` (``store_age``). Non-target spans
leave with their trace's last target, or ``linger_s`` after they arrived when their trace has no target left.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cp_observe._errors import ConfigurationError
from cp_observe._log import logger

__all__ = ["COMMIT_WAIT_S", "DurableStore", "Key", "Row", "default_data_dir"]

Key = tuple[int, int]  # (trace id, span id)
COMMIT_WAIT_S = 10.0  # the longest a request waits for its group commit before it is refused (store_error)
_SWEEP_S = 1.0
_ROW_OVERHEAD = 64  # bytes counted per row beside its body (keys, columns, page slack)
_FILE = "intake.sqlite3"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS spans (trace_id BLOB NOT NULL, span_id BLOB NOT NULL, target INTEGER NOT NULL,"
    " end_ns INTEGER NOT NULL, added REAL NOT NULL, body BLOB NOT NULL, PRIMARY KEY (trace_id, span_id))"
    " WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS outbox (trace_id BLOB NOT NULL, span_id BLOB NOT NULL, body BLOB NOT NULL,"
    " PRIMARY KEY (trace_id, span_id)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS done (trace_id BLOB NOT NULL, span_id BLOB NOT NULL, at REAL NOT NULL,"
    " PRIMARY KEY (trace_id, span_id)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS done_at ON done (at)",
)


def default_data_dir() -> Path:
    """``$XDG_STATE_HOME/cp-observe``, else ``~/.local/state/cp-observe`` (the XDG default for state)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "cp-observe"


@dataclass(frozen=True, slots=True)
class Row:
    """One span to keep: its key, whether it is a target, its end time and its one-span OTLP request."""

    key: Key
    target: bool
    end_ns: int
    body: bytes
    added: float = 0.0  # wall-clock seconds; set when loaded at start

    @property
    def size(self) -> int:
        """What the row counts against ``max_bytes``."""
        return len(self.body) + _ROW_OVERHEAD


@dataclass(slots=True)
class _Trace:
    targets: int = 0
    others: list[Key] = field(default_factory=list)


class _Ticket:
    """One batch's commit, awaited by one request thread; a waiter that gives up abandons it."""

    __slots__ = ("_abandoned", "_done", "_lock", "ok", "rows")

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = rows
        self.ok = False
        self._abandoned = False
        self._lock = threading.Lock()  # guards ok, _abandoned against the writer's settle
        self._done = threading.Event()

    def settle(self, ok: bool) -> bool:
        """Writer: the batch committed (or failed). Returns False when the waiter had given up."""
        with self._lock:
            self.ok = ok
            self._done.set()
            return not self._abandoned

    def wait(self, timeout_s: float) -> bool:
        """Request thread: True once committed; False on failure or timeout (then abandoned)."""
        if not self._done.wait(timeout_s):
            with self._lock:
                if not self._done.is_set():
                    self._abandoned = True
                    return False
        return self.ok


def _blob(key: Key) -> tuple[bytes, bytes]:
    return key[0].to_bytes(16, "big"), key[1].to_bytes(8, "big")


def _key(trace_id: bytes, span_id: bytes) -> Key:
    return int.from_bytes(trace_id, "big"), int.from_bytes(span_id, "big")


class DurableStore:
    """The store: open (or create) it in ``directory``; ``close()`` commits what is queued and stops the writer.

    Raises:
        ConfigurationError: the directory cannot be created or written, or the database cannot be opened.
    """

    def __init__(self, directory: str | os.PathLike[str], *, max_bytes: int, max_age_s: float,
                 linger_s: float) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.linger_s = linger_s
        self._conn = _open(self.directory)
        self._lock = threading.Lock()  # guards the index below; never taken where a finalizer can run
        self._rows: dict[Key, tuple[bool, int, float]] = {}  # key -> (target, size, added)
        self._traces: dict[int, _Trace] = {}
        self._target_added: dict[Key, float] = {}  # insertion-ordered: the oldest target first
        self._others: dict[Key, float] = {}  # non-target rows, insertion-ordered, for the sweep
        self._done: dict[Key, float] = {}  # tombstones, insertion-ordered
        self._bytes = 0
        self._ops: deque[tuple[str, Any]] = deque()  # appended by any producer, taken by the writer
        self._wake = threading.Event()
        self._stopping = False
        self.recovered_rows, self.recovered_outbox = self._load()
        self._thread = threading.Thread(target=self._run, name="cp-observe-durable", daemon=True)
        self._thread.start()

    # --- start-up ----------------------------------------------------------------------------------------------
    def _load(self) -> tuple[list[Row], list[tuple[Key, bytes]]]:
        now = time.time()
        self._conn.execute("DELETE FROM done WHERE at < ?", (now - self.max_age_s,))
        self._conn.commit()
        for trace_id, span_id, at in self._conn.execute("SELECT trace_id, span_id, at FROM done ORDER BY at"):
            self._done[_key(trace_id, span_id)] = at
        rows = [
            Row(_key(t, s), bool(target), end_ns, bytes(body), added)
            for t, s, target, end_ns, added, body in self._conn.execute(
                "SELECT trace_id, span_id, target, end_ns, added, body FROM spans ORDER BY end_ns")
        ]
        for row in sorted(rows, key=lambda r: r.added):
            self._index(row, row.added)
        outbox = [(_key(t, s), bytes(body)) for t, s, body in self._conn.execute(
            "SELECT trace_id, span_id, body FROM outbox")]
        return rows, outbox

    # --- request threads ---------------------------------------------------------------------------------------
    def known(self, key: Key) -> bool:
        """Stored, or its outcome already counted (a tombstone): not to be fed again."""
        return key in self._rows or key in self._done  # dict reads: no lock needed

    def claim(self, rows: Sequence[Row]) -> tuple[str, list[Row]]:
        """Reserve ``rows`` in the index: ``(refusal reason, "")`` past a bound, else ``("", rows not yet known)``."""
        now = time.time()
        with self._lock:
            oldest = next(iter(self._target_added.values()), None)
            if oldest is not None and now - oldest > self.max_age_s:
                return "store_age", []
            fresh = [row for row in rows if row.key not in self._rows and row.key not in self._done]
            if self._bytes + sum(row.size for row in fresh) > self.max_bytes and fresh:
                return "store_full", []
            for row in fresh:
                self._index(row, now)
        return "", fresh

    def write(self, rows: Sequence[Row], timeout_s: float = COMMIT_WAIT_S) -> bool:
        """Commit claimed ``rows`` with whatever else is queued; True once fsynced. On False they are forgotten."""
        if not rows:
            return True
        ticket = _Ticket(rows)
        self._submit(("put", ticket))
        return ticket.wait(timeout_s)

    # --- the export thread -------------------------------------------------------------------------------------
    def outbox(self, entries: Sequence[tuple[Key, bytes]], timeout_s: float = COMMIT_WAIT_S) -> bool:
        """Commit evaluation spans about to be exported (``(target key, one-span request)``); True once fsynced."""
        ticket = _Ticket(())
        self._submit(("outbox", (entries, ticket)))
        return ticket.wait(timeout_s)

    # --- the evaluator thread and the export thread: append and wake, never wait ------------------------------
    def remove(self, keys: Iterable[Key]) -> None:
        """The targets' outcomes are counted (and their evaluations exported): remove them, leave tombstones."""
        self._submit(("remove", list(keys)))

    def _submit(self, op: tuple[str, Any]) -> None:
        self._ops.append(op)
        self._wake.set()

    # --- the index (under _lock) -------------------------------------------------------------------------------
    def _index(self, row: Row, added: float) -> None:
        self._rows[row.key] = (row.target, row.size, added)
        self._bytes += row.size
        trace = self._traces.setdefault(row.key[0], _Trace())
        if row.target:
            trace.targets += 1
            self._target_added[row.key] = added
        else:
            trace.others.append(row.key)
            self._others[row.key] = added

    def _unindex(self, key: Key) -> bool:
        """Forget one row; True when it was a target. Returns its trace's leftovers to delete when no target is left."""
        entry = self._rows.pop(key, None)
        if entry is None:
            return False
        target, size, _ = entry
        self._bytes -= size
        trace = self._traces.get(key[0])
        if target:
            self._target_added.pop(key, None)
            if trace is not None:
                trace.targets -= 1
        else:
            self._others.pop(key, None)
            if trace is not None and key in trace.others:
                trace.others.remove(key)
        if trace is not None and trace.targets <= 0 and not trace.others:
            del self._traces[key[0]]
        return target

    # --- the writer thread -------------------------------------------------------------------------------------
    def _run(self) -> None:
        next_sweep = time.monotonic() + _SWEEP_S
        while True:
            self._wake.wait(max(0.0, next_sweep - time.monotonic()))
            self._wake.clear()  # before taking: an op appended after this sets it again
            ops: list[tuple[str, Any]] = []
            while self._ops:
                ops.append(self._ops.popleft())
            if time.monotonic() >= next_sweep:
                ops.extend(self._sweep_ops())
                next_sweep = time.monotonic() + _SWEEP_S
            if ops:
                self._commit(ops)
            if self._stopping and not self._ops:
                return

    def _sweep_ops(self) -> list[tuple[str, Any]]:
        now = time.time()
        leftovers: list[Key] = []
        with self._lock:
            for key, added in self._others.items():
                if now - added < self.linger_s:
                    break
                trace = self._traces.get(key[0])
                if trace is None or trace.targets <= 0:
                    leftovers.append(key)
            expired = []
            for key, at in self._done.items():
                if now - at < self.max_age_s:
                    break
                expired.append(key)
            for key in expired:
                del self._done[key]
        ops: list[tuple[str, Any]] = [("forget", leftovers)] if leftovers else []
        return [*ops, ("prune", now - self.max_age_s)] if expired else ops

    def _commit(self, ops: list[tuple[str, Any]]) -> None:
        now = time.time()
        conn = self._conn
        removed: list[Key] = []
        forgotten: list[Key] = []
        tickets: list[_Ticket] = []
        try:
            conn.execute("BEGIN")
            for kind, arg in ops:
                if kind == "put":
                    tickets.append(arg)
                    conn.executemany("INSERT OR REPLACE INTO spans VALUES (?, ?, ?, ?, ?, ?)", [
                        (*_blob(row.key), int(row.target), row.end_ns, now, row.body) for row in arg.rows])
                elif kind == "outbox":
                    entries, ticket = arg
                    tickets.append(ticket)
                    conn.executemany("INSERT OR REPLACE INTO outbox VALUES (?, ?, ?)",
                                     [(*_blob(key), body) for key, body in entries])
                elif kind == "remove":
                    blobs = [_blob(key) for key in arg]
                    conn.executemany("DELETE FROM spans WHERE trace_id = ? AND span_id = ?", blobs)
                    conn.executemany("DELETE FROM outbox WHERE trace_id = ? AND span_id = ?", blobs)
                    conn.executemany("INSERT OR REPLACE INTO done VALUES (?, ?, ?)", [(*b, now) for b in blobs])
                    removed.extend(arg)
                elif kind == "forget":
                    conn.executemany("DELETE FROM spans WHERE trace_id = ? AND span_id = ?",
                                     [_blob(key) for key in arg])
                    forgotten.extend(arg)
                elif kind == "prune":
                    conn.execute("DELETE FROM done WHERE at < ?", (arg,))
            # A trace whose last target goes takes its answer and root spans with it.
            leftovers = self._leftovers(removed)
            conn.executemany("DELETE FROM spans WHERE trace_id = ? AND span_id = ?", [_blob(k) for k in leftovers])
            conn.execute("COMMIT")  # synchronous=FULL: the WAL is fsynced here
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            logger.warning("durable store: a commit failed", error_type=type(exc).__name__, detail=str(exc)[:200])
            with self._lock:
                for ticket in tickets:
                    for row in ticket.rows:
                        self._unindex(row.key)
            for ticket in tickets:
                ticket.settle(False)
            for kind, arg in ops:  # removals are retried with the next batch
                if kind in ("remove", "forget"):
                    self._ops.append((kind, arg))
            return
        with self._lock:
            for key in removed:
                self._unindex(key)
                self._done[key] = now
            for key in (*forgotten, *leftovers):
                self._unindex(key)
        for ticket in tickets:
            if not ticket.settle(True) and ticket.rows:
                # The request gave up waiting and was refused: the sender will retry, so these must not stay.
                self._submit(("forget", [row.key for row in ticket.rows]))

    def _leftovers(self, removed: Sequence[Key]) -> list[Key]:
        """Non-target rows of traces whose last stored target is among ``removed``."""
        if not removed:
            return []
        gone: dict[int, int] = {}
        with self._lock:
            for key in removed:
                entry = self._rows.get(key)
                if entry is not None and entry[0]:
                    gone[key[0]] = gone.get(key[0], 0) + 1
            out: list[Key] = []
            for trace_id, count in gone.items():
                trace = self._traces.get(trace_id)
                if trace is not None and trace.targets - count <= 0:
                    out.extend(trace.others)
        return out

    # --- introspection and shutdown -----------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Rows, targets, bytes, tombstones and the oldest target's age, for ``/stats``."""
        now = time.time()
        with self._lock:
            oldest = next(iter(self._target_added.values()), None)
            return {"rows": len(self._rows), "targets": len(self._target_added), "bytes": self._bytes,
                    "max_bytes": self.max_bytes, "tombstones": len(self._done),
                    "oldest_target_age_s": round(now - oldest, 3) if oldest is not None else 0.0}

    def close(self, timeout_s: float = 10.0) -> None:
        """Commit what is queued, stop the writer, close the database. Idempotent."""
        if self._stopping:
            return
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()


def _open(directory: Path) -> sqlite3.Connection:
    """Create the directory and the database; refuse clearly when either cannot be written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigurationError(
            f"the durable store's data_dir {str(directory)!r} is not writable ({exc.strerror or exc}); set "
            "--data-dir / CP_OBSERVE_DATA_DIR to a writable directory, or --no-durable to keep accepted "
            "spans in memory only") from None
    try:
        # The writer thread uses it after this thread opened it; nothing else does (check_same_thread off).
        conn = sqlite3.connect(directory / _FILE, isolation_level=None, check_same_thread=False)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"journal_mode is {mode}, not wal")
        conn.execute("PRAGMA synchronous=FULL")
        for statement in _SCHEMA:
            conn.execute(statement)
    except sqlite3.Error as exc:
        raise ConfigurationError(f"the durable store in {str(directory)!r} cannot be opened: {exc}") from None
    return conn
