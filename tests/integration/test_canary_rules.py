"""The canary rules: the shipped file is the generator's output, other labels regenerate cleanly, Python agrees."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from cp_observe._config._segments import segment_labels
from cp_observe.demo import _alerts, _canary
from tests.deploy_support import CANARY_RULES_FILE, CANARY_SEGMENT, PROMETHEUS_DIR, PROMTOOL, run_promtool

GENERATOR = PROMETHEUS_DIR / "canary_rules.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("canary_rules", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_file_is_the_generators_output() -> None:
    """rules/context_precision_canary.rules.yml is exactly what the generator prints for retriever.version."""
    printed = subprocess.run([sys.executable, str(GENERATOR), "--segment", CANARY_SEGMENT], capture_output=True,
                             text=True, check=True).stdout
    assert printed == CANARY_RULES_FILE.read_text(encoding="utf-8")


@pytest.mark.parametrize("attribute", ["retriever.version", "tenant.tier", "index-build", "flag/x"])
def test_the_generator_names_labels_as_the_library_does(attribute: str) -> None:
    """The generator's label name is the one the segments setting gives (so the rules read the emitted label)."""
    assert _generator().label_name(attribute) == segment_labels(attribute)[0][1]


def test_python_verdict_uses_the_rules_constants() -> None:
    """The demo's and the benchmark's arithmetic has the generator's z, margin and minimum count."""
    generator = _generator()
    assert (_alerts.Z, _canary.MARGIN, _canary.MIN_COUNT) == (generator.Z, generator.MARGIN, generator.MIN_COUNT)


def test_python_verdict_on_the_promtool_edges() -> None:
    """The promtool scenarios' edges, in Python: 0.06 below fires, 0.04 below does not, thin windows never do."""
    v1 = _canary.Sums.of([0.8] * 300)
    for worse, fires in ((0.74, True), (0.76, False)):
        v2 = _canary.Sums.of([worse] * 300)
        assert _canary.verdict(v2, v1 + v2).fires is fires
    thin = _canary.Sums.of([0.0] * 15)
    assert not _canary.verdict(thin, v1 + thin).fires
    assert _canary.verdict(v1, v1, baseline=0.9).fires and not _canary.verdict(v1, v1, baseline=0.84).fires


def test_python_verdict_keeps_the_stages_apart() -> None:
    """The promtool scenario 'stages kept apart', in Python: per stage quiet; pooled, v2 would fire (wrongly)."""
    retrieval = {"v1": _canary.Sums.of([0.6] * 300), "v2": _canary.Sums.of([0.6] * 300)}
    rerank = {"v1": _canary.Sums.of([0.95] * 300), "v2": _canary.Sums.of([0.95] * 30)}
    for stage in (retrieval, rerank):
        assert not any(_canary.verdict(stage[v], stage["v1"] + stage["v2"]).fires for v in ("v1", "v2"))
    pooled = {v: retrieval[v] + rerank[v] for v in ("v1", "v2")}
    assert _canary.verdict(pooled["v2"], pooled["v1"] + pooled["v2"]).fires


def test_the_rules_group_by_stage() -> None:
    """Every aggregation of the canary rules keeps ``stage``, and every vector match is on it (no pooling)."""
    import re

    text = _generator().rules("tenant.tier", 0.7)
    groupings = re.findall(r"sum by \(([^)]*)\)", text)
    matches = re.findall(r"on \(([^)]*)\)", text)
    assert groupings and matches
    assert all("stage" in g.split(", ") for g in groupings + matches), (groupings, matches)


@pytest.mark.parametrize("baseline", [None, 0.7])
@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (scripts/install-system-deps.sh)")
def test_rules_for_another_label_pass_promtool(tmp_path: Path, baseline: float | None) -> None:
    """Rules regenerated for tenant.tier (with and without a constant baseline) pass promtool check rules."""
    text = _generator().rules("tenant.tier", baseline)
    assert "tenant_tier" in text and "retriever_version" not in text
    path = tmp_path / "canary.rules.yml"
    path.write_text(text, encoding="utf-8")
    proc = run_promtool("check", "rules", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_deploy_readme_states_the_canary_parameters() -> None:
    """deploy/README.md's alert table row for the canary alert gives the generator's window, margin, z and for."""
    import re

    from tests.deploy_support import DEPLOY, load_yaml

    generator = _generator()
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `ContextPrecisionVariantRegression`"))
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip("|"))][2:]
    (alert,) = [r for g in load_yaml(CANARY_RULES_FILE)["groups"] for r in g["rules"] if "alert" in r]
    assert cells == [generator.WINDOW, str(generator.MARGIN), f"z = {generator.Z}", str(generator.MIN_COUNT),
                     alert["for"], alert["labels"]["severity"]]
    assert "#runbook-contextprecisionvariantregression" in alert["annotations"]["runbook_url"]
    assert "### Runbook: ContextPrecisionVariantRegression" in readme
