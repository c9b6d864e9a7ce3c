"""The dataset record: one scored retrieval as one JSON line, written by ``cp-observe dataset`` and ``run_evals``.

One line holds what a regression test needs to re-run the retrieval and what production said about it:

- ``input``: the query, the key ``run_evals`` hands to the target (``query`` repeats it for people reading);
- ``contexts``: the retrieved texts in rank order; ``answer``: the answer they were judged against (``None``
  when the retrieval was judged against its query; ``reference`` says which);
- ``verdicts``, ``reasons`` (per context, in rank order), ``score``, ``average_precision``, ``judge_model``;
- ``trace_id``, ``span_id`` (of the scored span, lowercase hex), ``data_source``, ``segments`` (label name ->
  value), ``time`` (ISO 8601 UTC) and ``time_unix_nano``, ``stage`` and, for a reranked retrieval, ``rerank``
  (``average_precision_before``, ``lift``, ``dropped_relevant``);
- ``format``: ``FORMAT``, written first, so a reader tells a dataset file from an OTLP/JSON file by its first
  bytes (a line edited with the key moved past the first 64 KiB reads as OTLP and fails with that error).

``run_evals`` reads each parsed line directly (a mapping with ``input``); ``load_dataset`` checks every line and
says which one is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Final

from cp_observe._errors import CpObserveError

__all__ = ["FORMAT", "DatasetError", "Record", "is_dataset_file", "load_dataset", "read_records", "write_records"]

FORMAT: Final = "cp-observe-dataset/1"
_MAX_LINE: Final = 64 << 20
_SNIFF: Final = 64 << 10


class DatasetError(CpObserveError, ValueError):
    """A dataset file cannot be read or a line of it is not a record; the message names the file and line."""


@dataclass(slots=True)
class Record:
    """One scored retrieval, as a dataset line holds it."""

    query: str
    contexts: list[str]
    answer: str | None
    score: float
    average_precision: float
    verdicts: list[bool]
    reasons: list[str] = field(default_factory=list)
    reference: str = "output"
    trace_id: str = ""
    span_id: str = ""
    data_source: str = "unknown"
    segments: dict[str, str] = field(default_factory=dict)
    time_unix_nano: int = 0
    judge_model: str = ""
    stage: str | None = None
    rerank: dict[str, float] | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of one line (``format`` first, so a reader tells the file's kind from its first bytes)."""
        out: dict[str, Any] = {
            "format": FORMAT, "input": self.query, "query": self.query, "contexts": list(self.contexts),
            "answer": self.answer,
            "reference": self.reference, "verdicts": list(self.verdicts), "reasons": list(self.reasons),
            "score": self.score, "average_precision": self.average_precision, "judge_model": self.judge_model,
            "trace_id": self.trace_id, "span_id": self.span_id, "data_source": self.data_source,
            "segments": dict(self.segments), "time": _iso(self.time_unix_nano),
            "time_unix_nano": self.time_unix_nano,
        }
        if self.stage is not None:
            out["stage"] = self.stage
        if self.rerank is not None:
            out["rerank"] = dict(self.rerank)
        return out

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Record:
        """A record from one parsed line; raises ``ValueError`` naming the field that is wrong."""
        if document.get("format") != FORMAT:
            raise ValueError(f"not a cp-observe dataset line (format {document.get('format')!r}, expected {FORMAT!r})")
        query = document.get("query", document.get("input"))
        if not isinstance(query, str):
            raise ValueError("'query' must be a string")
        contexts = _strings(document.get("contexts", []), "contexts")
        answer = document.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise ValueError("'answer' must be a string or null")
        verdicts = document.get("verdicts", [])
        if not isinstance(verdicts, list) or not all(isinstance(v, bool) for v in verdicts):
            raise ValueError("'verdicts' must be a list of booleans")
        segments = document.get("segments", {})
        if not isinstance(segments, dict) or not all(isinstance(v, str) for v in segments.values()):
            raise ValueError("'segments' must map label names to strings")
        rerank = document.get("rerank")
        if rerank is not None and (not isinstance(rerank, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in rerank.values())):
            raise ValueError("'rerank' must map names to numbers")
        stage = document.get("stage")
        return cls(
            query=query, contexts=contexts, answer=answer, score=_number(document, "score"),
            average_precision=_number(document, "average_precision", document.get("score")),
            verdicts=list(verdicts), reasons=_strings(document.get("reasons", []), "reasons"),
            reference=str(document.get("reference", "output")), trace_id=str(document.get("trace_id", "")),
            span_id=str(document.get("span_id", "")), data_source=str(document.get("data_source", "unknown")),
            segments={str(k): v for k, v in segments.items()},
            time_unix_nano=int(document.get("time_unix_nano") or 0), judge_model=str(document.get("judge_model", "")),
            stage=str(stage) if stage is not None else None,
            rerank={str(k): v if isinstance(v, int) else float(v) for k, v in rerank.items()} if rerank else None,
        )


def _strings(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"'{name}' must be a list of strings")
    return list(value)


def _number(document: Mapping[str, Any], name: str, default: Any = None) -> float:
    value = document.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1e9:
        raise ValueError(f"'{name}' must be a non-negative number, got {value!r}")
    return float(value)


def _iso(time_ns: int) -> str | None:
    if not time_ns:
        return None
    return datetime.fromtimestamp(time_ns / 1e9, timezone.utc).isoformat().replace("+00:00", "Z")


def is_dataset_file(path: str | Path) -> bool:
    """True when the first non-blank line of ``path`` is a dataset record (not OTLP/JSON, not protobuf).

    Raises:
        DatasetError: the file cannot be opened.
    """
    try:
        with Path(path).open("rb") as stream:
            head = stream.read(2)
            if head[:1] != b"{" and head.strip() != b"":
                return False
            stream.seek(0)
            while True:
                head = stream.readline(_SNIFF)  # at most this much of a line: an OTLP line can be very long
                if not head:
                    return False
                if head.strip():
                    return b'"format"' in head and FORMAT.encode() in head
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_records(path: str | Path) -> Iterator[Record]:
    """Every record of a dataset file, in order.

    Raises:
        DatasetError: the file cannot be read, or a line is not a record (the message names the line).
    """
    try:
        stream = Path(path).open("rb")  # noqa: SIM115 - closed by the `with` below; the open error has its own message
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with stream:
        for number, raw in enumerate(_lines(stream, path), start=1):
            if not raw.strip():
                continue
            try:
                document = json.loads(raw)
                if not isinstance(document, dict):
                    raise ValueError("a line must hold one JSON object")
                yield Record.from_json(document)
            except ValueError as exc:
                raise DatasetError(f"{path}:{number}: {exc}") from None


def _lines(stream: IO[bytes], path: str | Path) -> Iterator[bytes]:
    while True:
        try:
            line = stream.readline(_MAX_LINE + 1)
        except OSError as exc:
            raise DatasetError(f"{path}: unreadable: {exc}") from None
        if not line:
            return
        if len(line) > _MAX_LINE:
            raise DatasetError(f"{path}: a line longer than {_MAX_LINE} bytes")
        yield line


def write_records(path: str | Path, records: Iterator[Record] | list[Record]) -> int:
    """Write ``records`` as JSON lines to ``path`` (``-``: standard output); returns how many."""
    import sys

    count = 0
    if str(path) == "-":
        for record in records:
            sys.stdout.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
            count += 1
        sys.stdout.flush()
        return count
    try:
        with Path(path).open("w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
                count += 1
    except OSError as exc:
        raise DatasetError(f"{path}: cannot write: {exc.strerror or exc}") from None
    return count


def load_dataset(path: str | Path) -> list[dict[str, Any]]:
    """The items of a dataset file (``cp-observe dataset``'s output), ready for ``run_evals(data=...)``.

    Each item is the line's JSON object, checked: ``input`` is the query the target gets, ``answer`` the stored
    answer a retriever target's contexts are judged against (``create_context_precision_scorer(model,
    {"contexts_from_output": True})``), ``contexts`` and ``verdicts`` what production retrieved and judged.

    Raises:
        DatasetError: the file cannot be read, or a line is not a dataset record (the message names it).
    """
    return [record.to_json() for record in read_records(path)]
