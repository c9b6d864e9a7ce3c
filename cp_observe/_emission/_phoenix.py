"""The Phoenix sink: each evaluation becomes annotations on the scored span in Arize Phoenix (REST API, stdlib HTTP).

Per evaluation it posts, with ``sync=true`` so Phoenix answers with what it did:

- ``POST /v1/span_annotations``: one ``context_precision`` annotation on the scored span (score, label,
  explanation; ``annotator_kind`` ``LLM`` for an LLM judge, else ``CODE``; metadata naming the evaluation span, the
  judge and the prompt version). Its identifier is fixed (``cp-observe``): Phoenix upserts on (name, span,
  identifier), so re-sending, or scoring the same span again, replaces the annotation instead of adding one.
- a ``needs_label`` span annotation (label ``yes``, ``CODE``) on a retrieval drawn at ``calibration_rate``, so
  people can filter Phoenix to exactly the unbiased set to label.
- ``POST /v1/document_annotations``: one ``relevance`` annotation per judged context that is recorded on the span
  (position ``i`` is the ``i``-th ``retrieval.documents`` entry), score 1 or 0, label, and the judge's reason only
  when content capture is on. Phoenix refuses identifiers here and upserts on (name, span, position), so these are
  idempotent too; it computes nDCG, precision@k and hit rate from ``LLM``-kind ones.

Annotations name spans by id, which Phoenix looks up across projects: they land in the project the spans went to.
Phoenix answers 404 while a span is not ingested yet (spans are exported in batches): that record is retried with
backoff. No answer, 408, 429 and 5xx mean Phoenix is failing: retried too, and the runner pauses as a whole. A
422 (or another 4xx) is a refusal, counted failed and not retried. When a batch is refused, the records Phoenix's
404 names wait for their retry while the rest go again together, and a 422'd batch is re-sent record by record, so
one record does not hold up or sink the others.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from cp_observe import _names as n
from cp_observe._emission._sinks import Delivery, EvaluationRecord
from cp_observe._log import logger

__all__ = ["PhoenixSink"]

_SPAN_ANNOTATIONS = "/v1/span_annotations?sync=true"
_DOCUMENT_ANNOTATIONS = "/v1/document_annotations?sync=true"
_UNAVAILABLE_STATUSES = frozenset({408, 425, 429})
_ISOLATE_STATUSES = frozenset({404, 422})
#: Phoenix's 404 detail lists the span ids it does not have ("Spans with IDs a, b do not exist.").
_SPAN_ID = re.compile(r"\b[0-9a-f]{16}\b")
_MAX_DETAIL = 1 << 16


class PhoenixSink:
    """Posts each evaluation to Phoenix as a span annotation plus per-document relevance annotations.

    Args:
        url: Phoenix's base URL (``http://127.0.0.1:6006``), the app that serves ``/v1/...``.
        api_key: sent as ``Authorization: Bearer``; needed when Phoenix has authentication on. Never logged.
        timeout_s: per HTTP request.
    """

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 10.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError("the Phoenix URL must start with http:// or https://")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._headers = {"Content-Type": "application/json", "User-Agent": "cp-observe"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.last_error: str | None = None  # status or error type of the last failed request, for one log line

    @property
    def name(self) -> str:
        """``phoenix``: the ``sink`` label of the counters."""
        return n.SINK_PHOENIX

    def send(self, records: Sequence[EvaluationRecord]) -> list[Delivery]:
        """Post the span annotations, then the document annotations of the records whose span annotation landed."""
        outcome = self._post_grouped(_SPAN_ANNOTATIONS, [[span_annotation(r), *needs_label_annotation(r)]
                                                         for r in records])
        landed = [i for i, delivery in enumerate(outcome) if delivery is Delivery.SENT]
        documents = self._post_grouped(_DOCUMENT_ANNOTATIONS, [document_annotations(records[i]) for i in landed])
        for i, delivery in zip(landed, documents, strict=True):
            outcome[i] = delivery
        return outcome

    # --- HTTP ---------------------------------------------------------------------------------------------------------
    def _post_grouped(self, path: str, groups: list[list[dict[str, Any]]]) -> list[Delivery]:
        """Post every group's items in one request; when it is refused, find the group(s) at fault.

        A 404 names the spans Phoenix does not have yet: their groups wait for a retry and the rest are posted
        again together. Any other refusal of several groups (a 422) posts each group alone to isolate it.
        """
        live = [i for i, group in enumerate(groups) if group]
        out = [Delivery.SENT] * len(groups)
        if not live:
            return out
        status, detail = self._post(path, [item for i in live for item in groups[i]])
        if status in _ISOLATE_STATUSES and len(live) > 1:
            missing = set(_SPAN_ID.findall(detail)) if status == 404 else set()
            waiting = [i for i in live if any(item["span_id"] in missing for item in groups[i])]
            if waiting:
                rest = [i for i in live if i not in waiting]
                for i in waiting:
                    out[i] = Delivery.RETRY
                again = self._post_grouped(path, [groups[i] for i in rest]) if rest else []
                for i, delivery in zip(rest, again, strict=True):
                    out[i] = delivery
                return out
            for i in live:
                out[i] = self._classify(self._post(path, groups[i])[0])
            return out
        delivery = self._classify(status)
        for i in live:
            out[i] = delivery
        return out

    def _post(self, path: str, data: list[dict[str, Any]]) -> tuple[int | None, str]:
        """POST ``{"data": data}``: the HTTP status (None when no answer came) and, for a refusal, its detail."""
        request = urllib.request.Request(
            self.url + path, data=json.dumps({"data": data}).encode(), headers=self._headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
                return int(response.status), ""
        except urllib.error.HTTPError as exc:
            with exc:
                detail = exc.read(_MAX_DETAIL).decode("utf-8", "replace")
            self.last_error = f"HTTP {exc.code}"
            logger.debug("phoenix refused annotations", status=exc.code, path=path.split("?", maxsplit=1)[0])
            return int(exc.code), detail
        except (OSError, ValueError) as exc:  # URLError, timeouts, resets; ValueError: a malformed URL
            self.last_error = type(exc).__name__
            logger.debug("phoenix unreachable", error_type=type(exc).__name__)
            return None, ""

    @staticmethod
    def _classify(status: int | None) -> Delivery:
        if status is not None and 200 <= status < 300:
            return Delivery.SENT
        if status == 404:  # the span is not ingested yet: this record later, the others now
            return Delivery.RETRY
        if status is None or status in _UNAVAILABLE_STATUSES or status >= 500:
            return Delivery.UNAVAILABLE
        return Delivery.REFUSED


def span_annotation(record: EvaluationRecord) -> dict[str, Any]:
    """The ``context_precision`` span annotation of one evaluation."""
    metadata: dict[str, Any] = {
        "evaluation_span_id": f"{record.evaluation_span_id:016x}",
        "trace_id": f"{record.trace_id:032x}",
        "judge_model": record.judge_model,
        "prompt_version": record.prompt_version,
        "average_precision": record.average_precision,
        "reference": record.reference,
        "data_source": record.data_source,
        "contexts_judged": len(record.verdicts),
        # The verdicts again, where people's labels cannot replace them: Phoenix keeps one document annotation
        # per (name, span, position), so a person's "relevance" label overwrites the judge's.
        "verdicts": list(record.verdicts),
        "judge_kind": record.judge_kind,
    }
    if record.agent_name:
        metadata["agent_name"] = record.agent_name
    return {
        "span_id": f"{record.span_id:016x}",
        "name": n.EVALUATION_NAME,
        "annotator_kind": record.annotator_kind,
        "result": {"score": record.score, "label": record.label, "explanation": record.explanation},
        "metadata": metadata,
        "identifier": n.PHOENIX_ANNOTATION_IDENTIFIER,
    }


def needs_label_annotation(record: EvaluationRecord) -> list[dict[str, Any]]:
    """The ``needs_label`` span annotation of a retrieval drawn at ``calibration_rate`` (none when not drawn)."""
    if not record.needs_label:
        return []
    return [{
        "span_id": f"{record.span_id:016x}",
        "name": n.PHOENIX_NEEDS_LABEL_ANNOTATION_NAME,
        "annotator_kind": n.ANNOTATOR_CODE,
        "result": {"score": 1.0, "label": "yes",
                   "explanation": "drawn uniformly at calibration_rate: label its documents (relevance, HUMAN)"},
        "metadata": {"trace_id": f"{record.trace_id:032x}", "evaluation_span_id": f"{record.evaluation_span_id:016x}"},
        "identifier": n.PHOENIX_ANNOTATION_IDENTIFIER,
    }]


def document_annotations(record: EvaluationRecord) -> list[dict[str, Any]]:
    """One ``relevance`` annotation per judged context that has a document recorded at its position."""
    out: list[dict[str, Any]] = []
    for position, relevant in enumerate(record.verdicts[: max(0, record.documents)]):
        result: dict[str, Any] = {
            "score": 1.0 if relevant else 0.0,
            "label": n.LABEL_RELEVANT if relevant else n.LABEL_IRRELEVANT,
        }
        if record.reasons is not None and position < len(record.reasons) and record.reasons[position]:
            result["explanation"] = record.reasons[position]
        out.append(
            {
                "span_id": f"{record.span_id:016x}",
                "name": n.PHOENIX_DOCUMENT_ANNOTATION_NAME,
                "annotator_kind": record.annotator_kind,
                "document_position": position,
                "result": result,
                "metadata": {
                    "evaluation_span_id": f"{record.evaluation_span_id:016x}",
                    "judge_model": record.judge_model,
                },
            }
        )
    return out
