"""``cp-observe dataset --phoenix-dataset``: the selection uploaded to a real Phoenix, read back through its API."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from cp_observe import _names as n
from cp_observe import load_dataset
from tests.dataset_support import canary_cases, write_traces
from tests.phoenix_support import INSTALL_HINT, PHOENIX_EXECUTABLE, PhoenixServer, phoenix_server

pytestmark = pytest.mark.skipif(not PHOENIX_EXECUTABLE.exists(), reason=INSTALL_HINT)
CLI = [sys.executable, "-m", "cp_observe.cli", "dataset"]


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """One Phoenix server for the module."""
    with phoenix_server(tmp_path_factory.mktemp("phoenix")) as server:
        yield server


def _dataset(phoenix: PhoenixServer, name: str) -> tuple[dict[str, object], list[dict[str, object]]]:
    found = phoenix.get_json("/v1/datasets", name=name)["data"]
    assert len(found) == 1, found
    examples = phoenix.get_json(f"/v1/datasets/{found[0]['id']}/examples")["data"]["examples"]
    return found[0], examples


def test_the_selection_is_a_phoenix_dataset_read_back_through_the_api(phoenix: PhoenixServer,
                                                                        tmp_path: Path) -> None:
    """Every selected evaluation is one example: query in, answer and contexts out, verdicts and ids as metadata."""
    traces, out = tmp_path / "traces.jsonl", tmp_path / "v2.jsonl"
    write_traces(traces, canary_cases())
    done = subprocess.run([*CLI, str(traces), "--segment", "retriever.version=v2", "--max-score", "0.5", "-o", str(out),
                           "--phoenix-dataset", "v2 failures", "--phoenix-url", phoenix.url,
                           "--description", "worse chunking"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr + phoenix.log_tail()
    written = load_dataset(out)
    assert len(written) == 9 and "uploaded 9 examples to Phoenix dataset 'v2 failures'" in done.stdout
    dataset, examples = _dataset(phoenix, "v2 failures")
    assert dataset["description"] == "worse chunking" and dataset["example_count"] == 9
    by_query = {e["input"]["query"]: e for e in examples}
    assert set(by_query) == {item["input"] for item in written}
    for item in written:
        example = by_query[item["input"]]
        assert example["output"] == {"answer": item["answer"], "contexts": item["contexts"]}
        meta = example["metadata"]
        assert meta["verdicts"] == item["verdicts"] and meta["score"] == item["score"]
        assert meta["segments"] == {"retriever_version": "v2"} and meta["data_source"] == "docs"
        assert (meta["trace_id"], meta["span_id"]) == (item["trace_id"], item["span_id"])
        assert meta["stage"] == item.get("stage")


def test_an_existing_name_is_refused_unless_appended(phoenix: PhoenixServer, tmp_path: Path) -> None:
    """Creating a dataset twice fails with Phoenix's answer (exit 1, file still written); --phoenix-append adds."""
    traces = tmp_path / "traces.jsonl"
    write_traces(traces, canary_cases())
    args = [*CLI, str(traces), "--worst", "3", "-o", str(tmp_path / "w.jsonl"), "--phoenix-dataset", "worst",
            "--phoenix-url", phoenix.url]
    first = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    again = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 1 and "HTTP 409" in again.stderr and "--phoenix-append" in again.stderr, again.stderr
    assert len(load_dataset(tmp_path / "w.jsonl")) == 3
    appended = subprocess.run([*CLI, str(traces), "--data-source", "faq", "-o", str(tmp_path / "faq.jsonl"),
                               "--phoenix-dataset", "worst", "--phoenix-url", phoenix.url, "--phoenix-append"],
                              capture_output=True, text=True, timeout=60, check=False)
    assert appended.returncode == 0, appended.stderr
    assert "uploaded 1 examples" in appended.stdout
    _, examples = _dataset(phoenix, "worst")
    assert sorted(e["input"]["query"] for e in examples) == sorted(
        [*(i["query"] for i in load_dataset(tmp_path / "w.jsonl")), "unversioned"])
    assert all(isinstance(e["metadata"]["verdicts"], list) for e in examples)


def test_an_unreachable_phoenix_is_an_error_not_a_silent_loss(tmp_path: Path) -> None:
    """A Phoenix that does not answer: exit 1 naming the URL; the JSON lines are still written."""
    from tests.phoenix_support import free_port

    traces = tmp_path / "traces.jsonl"
    write_traces(traces, canary_cases())
    url = f"http://127.0.0.1:{free_port()}"
    done = subprocess.run([*CLI, str(traces), "-o", str(tmp_path / "all.jsonl"), "--phoenix-dataset", "x",
                           "--phoenix-url", url], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and f"{url}/v1/datasets/upload" in done.stderr and "unreachable" in done.stderr
    assert len(load_dataset(tmp_path / "all.jsonl")) == 25


@pytest.mark.timeout(600)  # a demo run into Phoenix (180 s at most) and Phoenix's ingestion lag
def test_a_phoenix_project_is_an_input_and_the_selection_goes_back_as_a_dataset(phoenix: PhoenixServer,
                                                                                 tmp_path: Path) -> None:
    """The demo scored live into a real Phoenix; ``dataset --phoenix URL --project P`` reads its evaluations back
    (the live APs, with query, contexts and answer) and uploads the failing ones as a dataset of the same Phoenix."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CP_OBSERVE_"))}
    env.update(OTEL_RESOURCE_ATTRIBUTES="openinference.project.name=dataset-demo", OTEL_BSP_SCHEDULE_DELAY="50")
    demo = subprocess.run([sys.executable, "-m", "cp_observe.cli", "demo", "--turns", "12", "--degrade-after", "6",
                           "--quiet", "--otlp", phoenix.url], capture_output=True, text=True, timeout=180, check=False,
                          env=env)
    assert demo.returncode == 0, demo.stderr[-2000:]
    # 12 retrieval-stage evaluations, one per turn, and one rerank-stage evaluation per turn whose documents the
    # demo's reranker reordered (one that keeps the order is not scored): the demo's summary says how many.
    found = re.search(r"over (\d+) reranked turns", demo.stdout)
    reranked = int(found.group(1)) if found is not None else 0
    assert found is not None or "the reranker reordered no scored turn" in demo.stdout, demo.stdout
    spans = phoenix.wait_for_spans("dataset-demo", lambda s: sum(
        x["name"] == "evaluation context_precision" for x in s) >= 12 + reranked)
    evaluations = [span for span in spans if span["name"] == "evaluation context_precision"]
    stages = Counter(str(span["attributes"].get(n.CP_STAGE)) for span in evaluations)
    assert stages == Counter({n.STAGE_RETRIEVAL: 12, n.STAGE_RERANK: reranked}), stages  # a zero count: no key
    live = {span["parent_id"]: float(span["attributes"][n.CP_AVERAGE_PRECISION]) for span in evaluations}
    assert len(live) == 12 + reranked  # each evaluation scored its own span: the retriever's or the reranker's
    out = tmp_path / "all.jsonl"
    done = subprocess.run([*CLI, "--phoenix", phoenix.url, "--project", "dataset-demo", "-o", str(out)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    items = load_dataset(out)
    assert {i["span_id"]: i["average_precision"] for i in items} == live
    assert all(i["query"] and i["contexts"] and i["answer"] for i in items)
    failing = sorted(ap for ap in live.values() if round(ap, 2) <= 0.5)
    assert failing, sorted(live.values())
    done = subprocess.run([*CLI, "--phoenix", phoenix.url, "--project", "dataset-demo", "--max-score", "0.5",
                           "-o", str(tmp_path / "failing.jsonl"), "--phoenix-dataset", "demo failures"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    _, examples = _dataset(phoenix, "demo failures")
    assert sorted(e["metadata"]["average_precision"] for e in examples) == failing

