"""One batch run on disk: its requests, the batches submitted, their results; submit, wait, resume.

Everything lives in one directory beside the command's output (``<output>.batch/`` by default):

- ``requests.jsonl``: the distinct requests of the first pass (rewritten by every run of the command);
- ``state.json``: provider, model and the submitted batches (id, state, whether its results are in), written
  (atomically) before each create, with the batch about to be created (its ``intent``: index, tag, size, time,
  uploaded file), and right after it, with its id;
- ``ids-<n>.txt``: the ``custom_id`` of every request of batch ``n``;
- ``results.jsonl``: every result fetched (answers and failures), appended once per ended batch;
- ``failed.jsonl``: the requests without an answer after the last wait, with why.

Run again, the same command finds ``state.json`` and submits only the requests no batch holds (with
``retry_failed``, the failed ones too), then waits for the batches still open.

A kill between a create and the write of its id would leave a batch the run does not know, paid for and then
submitted again. So a run that finds an ``intent`` first asks the provider for that batch (``recover``): by the
tag it carries (OpenAI and Azure metadata, the Gemini API's display name) or its uploaded file, and for Anthropic,
whose batches carry neither, by creation time and size, with a warning naming the batch taken. Found, it is
the run's batch; not found, the create never reached the provider and its requests are submitted as any
others. A listing that fails stops the run with nothing submitted.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from cp_observe._batch._api import BatchProvider, Intent, Result
from cp_observe._batch._requests import BatchRequest, RequestLog, read_requests, split
from cp_observe._errors import ConfigurationError
from cp_observe._judging._digest import content_digest
from cp_observe._judging._prices import Price
from cp_observe._types import Usage

__all__ = ["BatchSession", "Waited"]

_VERSION = 1


@dataclass
class Waited:
    """Where the batches stand after a wait."""

    complete: bool = False
    batches: int = 0
    requests: int = 0
    in_progress: int = 0
    done: int = 0
    failed: int = 0
    states: dict[str, int] = field(default_factory=dict)


class BatchSession:
    """The batches of one command's run, kept in ``directory``."""

    def __init__(self, directory: Path, provider: BatchProvider, model: str) -> None:
        self.directory = directory
        self.provider = provider
        self.model = model
        directory.mkdir(parents=True, exist_ok=True)
        self._state_path = directory / "state.json"
        self._state: dict[str, Any] = {"version": _VERSION, "provider": provider.name, "model": model,
                                       "run": secrets.token_hex(8), "batches": []}
        if self._state_path.exists():
            saved = orjson.loads(self._state_path.read_bytes())
            if saved.get("provider") != provider.name or saved.get("model") != model:
                raise ConfigurationError(
                    f"{directory} holds batches of {saved.get('provider')} {saved.get('model')}, not {provider.name} "
                    f"{model}: remove it or give another --batch-state")
            saved.setdefault("run", secrets.token_hex(8))  # a state written before batches were tagged
            self._state = saved
        self.log: RequestLog | None = None
        self.submitted_now = 0  # requests submitted by this run

    @property
    def resumed(self) -> bool:
        """Whether an earlier run had already submitted batches (or was stopped creating one)."""
        return bool(self._state["batches"]) or self._state.get("intent") is not None

    @property
    def requests_path(self) -> Path:
        return self.directory / "requests.jsonl"

    def start_recording(self) -> RequestLog:
        """The log the first pass records its calls into (emptied first)."""
        self.log = RequestLog(self.requests_path)
        return self.log

    def finish_recording(self) -> None:
        if self.log is not None:
            self.log.close()

    def _save(self) -> None:
        temporary = self._state_path.with_suffix(".tmp")
        temporary.write_bytes(orjson.dumps(self._state, option=orjson.OPT_INDENT_2))
        with temporary.open("rb") as file:
            os.fsync(file.fileno())
        os.replace(temporary, self._state_path)

    def _write_ids(self, index: int, ids: list[str]) -> None:
        with (self.directory / f"ids-{index}.txt").open("w") as file:
            file.write("\n".join(ids) + "\n")
            file.flush()
            os.fsync(file.fileno())

    def _batch_ids(self, index: int) -> list[str]:
        path = self.directory / f"ids-{index}.txt"
        return path.read_text().split() if path.exists() else []

    def results(self) -> dict[str, Result]:
        """Every fetched result by ``custom_id``; an answer wins over a failure of the same request."""
        found: dict[str, Result] = {}
        path = self.directory / "results.jsonl"
        if path.exists():
            for line in path.read_bytes().splitlines():
                if line.strip():
                    result = Result(**orjson.loads(line))
                    if result.ok or result.custom_id not in found or not found[result.custom_id].ok:
                        found[result.custom_id] = result
        return found

    def pending(self, *, retry_failed: bool) -> Iterator[BatchRequest]:
        """The recorded requests no batch holds yet (and, with ``retry_failed``, those a batch failed).

        Raises:
            ConfigurationError: a stopped run's create is still unresolved (``recover`` first).
        """
        if self._state.get("intent") is not None:
            raise ConfigurationError("a stopped run's batch create is unresolved: call recover() first")
        held: set[str] = set()
        for index in range(len(self._state["batches"])):
            held.update(self._batch_ids(index))
        failed = {k for k, r in self.results().items() if not r.ok} if retry_failed else set()
        for request in read_requests(self.requests_path):
            if request.custom_id not in held or request.custom_id in failed:
                yield request

    def estimate(self, requests: list[BatchRequest], price: Price | None,
                 tokens: Callable[[BatchRequest], tuple[int, int]]) -> float | None:
        """The batch price of ``requests`` from estimated prompt and completion tokens (``None``: no price)."""
        if price is None:
            return None
        return sum(price.cost(Usage(1, *tokens(r)), "batch") for r in requests)

    def recover(self, progress: IO[str] | None = None) -> str | None:
        """Resolve a create a stopped run left between intent and id: the batch found, or ``None`` (not made).

        Raises:
            BatchApiError: the provider's batch list could not be read (nothing is submitted then).
        """
        saved = self._state.get("intent")
        if saved is None:
            return None
        intent = Intent(saved["tag"], int(saved["requests"]), float(saved["at"]), str(saved.get("file_id") or ""))
        found = self.provider.find(intent, {str(b["id"]) for b in self._state["batches"]})
        if not found.ids:
            (self.directory / f"ids-{saved['index']}.txt").unlink(missing_ok=True)
            del self._state["intent"]
            self._save()
            _say(progress, f"batch: the stopped run's create of {intent.requests} requests never reached "
                           f"{self.provider.name}: they are submitted as any others")
            return None
        batch_id = found.ids[0]
        self._adopt(batch_id, intent.requests, intent.at)
        if found.exact:
            _say(progress, f"batch: found {batch_id}, created by the stopped run before it could write the id: "
                           "not submitted again")
        else:
            others = f" (other batches of that size since then: {', '.join(found.ids[1:])})" if found.ids[1:] else ""
            _say(progress, f"batch: warning: {self.provider.name} batches carry no name, so the batch the stopped "
                           f"run was creating is taken by time and size: {batch_id}, {intent.requests} requests, "
                           f"created after the stopped run began the create{others}. Were it not this run's, its "
                           "requests come back failed (run again with --batch-retry-failed)")
        return batch_id

    def _adopt(self, batch_id: str, requests: int, at: float) -> None:
        self._state["batches"].append({"id": batch_id, "requests": requests, "state": "submitted",
                                       "ended": False, "fetched": False, "submitted_at": at})
        self._state.pop("intent", None)
        self._save()

    def submit(self, requests: list[BatchRequest], progress: IO[str] | None = None) -> int:
        """Submit ``requests`` split to the provider's limits; each batch's intent is saved before its create."""
        provider = self.provider
        if self._state.get("intent") is not None:
            raise ConfigurationError("a stopped run's batch create is unresolved: call recover() first")
        count = 0
        for group in split(iter(requests), provider.size_of, provider.max_requests, provider.max_bytes):
            index = len(self._state["batches"])
            ids = [r.custom_id for r in group]
            self._write_ids(index, ids)
            tag = content_digest(self._state["run"], str(index), *ids)[:32]
            at = time.time()
            saved: dict[str, Any] = {"index": index, "tag": tag, "requests": len(group), "at": at, "file_id": ""}
            self._state["intent"] = saved
            self._save()
            file_id = provider.upload(group)
            if file_id:
                saved["file_id"] = file_id
                self._save()
            batch_id = provider.create(group, Intent(tag, len(group), at, file_id))
            self._adopt(batch_id, len(group), at)
            count += len(group)
            _say(progress, f"batch: submitted {batch_id} ({len(group)} requests)")
        self.submitted_now += count
        return count

    def poll(self) -> Waited:
        """Ask every open batch where it stands; fetch the results of those that ended."""
        waited = Waited(batches=len(self._state["batches"]))
        for index, batch in enumerate(self._state["batches"]):
            waited.requests += batch["requests"]
            if not batch["fetched"]:
                status = self.provider.status(batch["id"])
                batch["state"], batch["ended"] = status.state, status.ended
                batch["done"], batch["failed"] = status.done, status.failed
                if status.ended:
                    self._fetch(index, batch)
                self._save()
            waited.states[batch["state"]] = waited.states.get(batch["state"], 0) + 1
            done, failed = batch.get("done", 0), batch.get("failed", 0)
            waited.done += done
            waited.failed += failed
            if not batch["fetched"]:
                waited.in_progress += max(batch["requests"] - done - failed, 0)
        waited.complete = all(b["fetched"] for b in self._state["batches"])
        return waited

    def _fetch(self, index: int, batch: dict[str, Any]) -> None:
        wanted = set(self._batch_ids(index))
        lines: list[bytes] = []
        done = failed = 0
        for result in self.provider.results(batch["id"]):
            if result.custom_id in wanted:
                wanted.discard(result.custom_id)
                lines.append(orjson.dumps(_fields(result)))
                done, failed = done + result.ok, failed + (not result.ok)
        for custom_id in sorted(wanted):  # neither answered nor failed by the provider: the batch ended first
            lines.append(orjson.dumps(_fields(Result(custom_id, error=f"no result: batch {batch['id']} ended "
                                                                      f"{batch['state']}"))))
            failed += 1
        with (self.directory / "results.jsonl").open("ab") as file:
            file.write(b"".join(line + b"\n" for line in lines))
            file.flush()
            os.fsync(file.fileno())
        batch["done"], batch["failed"], batch["fetched"] = done, failed, True

    def wait(self, *, poll_s: float, wait: bool, progress: IO[str] | None,
             sleep: Callable[[float], None] = time.sleep) -> Waited:
        """Poll until every batch's results are in (or once, without ``wait``), reporting on ``progress``."""
        while True:
            waited = self.poll()
            if progress is not None:
                states = ", ".join(f"{k} {v}" for k, v in sorted(waited.states.items()))
                progress.write(f"batch: {waited.batches} batches ({states}), {waited.requests} requests submitted, "
                               f"{waited.in_progress} in progress, {waited.done} done, {waited.failed} failed\n")
                progress.flush()
            if waited.complete or not wait:
                return waited
            sleep(poll_s)

    def write_failed(self, recorded: set[str], examples: int = 3) -> tuple[int, Path, list[str]]:
        """List the recorded requests without an answer in ``failed.jsonl``: how many, where, the first few."""
        results = self.results()
        path = self.directory / "failed.jsonl"
        count = 0
        first: list[str] = []
        with path.open("wb") as file:
            for custom_id in sorted(recorded):
                result = results.get(custom_id)
                if result is not None and not result.ok:
                    file.write(orjson.dumps({"custom_id": custom_id, "error": result.error}) + b"\n")
                    count += 1
                    if len(first) < examples:
                        first.append(f"{custom_id[:16]}: {result.error[:160]}")
        return count, path, first


def _say(progress: IO[str] | None, line: str) -> None:
    if progress is not None:
        progress.write(line + "\n")
        progress.flush()


def _fields(result: Result) -> dict[str, Any]:
    return {"custom_id": result.custom_id, "text": result.text, "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens, "error": result.error}
