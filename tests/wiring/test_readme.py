"""README.md stays true: every setting, variable, metric and emitted attribute it must document is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from cp_observe import _names as n
from cp_observe._config._settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_and_its_variable_is_documented(name: str) -> None:
    """Each Settings field appears with its CP_OBSERVE_ variable."""
    assert f"`{name}`" in README
    assert f"`CP_OBSERVE_{name.upper()}`" in README


@pytest.mark.parametrize(
    "name",
    [
        n.METRIC_SCORE, n.METRIC_EVALUATIONS, n.METRIC_SAMPLED, n.METRIC_VERDICTS, n.METRIC_JUDGE_DURATION,
        n.METRIC_TOKEN_USAGE, n.METRIC_JUDGE_COST, n.METRIC_QUEUE_DEPTH, n.METRIC_INTERNAL_ERRORS,
    ],
)
def test_every_metric_is_documented(name: str) -> None:
    """Each instrument name appears in the metrics table."""
    assert f"`{name}" in README


@pytest.mark.parametrize(
    "name",
    [
        n.CP_SAMPLED, n.CP_VERDICTS, n.CP_REASONS, n.CP_REFERENCE, n.CP_JUDGE_MODEL, n.CP_AVERAGE_PRECISION,
        n.GEN_AI_EVALUATION_SCORE_VALUE, n.GEN_AI_EVALUATION_SCORE_LABEL, n.GEN_AI_EVALUATION_EXPLANATION,
        n.GEN_AI_DATA_SOURCE_ID, n.GEN_AI_RETRIEVAL_QUERY_TEXT, n.GEN_AI_EVALUATION_RESULT_EVENT,
        n.EVALUATION_SPAN_NAME, n.OPENINFERENCE_SPAN_KIND, n.CP_SCORE,
    ],
)
def test_every_emitted_attribute_is_documented(name: str) -> None:
    """Each attribute a user would query appears in README."""
    assert name in README


def test_the_two_setup_commands_are_there() -> None:
    """The demo and test commands are given, and the scripts exist."""
    root = Path(__file__).resolve().parents[2]
    for command in ("./scripts/demo", "./scripts/test"):
        assert command in README
        assert (root / command).exists()


@pytest.mark.parametrize(
    "name",
    [
        n.KIND_RETRIEVER, n.KIND_RERANKER, n.OPERATION_VECTOR_DB_RETRIEVE, n.TRACELOOP_ENTITY_OUTPUT,
        n.DB_QUERY_RESULT_EVENT, n.OPERATION_RETRIEVAL, n.GEN_AI_RETRIEVAL_DOCUMENTS, n.GEN_AI_OUTPUT_MESSAGES,
        n.LLM_OUTPUT_MESSAGES, "CP_OBSERVE_SKIP_FRAMEWORKS", "scripts/frameworks.lock",
    ],
)
def test_zero_code_section_names_every_convention_read(name: str) -> None:
    """The Zero-code section documents each convention the readers recognise."""
    assert "## Zero-code" in README
    assert name in README
