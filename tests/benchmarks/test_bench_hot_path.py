"""The hot-path benchmark's own machinery: its hand-written baselines record what the decorators record."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "request_path" / "bench_hot_path.py"


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    """benchmarks/request_path/bench_hot_path.py imported as a module (it is a script, not a package)."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_hot_path", BENCH)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_hot_path"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH.parent))
        sys.modules.pop("bench_hot_path", None)


def _importable(bench: ModuleType, group: str, payload: str) -> bool:
    try:
        bench.payload_value(group, payload)
    except ImportError:
        return False
    return True


def test_wrapper_records_the_attributes_the_decorators_record(bench: ModuleType, otel: Any) -> None:
    """For every shape whose classes are installed here, the baseline's spans equal @cp_observe's but its flag."""
    shapes = [(g, p) for g, p in bench.parse_shapes(None) if g not in ("stream", "rerank") and _importable(bench, g, p)]
    assert {("retrieve", "str"), ("retrieve", "dict"), ("agent", "chat"), ("turn", "str")} <= set(shapes)
    lines = bench.same_content(shapes, bench._pipeline(None), bench._pipeline(None))
    assert len(lines) == len(shapes)
    assert all(line.startswith("same ") for line in lines), lines


def test_same_content_reports_a_wrapper_that_records_less(bench: ModuleType, otel: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A baseline that drops the metadata is reported as different, naming the attribute."""
    monkeypatch.setitem(bench.DOCUMENTS, "dict", _content_only)
    lines = bench.same_content([("retrieve", "dict")], bench._pipeline(None), bench._pipeline(None))
    assert lines[0].startswith("DIFFERENT retrieve/dict")
    assert "retrieval.documents.0.document.metadata" in lines[0]


def _content_only(result: list[dict[str, Any]]) -> dict[str, Any]:
    attributes: dict[str, Any] = {"context_precision.context.count": len(result)}
    for i, doc in enumerate(result):
        attributes[f"retrieval.documents.{i}.document.content"] = doc["page_content"]
    return attributes


def test_shapes_option_selects_groups_payloads_and_pairs(bench: ModuleType) -> None:
    """--shapes takes a group, group:payload or a bare payload (every group having it); unknown names raise."""
    assert bench.parse_shapes("turn") == [("turn", "str")]
    assert bench.parse_shapes("agent:chat,retrieve:haystack") == [("retrieve", "haystack"), ("agent", "chat")]
    assert bench.parse_shapes("dict") == [("retrieve", "dict"), ("agent", "dict")]
    with pytest.raises(ValueError, match="matches no shape"):
        bench.parse_shapes("retrieve:chat")


def test_peer_description_names_what_is_missing(bench: ModuleType) -> None:
    """A peer's spans holding the texts but no metadata are described as such, and not as complete."""
    import _common as c
    import _peers

    provider = TracerProvider()
    sink = c.ListSink()
    provider.add_span_processor(sink)
    with provider.get_tracer("t").start_as_current_span("peer") as span:
        span.set_attribute("output.value", json.dumps(c.CONTEXTS))
    assert _peers.describe("retrieve", "dict", sink.spans) == (
        "records content; not metadata (JSON of the whole return value in output.value)", False)
    assert _peers.describe("retrieve", "str", sink.spans)[1] is True
    assert _peers.describe("agent", "str", sink.spans) == ("records no returned content", False)
