"""The cascade in ``cp-observe serve``, scraped by a real Prometheus: the shipped PromQL's PPI++ MAP, λ and SE equal
``ppi_mean_from_sums`` computed offline from the same evaluations' spans.

The judge is a real ``LLMJudge`` over loopback HTTP (``JudgeServer``), the cheap judge the lexical one. The shipped
recording rules are inlined into one query each (the later rules read the earlier ones) and evaluated at the last
scrape's timestamp over a window that opens just before the scrape taken after a first batch: ``increase`` then
covers exactly the second batch. Prometheus still extrapolates the window's first millisecond, so the figures
agree to a relative 1e-3, not to the last digit.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

import cp_observe
from cp_observe import _names as n
from cp_observe._judging._ppi import PpiSums, ppi_mean_from_sums
from cp_observe.testing import JudgeServer
from tests.deploy_support import PROMETHEUS, RULES_FILE, load_yaml, prometheus_server
from tests.serve_support import EvaluationSpan, OtlpSink, post, start_service

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (run scripts/install-system-deps.sh)"),
]

_WORDS = ["Paris", "capital", "France", "bananas", "potassium", "Spain", "Italy", "tower", "river", "museum"]


def _spans(first: int, count: int) -> bytes:
    """``count`` lone retrievals with varied documents, so both judges' scores vary."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for i in range(first, first + count):
        docs = [" ".join(_WORDS[(i * 7 + k * 3 + j) % len(_WORDS)] for j in range(1 + (i + k) % 3)) + " facts."
                for k in range(4)]
        attributes: dict[str, Any] = {
            n.OPENINFERENCE_SPAN_KIND: n.KIND_RETRIEVER, n.GEN_AI_OPERATION_NAME: n.OPERATION_RETRIEVAL,
            n.GEN_AI_DATA_SOURCE_ID: "kb", n.INPUT_VALUE: f"{_WORDS[i % 3]} {_WORDS[(i * 5) % len(_WORDS)]} {i}",
        }
        for k, doc in enumerate(docs):
            attributes[n.document_attribute(k, "content")] = doc
        with tracer.start_as_current_span("retrieval kb", attributes=attributes):
            pass
    return bytes(encode_spans(list(exporter.get_finished_spans())).SerializeToString())


def _inlined(record: str, window: str) -> str:
    """The shipped recording rule ``record`` as one PromQL expression: earlier rules inlined, windows set."""
    rules = {r["record"]: r["expr"] for g in load_yaml(RULES_FILE)["groups"] for r in g["rules"] if "record" in r}

    def expand(expr: str) -> str:
        for name in sorted(rules, key=len, reverse=True):
            pattern = rf"(?<![\w:]){re.escape(name)}(?![\w:])"
            if re.search(pattern, expr):
                expr = re.sub(pattern, lambda _, name=name: f"({expand(rules[name])})", expr)  # type: ignore[misc]
        return expr

    return expand(rules[record]).replace("[30m]", f"[{window}]")


def _query(prom: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
    with urllib.request.urlopen(f"{prom}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _settled_scrape(prom: str, count: int, timeout: float = 60.0) -> float:
    """The timestamp of a scrape that saw all ``count`` cascade evaluations' sums complete.

    The emitter adds an evaluation's terms one after another, so a scrape between two adds sees them torn; the
    evaluations are all done here, so a scrape taken well after the first one that saw ``count`` is whole.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        first = [t for t, v in _count_samples_or_empty(prom) if v == count]
        if first:
            time.sleep(2.5)  # two more scrapes
            settled = [t for t, v in _count_samples_or_empty(prom) if v == count and t >= first[0] + 1.5]
            assert settled, _count_samples_or_empty(prom)
            return settled[-1]
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never scraped {count} cascade evaluations: {_count_samples_or_empty(prom)}")


def _count_samples_or_empty(prom: str) -> list[tuple[float, float]]:
    raw = _query(prom, f'context_precision_cascade_sums_total{{term="{n.TERM_COUNT}",gen_ai_data_source_id="kb"}}[5m]')
    return [(float(t), float(v)) for t, v in raw[0]["values"]] if raw else []


def _sums(evaluations: list[EvaluationSpan]) -> PpiSums:
    f_all = [e.attributes[n.CP_CASCADE_CHEAP_AP] for e in evaluations]
    pairs = [(e.attributes[n.CP_CASCADE_CHEAP_AP], e.attributes[n.CP_CASCADE_LLM_AP])
             for e in evaluations if n.CP_CASCADE_LLM_AP in e.attributes]
    return PpiSums(
        count=len(f_all), sum_f=math.fsum(f_all), sum_f2=math.fsum(f * f for f in f_all),
        n=len(pairs), sum_y=math.fsum(y for _, y in pairs), sum_y2=math.fsum(y * y for _, y in pairs),
        sum_f_sub=math.fsum(f for f, _ in pairs), sum_f2_sub=math.fsum(f * f for f, _ in pairs),
        sum_fy=math.fsum(f * y for f, y in pairs),
    )


def test_serve_cascade_promql_ppi_equals_the_offline_estimate(tmp_path: Path, sink: OtlpSink) -> None:
    """serve with cheap_judge=lexical and llm_share=0.5: Prometheus's PPI++ mean, λ and SE are the offline ones."""
    first_batch, second_batch = 20, 60
    with JudgeServer() as server:
        judge = cp_observe.LLMJudge("openai/judge-test", api_base=server.url, api_key="sk-test", timeout=5)
        with start_service(sink, judge, cheap_judge="lexical", llm_share=0.5) as service:
            config = {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [{"job_name": "cp-observe-serve",
                                    "static_configs": [{"targets": [f"127.0.0.1:{service.port('admin')}"]}]}],
            }
            with prometheus_server(tmp_path / "prometheus", config) as prom:
                url = f"http://127.0.0.1:{service.port('http')}/v1/traces"
                assert post(url, _spans(0, first_batch))[0] == 200
                assert sink.wait_for(lambda s: len(s.evaluations) >= first_batch, timeout=60)
                baseline = _settled_scrape(prom, first_batch)
                before = list(sink.evaluations)
                assert post(url, _spans(first_batch, second_batch))[0] == 200
                assert sink.wait_for(lambda s: len(s.evaluations) >= first_batch + second_batch, timeout=60)
                end = _settled_scrape(prom, first_batch + second_batch)
                window = f"{round((end - baseline) * 1000) + 1}ms"  # (end - window, end] holds baseline..end
                got = {what: _query(prom, _inlined(f"gen_ai_data_source_id:context_precision_score_ppi:{what}", window),
                                    at=end)
                       for what in ("mean30m", "stderr30m", "lambda30m")}
                calls = server.calls
    second = [e for e in sink.evaluations if e not in before]
    assert len(second) == second_batch and len(before) == first_batch
    assert all(n.CP_CASCADE_CHEAP_AP in e.attributes for e in sink.evaluations)
    judged = sum(1 for e in sink.evaluations if n.CP_CASCADE_LLM_AP in e.attributes)
    assert 0 < judged < first_batch + second_batch and calls == judged
    offline = ppi_mean_from_sums(_sums(second))
    assert 0.0 < offline.lam < 1.0 and offline.labelled >= 2, offline  # the case exercises the tuned weight
    for what, expected in (("mean30m", offline.estimate), ("stderr30m", offline.standard_error),
                           ("lambda30m", offline.lam)):
        assert len(got[what]) == 1, (what, got[what])
        assert got[what][0]["metric"] == {"gen_ai_data_source_id": "kb"}
        assert float(got[what][0]["value"][1]) == pytest.approx(expected, rel=1e-3), what
