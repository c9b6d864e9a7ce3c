"""People's relevance labels in Phoenix, and the verdicts cp-observe posted beside them, read back.

Phoenix 20 lists span annotations over REST (``GET /v1/projects/{project}/span_annotations``, filtered by
``identifier``) but has no REST route that lists *document* annotations; its GraphQL ``getSpanByOtelId`` gives a
span's ``documentEvaluations`` (every document annotation, any annotator) and its attributes. So:

1. the scored spans are the ones carrying cp-observe's ``context_precision`` span annotation (identifier
   ``cp-observe``, with the judge, prompt version and data source in its metadata), plus its ``needs_label``
   one when the retrieval was drawn for labelling; or, when the verdicts come from files, the spans they name;
2. for those spans, in batches of aliased ``getSpanByOtelId`` queries: the ``HUMAN`` document annotations
   named ``label_name`` (default ``relevance``) are people's labels. The verdicts are the ``verdicts`` list of
   the span annotation's metadata: Phoenix keeps one document annotation per (name, span, position), so a
   person's ``relevance`` label *replaces* the judge's there. (Annotations from before that list existed: the
   ``LLM``/``CODE`` document annotations, when none is missing.) The judge's reasons are read from the document
   annotations that are still the judge's. A human annotation is relevant when its score is
   ≥ 0.5, else when its label reads relevant/yes/true/1 (irrelevant/not relevant/no/false/0 for not); any
   other is *unreadable*: counted and listed, never guessed.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cp_observe import _names as n
from cp_observe._judging._labels import HumanLabel
from cp_observe._traces._apis import get_json
from cp_observe._traces._source import ReplayInputError
from cp_observe.calibrate._judged import MAX_RETRIEVALS, JudgedRetrieval, JudgeKey

__all__ = ["PhoenixLabels", "PhoenixRead"]

_BATCH = 50
_PAGE = 1000
_MAX_PAGES = 10_000
_YES = frozenset({"relevant", "yes", "true", "1"})
_NO = frozenset({"irrelevant", "not relevant", "not_relevant", "no", "false", "0"})
_FIELDS = ("context { traceId spanId } attributes numDocuments documentEvaluations { name annotatorKind label "
           "score explanation documentPosition metadata }")


@dataclass
class PhoenixRead:
    """What one read of a Phoenix project gave."""

    retrievals: list[JudgedRetrieval] = field(default_factory=list)
    labels: list[HumanLabel] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # human annotations neither relevant nor not, where
    truncated: bool = False  # more than MAX_RETRIEVALS scored spans: the newest were read, the rest left


class PhoenixLabels:
    """Human document annotations (and cp-observe's own verdicts) of one Phoenix project.

    Args:
        url: Phoenix's base URL.
        project: the project name (or id) the spans went to.
        label_name: the name of the people's document annotations (``relevance`` by default).
        api_key: sent as a bearer token; default ``CP_OBSERVE_PHOENIX_API_KEY``, else ``PHOENIX_API_KEY``.
    """

    def __init__(self, url: str, project: str, *, label_name: str = n.PHOENIX_DOCUMENT_ANNOTATION_NAME,
                 api_key: str | None = None, timeout_s: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError("the Phoenix URL must start with http:// or https://")
        self.url = url.rstrip("/")
        self.project = project
        self.label_name = label_name
        self.name = f"{self.url} (Phoenix project {project})"
        self.timeout_s = timeout_s
        self.truncated = False
        key = api_key or os.environ.get(n.ENV_PREFIX + "PHOENIX_API_KEY") or os.environ.get(n.ENV_PHOENIX_API_KEY)
        self._headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "cp-observe"}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"

    def _request(self, url: str, data: bytes | None = None) -> Any:
        return get_json(url, self.timeout_s, data=data, headers=self._headers, shown=url.split("?", 1)[0])

    def scored_spans(self) -> dict[str, dict[str, Any]]:
        """Span id (hex) -> cp-observe's span annotation metadata (plus ``needs_label``), for every scored span."""
        project = urllib.parse.quote(self.project, safe="")
        found: dict[str, dict[str, Any]] = {}
        needs: set[str] = set()
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            query: list[tuple[str, Any]] = [
                ("identifier", n.PHOENIX_ANNOTATION_IDENTIFIER), ("limit", _PAGE),
                ("include_annotation_names", n.EVALUATION_NAME),
                ("include_annotation_names", n.PHOENIX_NEEDS_LABEL_ANNOTATION_NAME),
            ]
            if cursor:
                query.append(("cursor", cursor))
            body = self._request(f"{self.url}/v1/projects/{project}/span_annotations?{urllib.parse.urlencode(query)}")
            for item in body.get("data", []):
                if item.get("name") == n.PHOENIX_NEEDS_LABEL_ANNOTATION_NAME:
                    needs.add(item["span_id"])
                else:
                    found[item["span_id"]] = dict(item.get("metadata") or {})
            cursor = body.get("next_cursor")
            if not cursor:
                break
            if len(found) >= MAX_RETRIEVALS:
                self.truncated = True
                break
        for span_id, metadata in found.items():
            metadata["needs_label"] = span_id in needs
        return found

    def read(self, span_ids: Iterable[str] | None = None) -> PhoenixRead:
        """Labels (and verdicts) of ``span_ids`` (hex), or of every span cp-observe scored in the project.

        Raises:
            ReplayInputError: Phoenix cannot be read; the message names the URL.
        """
        scored = self.scored_spans() if span_ids is None else {s: {} for s in span_ids}
        out = PhoenixRead(truncated=self.truncated)
        ids = sorted(scored)
        for start in range(0, len(ids), _BATCH):
            chunk = ids[start:start + _BATCH]
            aliases = " ".join(f's{i}: getSpanByOtelId(spanId: "{span}") {{ {_FIELDS} }}'
                               for i, span in enumerate(chunk) if _is_hex(span))
            if not aliases:
                continue
            body = self._request(f"{self.url}/graphql", json.dumps({"query": "query { " + aliases + " }"}).encode())
            if body.get("errors"):
                raise ReplayInputError(f"{self.url}/graphql: {str(body['errors'])[:300]}")
            for i, span in enumerate(chunk):
                node = (body.get("data") or {}).get(f"s{i}")
                if node is not None:
                    self._span(node, scored[span], out)
        return out

    def _span(self, node: dict[str, Any], metadata: dict[str, Any], out: PhoenixRead) -> None:
        trace_id = int(node["context"]["traceId"], 16)
        span_id = int(node["context"]["spanId"], 16)
        verdicts: dict[int, tuple[bool, str]] = {}
        judge_model = str(metadata.get("judge_model", ""))
        for annotation in node.get("documentEvaluations") or []:
            position = annotation.get("documentPosition")
            kind = annotation.get("annotatorKind")
            name = annotation.get("name")
            if not isinstance(position, int):
                continue
            if kind == n.ANNOTATOR_HUMAN and name == self.label_name:
                where = f"Phoenix span {span_id:016x} document {position}"
                relevant = _relevance(annotation.get("score"), annotation.get("label"))
                if relevant is None:
                    out.unreadable.append(f"{where}: score {annotation.get('score')!r}, label "
                                          f"{annotation.get('label')!r}")
                    continue
                note = annotation.get("metadata") or {}
                out.labels.append(HumanLabel(
                    trace_id, span_id, relevant, position=position, reason=annotation.get("explanation"),
                    annotator=str(note.get("annotator")) if isinstance(note, dict) and note.get("annotator") else None,
                    where=where))
            elif kind in (n.ANNOTATOR_LLM, n.ANNOTATOR_CODE) and name == n.PHOENIX_DOCUMENT_ANNOTATION_NAME:
                score = annotation.get("score")
                verdicts[position] = (bool(score is not None and score >= 0.5), annotation.get("explanation") or "")
                note = annotation.get("metadata") or {}
                if not judge_model and isinstance(note, dict):
                    judge_model = str(note.get("judge_model", ""))
        if not metadata:
            return  # labels only (the verdicts come from files)
        recorded = metadata.get("verdicts")
        if isinstance(recorded, list) and all(isinstance(v, bool) for v in recorded):
            ordered = [(v, verdicts[i][1] if i in verdicts else "") for i, v in enumerate(recorded)]
        elif verdicts and all(i in verdicts for i in range(max(verdicts) + 1)):
            ordered = [verdicts[i] for i in sorted(verdicts)]  # before the metadata carried them (and unlabelled)
        else:
            return  # no verdicts, or holes where people's labels replaced them: nothing to align
        ids, contents = _documents(node.get("attributes"))
        kind = str(metadata.get("judge_kind") or "")
        out.retrievals.append(JudgedRetrieval(
            trace_id=trace_id, span_id=span_id, data_source=str(metadata.get("data_source", "unknown")),
            judge=JudgeKey(judge_model, str(metadata.get("prompt_version") or "none"), kind),  # as on the span
            verdicts=tuple(v for v, _ in ordered), reasons=tuple(r for _, r in ordered),
            document_ids=ids, contexts=contents, needs_label=bool(metadata.get("needs_label")), source=self.name,
        ))


def _is_hex(span: str) -> bool:
    return len(span) == 16 and all(c in "0123456789abcdef" for c in span)


def _relevance(score: Any, label: Any) -> bool | None:
    if isinstance(score, (int, float)) and not isinstance(score, bool):
        return float(score) >= 0.5
    if isinstance(label, str):
        text = label.strip().lower()
        if text in _YES:
            return True
        if text in _NO:
            return False
    return None


def _documents(attributes: Any) -> tuple[tuple[str | None, ...], tuple[str, ...]]:
    """Document ids and content previews from Phoenix's nested attribute JSON (``retrieval.documents``)."""
    try:
        data = json.loads(attributes) if isinstance(attributes, str) else attributes
        documents = data["retrieval"]["documents"]
    except (ValueError, KeyError, TypeError):
        return (), ()
    ids: list[str | None] = []
    contents: list[str] = []
    for entry in documents if isinstance(documents, list) else []:
        document = entry.get("document", {}) if isinstance(entry, dict) else {}
        ids.append(str(document["id"]) if document.get("id") is not None else None)
        contents.append(str(document.get("content", ""))[:200])
    return tuple(ids), tuple(contents)
