"""People's labels read from a real Arize Phoenix 20.26.1, posted there with Phoenix's own client.

The demo runs as a user runs it (``--otlp`` at Phoenix, ``CP_OBSERVE_PHOENIX_URL`` set, the lexical judge,
``CP_OBSERVE_CALIBRATION_RATE=0.5``). Then a person's labels go in through
``phoenix.client.Client().spans.add_document_annotation`` (run in Phoenix's own venv), and
``cp-observe calibrate --phoenix`` must find: the drawn retrievals marked ``needs_label``; every readable
``HUMAN`` ``relevance`` label compared with the judge's verdict at its position (the one Phoenix shows is then
the person's: it keeps one annotation per name, span and position); an unreadable label listed; other
annotation names ignored; and the figures equal a hand computation.

Needs ``.venv-phoenix`` (``scripts/install-phoenix.sh``); without it the module is skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cp_observe import _names as n
from cp_observe._judging._calibration import needs_label
from cp_observe._judging._map import average_precision
from cp_observe._judging._ppi import ppi_mean
from tests.phoenix_support import INSTALL_HINT, PHOENIX_EXECUTABLE, PHOENIX_VENV, PhoenixServer, phoenix_server

pytestmark = [pytest.mark.skipif(not PHOENIX_EXECUTABLE.exists(), reason=INSTALL_HINT), pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "cp-observe-calibrate"
TURNS = 8
RATE = 0.5

_POST = """
import json, sys
from phoenix.client import Client
client = Client(base_url=sys.argv[1])
for item in json.loads(sys.stdin.read()):
    try:
        client.spans.add_document_annotation(sync=True, **item)
    except Exception as exc:
        raise SystemExit(f"{item}: {exc}: {getattr(getattr(exc, 'response', None), 'text', '')}")
"""


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """One Phoenix server for the module, on free loopback ports."""
    with phoenix_server(tmp_path_factory.mktemp("phoenix")) as server:
        yield server


def _scored(phoenix: PhoenixServer, count: int) -> list[dict[str, Any]]:
    """cp-observe's context_precision span annotations, once ``count`` have landed."""
    deadline = time.monotonic() + 60
    while True:
        body = phoenix.get_json(f"/v1/projects/{PROJECT}/span_annotations", identifier=n.PHOENIX_ANNOTATION_IDENTIFIER,
                                limit=1000)
        found = [a for a in body["data"] if a["name"] == n.EVALUATION_NAME]
        if len(found) >= count:
            return body["data"]  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, (len(found), phoenix.log_tail())
        time.sleep(0.5)


@pytest.fixture(scope="module")
def scored(phoenix: PhoenixServer) -> list[dict[str, Any]]:
    """The demo, run into Phoenix with the sink on and half the retrievals drawn for labelling."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_", "PHOENIX_"))}
    env.update({"CP_OBSERVE_PHOENIX_URL": phoenix.url, "CP_OBSERVE_CALIBRATION_RATE": str(RATE),
                "CP_OBSERVE_CAPTURE_CONTENT": "true",
                "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={PROJECT}"})
    done = subprocess.run([sys.executable, "-m", "cp_observe.cli", "demo", "--otlp", phoenix.url, "--judge", "lexical",
                           "--turns", str(TURNS)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
                          check=False)
    assert done.returncode == 0, done.stderr
    phoenix.wait_for_spans(PROJECT, lambda got: sum(s["name"] == n.EVALUATION_SPAN_NAME for s in got) >= TURNS)
    return _scored(phoenix, TURNS)


def _post(phoenix: PhoenixServer, items: list[dict[str, Any]]) -> None:
    done = subprocess.run([str(PHOENIX_VENV / "bin" / "python"), "-c", _POST, phoenix.url], input=json.dumps(items),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def test_drawn_retrievals_carry_a_needs_label_annotation(scored: list[dict[str, Any]]) -> None:
    """Exactly the retrievals the draw picks have Phoenix's needs_label span annotation (and only those)."""
    evaluations = [a for a in scored if a["name"] == n.EVALUATION_NAME]
    marked = {a["span_id"] for a in scored if a["name"] == n.PHOENIX_NEEDS_LABEL_ANNOTATION_NAME}
    drawn = {a["span_id"] for a in evaluations
             if needs_label(int(a["metadata"]["trace_id"], 16), int(a["span_id"], 16), RATE)}
    assert marked == drawn
    assert all(a["result"]["label"] == "yes" for a in scored if a["name"] == n.PHOENIX_NEEDS_LABEL_ANNOTATION_NAME)


def test_labels_posted_with_phoenix_client_are_read_back_and_compared(phoenix: PhoenixServer,
                                                                    scored: list[dict[str, Any]],
                                                                    tmp_path: Path) -> None:
    """calibrate --phoenix: the table, the counted-apart labels and the PPI MAP equal a hand computation."""
    evaluations = sorted((a for a in scored if a["name"] == n.EVALUATION_NAME), key=lambda a: a["span_id"])
    items: list[dict[str, Any]] = []
    pairs: list[tuple[bool, bool]] = []
    labelled: list[tuple[float, float]] = []
    unlabelled: list[float] = []
    for i, annotation in enumerate(evaluations):
        verdicts = [bool(v) for v in annotation["metadata"]["verdicts"]]
        if i % 2:
            unlabelled.append(average_precision(verdicts))
            continue
        human = [not verdicts[0], *verdicts[1:]] if i % 4 == 0 else list(verdicts)
        for position, (verdict, person) in enumerate(zip(verdicts, human, strict=True)):
            pairs.append((verdict, person))
            # One label by score, one by label text only: both forms the Phoenix UI can produce.
            item: dict[str, Any] = {"span_id": annotation["span_id"], "document_position": position,
                                    "annotation_name": "relevance", "annotator_kind": "HUMAN",
                                    "explanation": f"person on {position}"}
            if position == 0:
                item["score"] = 1.0 if person else 0.0
            else:
                item["label"] = "relevant" if person else "irrelevant"
            items.append(item)
        labelled.append((average_precision(human), average_precision(verdicts)))
    items += [
        {"span_id": evaluations[1]["span_id"], "document_position": 0, "annotation_name": "relevance",
         "annotator_kind": "HUMAN", "label": "maybe"},  # unreadable: listed
        {"span_id": evaluations[1]["span_id"], "document_position": 0, "annotation_name": "helpfulness",
         "annotator_kind": "HUMAN", "score": 1.0},  # another name: not a relevance label
    ]
    _post(phoenix, items)
    out = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, "-m", "cp_observe.cli", "calibrate", "--phoenix", phoenix.url, "--project",
                           PROJECT, "--json", str(out), "-o", str(tmp_path / "page.html")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "CP_OBSERVE_"))})
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert figures["labels"] == len(pairs)
    apart = figures["counted_apart"]
    assert (apart["unmatched"], apart["unseen"], apart["unreadable"]) == (0, 0, 1)
    assert "'maybe'" in apart["unreadable_examples"][0]
    [group] = [g for g in figures["groups"] if g["data_source"] != "all data sources"]
    assert group["judge"] == {"model": "lexical", "prompt_version": "none", "kind": "lexical"}
    assert group["table"] == {"tp": sum(j and h for j, h in pairs), "fp": sum(j and not h for j, h in pairs),
                              "fn": sum(h and not j for j, h in pairs), "tn": sum(not j and not h for j, h in pairs)}
    assert group["retrievals"] == TURNS and group["labelled_retrievals"] == len(labelled)
    drawn = sum(1 for i, a in enumerate(evaluations) if i % 2 == 0 and
                needs_label(int(a["metadata"]["trace_id"], 16), int(a["span_id"], 16), RATE))
    assert group["labelled_outside_draw"] == len(labelled) - drawn
    expected = ppi_mean([y for y, _ in labelled], [f for _, f in labelled], unlabelled)
    assert group["corrected_map"]["ppi_plus_plus"]["estimate"] == pytest.approx(expected.estimate)
    assert group["corrected_map"]["ppi_plus_plus"]["low"] == pytest.approx(expected.low)
    if any(j != h for j, h in pairs):
        assert any(d["person_reason"].startswith("person on") for d in group["disagreements"])
