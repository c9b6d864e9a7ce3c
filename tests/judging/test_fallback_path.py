"""The judge tests of ``tests/judging/test_llm_judge.py`` and the fault matrix and circuit of
``tests/processing/test_judge_faults.py``, run again on the litellm fallback path.

Their judges are ``openai/`` models, which now take the lean path; here every judge built takes
``litellm.acompletion`` instead (the route is refused, exactly as for a provider the lean path does not cover),
so retries, ``Retry-After``, timeouts, connection resets, the structured-output fallback, repair, the circuit and
key scrubbing stay tested on both paths. litellm itself is real, over HTTP to the loopback server.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cp_observe._judging import _llm_judge
from tests.judging.test_llm_judge import (  # noqa: F401 - collected again here, on the fallback path
    server,
    test_api_key_never_appears_in_errors,
    test_connection_reset_mid_body_is_retried,
    test_fenced_json_is_parsed,
    test_json_schema_refusal_falls_back_to_json_object,
    test_judge_that_never_aligns_raises,
    test_llama_cpp_style_refusal_as_500_falls_back,
    test_llm_reason_option_costs_one_more_call,
    test_malformed_json_gets_one_corrective_retry,
    test_one_call_for_all_contexts,
    test_rate_limited_then_success_honours_retry_after,
    test_server_errors_exhaust_retries,
    test_shifted_indices_are_never_scored_shifted,
    test_timeout_is_retried_then_fails,
    test_too_few_verdicts_are_repaired_per_context,
)
from tests.processing.test_judge_faults import (  # noqa: F401 - collected again here, on the fallback path
    _litellm_worker_hygiene,
    litellm_ready,
    test_circuit_opens_skips_probes_once_and_closes,
    test_fault_matrix_under_load,
)


@pytest.fixture(autouse=True)
def _litellm_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every judge built in these tests takes litellm's path, and says so."""
    monkeypatch.setattr(_llm_judge, "route", lambda *args, **kwargs: None)
    yield
    assert _llm_judge.route(  # the patch was in force for the whole test
        "openai/x", "http://127.0.0.1:9/v1", "k", {}) is None


def test_judges_here_take_the_litellm_path() -> None:
    """The judges the re-run tests build (openai/ models with a key and endpoint) take litellm's path here."""
    from cp_observe import LLMJudge

    assert LLMJudge("openai/judge-test", api_base="http://127.0.0.1:9/v1", api_key="sk-test-key-0000").path == "litellm"
