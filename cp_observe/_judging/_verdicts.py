"""Reading a judge's reply: JSON out of text or fences, verdict normalisation, alignment by index.

The reference scorer takes the judge's verdict list positionally: a missing verdict shifts every later one
up a rank and inflates the score. Here every verdict is placed by its ``context_index``, the count is
checked, and a reply with duplicated, out-of-range or missing indices is not trusted at all: a model that
numbered from 1, say, would otherwise have its verdicts silently moved one context over.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from cp_observe._types import Verdict

__all__ = ["Alignment", "RawVerdict", "align", "coerce_verdicts", "extract_json", "normalise_verdict", "parse_reply"]

_YES: Final = frozenset({"yes", "y", "true", "relevant", "useful", "1", "はい", "是", "相关", "関連あり"})
_NO: Final = frozenset({"no", "n", "false", "irrelevant", "not", "0", "いいえ", "否", "不相关", "関連なし"})
_FENCE_RE: Final = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.S)
_WORD_RE: Final = re.compile(r"[^\W_]+", re.U)
_INDEX_KEYS: Final = ("context_index", "contextIndex", "index", "context_id", "id")
_VERDICT_KEYS: Final = ("verdict", "relevant", "is_relevant", "relevance", "answer", "useful")
_REASON_KEYS: Final = ("reason", "reasoning", "explanation", "rationale")


@dataclass(frozen=True, slots=True)
class RawVerdict:
    """One entry of a judge's reply, before alignment: index and verdict as the judge gave them."""

    index: int | None
    relevant: bool | None
    reason: str


@dataclass(slots=True)
class Alignment:
    """The verdicts that could be placed, and what was wrong with the reply.

    Attributes:
        verdicts: verdicts by context index (only trustworthy ones).
        problems: human-readable descriptions of each anomaly.
        trustworthy: False when indices were duplicated, out of range or absent, so none can be placed.
        indices: the raw ``context_index`` values the judge gave, for the corrective message.
    """

    verdicts: dict[int, Verdict] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    trustworthy: bool = True
    indices: list[object] = field(default_factory=list)

    def missing(self, n: int) -> list[int]:
        """Indices in ``range(n)`` that have no verdict."""
        return [i for i in range(n) if i not in self.verdicts]


def normalise_verdict(value: object) -> bool | None:
    """Map a judge's verdict to a boolean: ``"Yes."``, ``" YES "``, ``True``, ``1`` are yes; ``None`` if unclear."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return {1: True, 0: False}.get(int(value)) if value in (0, 1) else None
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if text in _YES:
        return True
    if text in _NO:
        return False
    word = _WORD_RE.search(text)
    if word is None:
        return None
    first = word.group(0)
    if first in _YES:
        return True
    if first in _NO:
        return False
    return None


def extract_json(text: str) -> Any | None:
    """Return the first JSON value that looks like a verdict reply, from plain JSON, fences or prose."""
    stripped = text.strip()
    candidates: list[str] = [stripped]
    candidates.extend(match.group(1).strip() for match in _FENCE_RE.finditer(text))
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    decoder = json.JSONDecoder()
    fallback: Any | None = None
    for position, char in enumerate(text):
        if char not in "{[":
            continue
        try:
            value, _ = decoder.raw_decode(text, position)
        except ValueError:
            continue
        if isinstance(value, dict) and any(k in value for k in ("verdicts", *_VERDICT_KEYS)):
            return value
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return value
        fallback = value if fallback is None else fallback
    return fallback


def parse_reply(text: str) -> list[RawVerdict] | None:
    """Parse a judge reply into raw verdict entries; ``None`` when it holds no usable JSON."""
    data = extract_json(text)
    if data is None:
        return None
    if isinstance(data, Mapping):
        items = data.get("verdicts")
        if items is None and any(k in data for k in _VERDICT_KEYS):
            items = [data]
    elif isinstance(data, list):
        items = data
    else:
        return None
    if not isinstance(items, list):
        return None
    return [_raw_entry(item) for item in items]


def align(entries: Iterable[RawVerdict], n: int) -> Alignment:
    """Place verdicts by ``context_index``; distrust the whole reply if an index is absent, repeated or out of range."""
    result = Alignment()
    seen: set[int] = set()
    for entry in entries:
        result.indices.append(entry.index)
        if entry.index is None:
            result.trustworthy = False
            result.problems.append("a verdict without context_index")
            continue
        if not 0 <= entry.index < n:
            result.trustworthy = False
            result.problems.append(f"context_index {entry.index} out of range 0..{n - 1}")
            continue
        if entry.index in seen:
            result.trustworthy = False
            result.problems.append(f"context_index {entry.index} repeated")
            continue
        seen.add(entry.index)
        if entry.relevant is None:
            result.problems.append(f"context_index {entry.index} has no yes/no verdict")
            continue
        result.verdicts[entry.index] = Verdict(entry.index, entry.relevant, entry.reason)
    if not result.trustworthy:
        result.verdicts.clear()
    missing = [i for i in range(n) if i not in seen]
    if missing:
        result.problems.append(f"no verdict for context_index {missing[:20]}")
    return result


def coerce_verdicts(verdicts: Sequence[Verdict], n: int) -> tuple[Verdict, ...] | None:
    """Return a judge's verdicts in rank order when there is exactly one per context, else ``None``."""
    if len(verdicts) != n:
        return None
    by_index: dict[int, Verdict] = {}
    for verdict in verdicts:
        if not isinstance(verdict, Verdict) or not isinstance(verdict.relevant, bool):
            return None
        if not 0 <= verdict.index < n or verdict.index in by_index:
            return None
        by_index[verdict.index] = verdict
    return tuple(by_index[i] for i in range(n))


def _raw_entry(item: object) -> RawVerdict:
    if not isinstance(item, Mapping):
        return RawVerdict(None, normalise_verdict(item), "")
    index = _first(item, _INDEX_KEYS)
    verdict = _first(item, _VERDICT_KEYS)
    reason = _first(item, _REASON_KEYS)
    return RawVerdict(_as_index(index), normalise_verdict(verdict), reason if isinstance(reason, str) else "")


def _first(item: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        if key in item:
            return item[key]
    return None


def _as_index(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None
