"""cp-observe's own verdicts, read back: one ``JudgedRetrieval`` per evaluation span, from any replay input.

An evaluation span (``evaluation context_precision``) names the retrieval it scored by its parent span id and
carries the verdicts in rank order; the retrieval span itself (a replay writes it next to its evaluation, a
Collector file or a trace store holds it anyway) gives each position its ``document.id`` and a preview of its
content. Spans are read through ``serve``'s conversion, as ``cp-observe report`` reads them.

Memory: one record per evaluation read, up to ``MAX_RETRIEVALS`` (more are counted in ``over_limit``, not kept),
and the documents of at most ``MAX_TARGETS`` retrieval spans.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry.trace import StatusCode

from cp_observe import _names as n
from cp_observe._traces._convert import spans_from_request
from cp_observe._traces._source import Source

__all__ = ["MAX_RETRIEVALS", "JudgeKey", "Judged", "JudgedRetrieval", "read_judged"]

MAX_RETRIEVALS = 1_000_000
MAX_TARGETS = 100_000
_MAX_DOCUMENTS = 50
_PREVIEW = 200


@dataclass(frozen=True, slots=True, order=True)
class JudgeKey:
    """A judge identity: model, prompt version and kind (what ``_judging/_identity.py`` records)."""

    model: str
    prompt_version: str = ""
    kind: str = ""

    def __str__(self) -> str:
        extra = ", ".join(part for part in (self.kind, self.prompt_version and f"prompt {self.prompt_version}") if part)
        return f"{self.model} ({extra})" if extra else self.model


@dataclass(frozen=True, slots=True)
class JudgedRetrieval:
    """One retrieval as cp-observe judged it."""

    trace_id: int
    span_id: int
    data_source: str
    judge: JudgeKey
    verdicts: tuple[bool, ...]
    reasons: tuple[str, ...] = ()
    document_ids: tuple[str | None, ...] = ()
    contexts: tuple[str, ...] = ()
    needs_label: bool | None = None  # None: not recorded (before calibration_rate existed, or not known)
    source: str = ""


@dataclass
class Judged:
    """What was read: the retrievals, and what could not be used."""

    retrievals: list[JudgedRetrieval] = field(default_factory=list)
    failed: int = 0  # evaluation spans with an ERROR status (no verdicts)
    over_limit: int = 0
    inputs: list[str] = field(default_factory=list)


def _documents(attributes: Any) -> tuple[tuple[str | None, ...], tuple[str, ...]]:
    ids: list[str | None] = []
    contents: list[str] = []
    for i in range(_MAX_DOCUMENTS):
        doc_id = attributes.get(n.document_attribute(i, "id"))
        content = attributes.get(n.document_attribute(i, "content"))
        if doc_id is None and content is None:
            break
        ids.append(str(doc_id) if doc_id is not None else None)
        contents.append(str(content)[:_PREVIEW] if content is not None else "")
    return tuple(ids), tuple(contents)


def read_judged(sources: Iterable[Source], judged: Judged | None = None) -> Judged:
    """Every evaluation span in ``sources``, joined with the documents of the retrieval span it scored.

    Raises:
        ReplayInputError: an input cannot be read further (what was read before stays in ``judged``).
    """
    out = judged if judged is not None else Judged()
    for source in sources:
        out.inputs.append(source.name)
        targets: OrderedDict[int, tuple[tuple[str | None, ...], tuple[str, ...]]] = OrderedDict()
        found: list[JudgedRetrieval] = []
        for batch in source.batches():
            for span in spans_from_request(batch.request).spans:
                attributes: Any = span.attributes or {}
                if span.context is None:
                    continue
                if span.name == n.EVALUATION_SPAN_NAME or attributes.get(n.OPENINFERENCE_SPAN_KIND) == n.KIND_EVALUATOR:
                    if attributes.get(n.GEN_AI_EVALUATION_NAME, n.EVALUATION_NAME) != n.EVALUATION_NAME:
                        continue
                    if span.status.status_code is StatusCode.ERROR or n.CP_VERDICTS not in attributes:
                        out.failed += 1
                        continue
                    if span.parent is None:
                        continue
                    if len(out.retrievals) + len(found) >= MAX_RETRIEVALS:
                        out.over_limit += 1
                        continue
                    needs = attributes.get(n.CP_NEEDS_LABEL)
                    found.append(JudgedRetrieval(
                        trace_id=span.context.trace_id, span_id=span.parent.span_id,
                        data_source=str(attributes.get(n.GEN_AI_DATA_SOURCE_ID, "unknown")),
                        judge=JudgeKey(str(attributes.get(n.CP_JUDGE_MODEL, "")),
                                       str(attributes.get(n.CP_JUDGE_PROMPT_VERSION, "")),
                                       str(attributes.get(n.CP_JUDGE_KIND, ""))),
                        verdicts=tuple(bool(v) for v in attributes.get(n.CP_VERDICTS, ())),
                        reasons=tuple(str(r) for r in attributes.get(n.CP_REASONS, ())),
                        needs_label=bool(needs) if needs is not None else None,
                        source=source.name,
                    ))
                elif n.document_attribute(0, "id") in attributes or n.document_attribute(0, "content") in attributes:
                    targets[span.context.span_id] = _documents(attributes)
                    while len(targets) > MAX_TARGETS:
                        targets.popitem(last=False)
        for retrieval in found:
            documents = targets.get(retrieval.span_id)
            out.retrievals.append(retrieval if documents is None else
                                  replace(retrieval, document_ids=documents[0], contexts=documents[1]))
    return out
