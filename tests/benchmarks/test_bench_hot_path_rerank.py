"""The hot-path benchmark's rerank group: @reranker rows paired with @retriever rows under the same pipeline."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "request_path" / "bench_hot_path.py"


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    """benchmarks/request_path/bench_hot_path.py imported as a module (it is a script, not a package)."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_hot_path_rerank", BENCH)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_hot_path_rerank"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH.parent))
        sys.modules.pop("bench_hot_path_rerank", None)


def test_rerank_rows_record_a_reranker_span_against_a_retriever_baseline(bench: ModuleType, otel: Any) -> None:
    """One quick round: each pipeline's @reranker row ran beside its @retriever baseline and got a ratio.

    ``otel`` restores the process-wide runtime afterwards: the benchmark's pipelines install their own.
    """
    shapes = bench.parse_shapes("rerank")
    assert shapes == [("rerank", p) for p in ("no processor", "unsampled", "sampled")]
    pipes = {"": bench._pipeline(None), bench._UNSAMPLED: bench._pipeline(0.0), bench._SAMPLED: bench._pipeline(1.0)}
    try:
        variants = bench.cp_variants(shapes, pipes, bench._pipeline(None))
        rerankers = [v for v in variants if not v.baseline]
        assert len(rerankers) == 6 and all(v.name.startswith("@cp_observe.reranker") for v in rerankers)
        pipes[""].select()
        rerankers[0].fn("q")
        [span] = pipes[""].sink.spans
        assert span.attributes["openinference.span.kind"] == "RERANKER"
        assert span.attributes["reranker.input_documents.0.document.content"] != \
            span.attributes["reranker.output_documents.0.document.content"]
        bench.measure(variants, rounds=1, calls=5, seed=1)
        assert len(bench.rerank_lines(variants)) == 6
    finally:
        for pipe in pipes.values():  # their samplers leave the process-wide runtime with them
            if pipe.processor is not None:
                pipe.processor.shutdown()
