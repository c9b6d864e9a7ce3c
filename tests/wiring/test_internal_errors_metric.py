"""``context_precision.internal_errors``: what the error boundary counted, exported in process and by ``serve``."""

from __future__ import annotations

import re
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import Sum

import cp_observe
from cp_observe import _internal
from cp_observe import _names as n
from cp_observe.testing import FakeJudge
from tests.conftest import Otel
from tests.serve_support import OtlpSink, get, start_service


def _errors(otel: Otel) -> dict[tuple[str, str], Any]:
    return {(p.attributes[n.ERROR_KIND], p.attributes[n.ERROR_SITE]): p.value
            for p in otel.metric_points(n.METRIC_INTERNAL_ERRORS)}


def _metric(otel: Otel) -> Any:
    data = otel.metrics.get_metrics_data()
    assert data is not None
    return next(m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
                if m.name == n.METRIC_INTERNAL_ERRORS)


def test_a_raising_context_extractor_is_exported_as_a_user_error(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """A user callback that raises shows up as kind=user, site=context_extractor on the collection after it."""
    processor = otel.processor(cp_observe_judge)

    @cp_observe.agent(name="rag", context_extractor=lambda r: r["sources"])
    def rag(question: str) -> dict[str, str]:
        return {"answer": "Paris"}

    assert rag("capital?") == {"answer": "Paris"}
    assert processor.force_flush(10_000)
    assert _errors(otel) == {("user", "context_extractor"): 1}
    metric = _metric(otel)
    assert isinstance(metric.data, Sum) and metric.data.is_monotonic and metric.unit == "{error}"
    rag("again?")
    assert _errors(otel) == {("user", "context_extractor"): 2}


def test_every_kind_is_exported_and_a_site_keeps_its_colons(otel: Otel, production_errors: None) -> None:
    """Internal, user and host failures are told apart; the kind ends at the first ":" of the count's key."""
    otel.processor(FakeJudge())
    _internal.report_internal_error("emit:span", RuntimeError("ours"))
    _internal.report_user_error("redact", ValueError("theirs"))
    _internal.report_host_error("get_content()", ValueError("the host's"))
    _internal.report_host_error("get_content()", ValueError("the host's"))
    assert _errors(otel) == {("internal", "emit:span"): 1, ("user", "redact"): 1, ("host", "get_content()"): 2}


def test_no_failure_no_point(otel: Otel, cp_observe_judge: FakeJudge) -> None:
    """With nothing counted the counter has no point (no zero series per possible site)."""
    otel.processor(cp_observe_judge)
    assert _errors(otel) == {}


def test_configure_exports_it_too(otel: Otel) -> None:
    """The processor configure() builds registers the counter on the meter provider it is given."""
    processor = cp_observe.configure("lexical", tracer_provider=otel.tracer_provider,
                                     meter_provider=otel.meter_provider, logger_provider=otel.logger_provider)
    assert processor is not None
    otel.shut_down_after(processor)
    _internal.report_user_error("query", ValueError("theirs"))
    assert _errors(otel) == {("user", "query"): 1}


@pytest.mark.usefixtures("serve_state_restored")
def test_serve_shows_it_on_metrics(sink: OtlpSink, cp_observe_judge: FakeJudge) -> None:
    """``cp-observe serve``'s /metrics on the admin port has context_precision_internal_errors_total{kind,site}."""
    _internal.report_host_error("get_content()", ValueError("the host's"))
    with start_service(sink, cp_observe_judge) as service:
        status, metrics = get(f"http://127.0.0.1:{service.port('admin')}/metrics")
    assert status == 200
    pattern = r'^context_precision_internal_errors_total\{[^}]*kind="host",[^}]*site="get_content\(\)"[^}]*\} 1\.0$'
    assert re.search(pattern, metrics, re.MULTILINE), metrics
