"""Dataset records uploaded as a Phoenix dataset, through Phoenix's REST API.

``POST {url}/v1/datasets/upload?sync=true`` with a JSON body (``action``, ``name``, ``description``,
``inputs``, ``outputs``, ``metadata``, ``span_ids``: one entry per example, as Phoenix 8 and later document it;
checked against ``phoenix/server/api/routers/v1/datasets.py`` of arize-phoenix 20). Each example's input is
the query, its output the stored answer and contexts (what production retrieved, in rank order), its
metadata the verdicts, reasons, score, data source, segments, trace and span ids. ``span_ids`` links each
example to its scored span when that span is in Phoenix. ``action=create`` refuses an existing name (409),
``append`` adds to it.

The API key comes from the environment only (``CP_OBSERVE_PHOENIX_API_KEY``, else ``PHOENIX_API_KEY``), is
sent as ``Authorization: Bearer`` and never printed. Errors name the URL and Phoenix's answer.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cp_observe._config._settings import Settings
from cp_observe._names import ENV_PHOENIX_API_KEY
from cp_observe._traces._apis import get_json
from cp_observe._traces._source import ReplayInputError
from cp_observe.dataset._record import Record

__all__ = ["Uploaded", "phoenix_examples", "upload_dataset"]


@dataclass(frozen=True)
class Uploaded:
    """What Phoenix answered: the dataset and version ids and how many examples it created."""

    dataset_id: str
    version_id: str
    created: int


def phoenix_examples(records: Sequence[Record]) -> dict[str, list[Any]]:
    """The ``inputs``, ``outputs``, ``metadata`` and ``span_ids`` lists of the upload body."""
    inputs, outputs, metadata, span_ids = [], [], [], []
    for record in records:
        inputs.append({"query": record.query})
        outputs.append({"answer": record.answer, "contexts": list(record.contexts)})
        meta: dict[str, Any] = {
            "score": record.score, "average_precision": record.average_precision, "verdicts": list(record.verdicts),
            "reasons": list(record.reasons), "reference": record.reference, "data_source": record.data_source,
            "segments": dict(record.segments), "trace_id": record.trace_id, "span_id": record.span_id,
            "judge_model": record.judge_model, "time_unix_nano": record.time_unix_nano,
        }
        if record.stage is not None:
            meta["stage"] = record.stage
        if record.rerank is not None:
            meta["rerank"] = dict(record.rerank)
        metadata.append(meta)
        span_ids.append(record.span_id or None)
    return {"inputs": inputs, "outputs": outputs, "metadata": metadata, "span_ids": span_ids}


def upload_dataset(url: str, name: str, records: Sequence[Record], *, description: str = "",
                   append: bool = False, timeout_s: float = 60.0) -> Uploaded:
    """Upload ``records`` as the Phoenix dataset ``name``; raises ``ReplayInputError`` naming what failed."""
    if not name.strip():
        raise ReplayInputError("--phoenix-dataset needs a name")
    if not records:
        raise ReplayInputError(f"nothing to upload to Phoenix dataset {name!r}: no evaluation was selected")
    endpoint = f"{url.rstrip('/')}/v1/datasets/upload?{urllib.parse.urlencode({'sync': 'true'})}"
    body = {"action": "append" if append else "create", "name": name, "description": description,
            **phoenix_examples(records)}
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    secret = Settings.resolve({}).phoenix_api_key  # the one field table: CP_OBSERVE_PHOENIX_API_KEY
    key = (secret.get_secret_value() if secret else None) or os.environ.get(ENV_PHOENIX_API_KEY)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    answer = get_json(endpoint, timeout_s, data=json.dumps(body).encode("utf-8"), headers=headers,
                      hints={409: " (the dataset exists: use --phoenix-append)"})
    try:
        data = answer["data"]
        return Uploaded(str(data["dataset_id"]), str(data["version_id"]), int(data["num_created_examples"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ReplayInputError(f"{endpoint}: not Phoenix's upload answer: {exc!r}") from None
