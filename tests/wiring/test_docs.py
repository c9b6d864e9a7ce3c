"""The docs stay true: every setting, variable, metric and emitted attribute is documented where it moved.

README.md keeps what a first visit needs (the two commands, the quick start, links into the site); the
reference moved to the documentation site (docs/), so these checks read the pages it now lives on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cp_observe import _names as n
from cp_observe._config._settings import Settings
from tests.docs_support import page

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SETTINGS = page("reference/settings.md")
EMITTED = page("reference/emitted.md")
ZERO_CODE = page("how-to/zero-code.md")


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_and_its_variable_is_documented(name: str) -> None:
    """Each Settings field appears with its CP_OBSERVE_ variable in the settings reference."""
    assert f"| `{name}` | `CP_OBSERVE_{name.upper()}` |" in SETTINGS


@pytest.mark.parametrize(
    "name",
    [
        n.METRIC_SCORE, n.METRIC_EVALUATIONS, n.METRIC_SAMPLED, n.METRIC_VERDICTS, n.METRIC_JUDGE_DURATION,
        n.METRIC_TOKEN_USAGE, n.METRIC_JUDGE_COST, n.METRIC_QUEUE_DEPTH, n.METRIC_INTERNAL_ERRORS,
    ],
)
def test_every_metric_is_documented(name: str) -> None:
    """Each instrument name appears in the metrics table of "What it emits" and in the names reference."""
    assert f"`{name}" in EMITTED
    assert f"| `{name}` |" in page("reference/names.md")


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
    """Each attribute a user would query appears in "What it emits"."""
    assert name in EMITTED


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
    """The Zero-code guide documents each convention the readers recognise."""
    assert ZERO_CODE.startswith("# Zero-code")
    assert name in ZERO_CODE


def test_the_readme_links_into_the_site_and_every_link_resolves() -> None:
    """README links to the tutorial and the how-to guides, and each relative link names a file that exists."""
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert "docs/tutorial.md" in local and "docs/how-to/zero-code.md" in local
    assert not [link for link in local if not (ROOT / link).exists()]


def test_the_readme_keeps_the_judge_trust_section() -> None:
    """README has the "Can I trust the judge?" section, linking to its guide."""
    section = README.split("\n## Can I trust the judge?", 1)[1].split("\n## ", 1)[0]
    assert "docs/how-to/trust-the-judge.md" in section
