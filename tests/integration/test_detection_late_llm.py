"""The drop rules with --llm-offset in promtool, on cascade streams whose LLM-judged scores arrive late."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import yaml

from tests.deploy_support import DETECTION_GENERATOR, needs_promtool, run_promtool

pytestmark = needs_promtool


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("detection_rules", DETECTION_GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_llm_offset_keeps_a_cheap_judge_move_quiet_and_a_late_llm_drop_fires(tmp_path: Path) -> None:
    """Rules generated with --llm-offset equal to the LLM's lateness, in promtool: the cheap judge's scores dropping
    alone pages no one, a drop only the LLM sees fires once its scores are in (the expected alerts are the
    generator's arithmetic, which without the offset has the cheap judge's move fire)."""
    gen = _generator()
    (tmp_path / "late.rules.yml").write_text(gen.rules(llm_offset=gen.LATE_MIN), encoding="utf-8")
    scenario = gen.late_scenarios(gen.LATE_MIN, "late.rules.yml")
    (tmp_path / "late.test.yml").write_text(scenario, encoding="utf-8")
    checks = yaml.safe_load(scenario)["tests"][0]["alert_rule_test"]
    assert [c["eval_time"] for c in checks if c["exp_alerts"]]  # the scenario expects a firing, not only silence
    assert "cascade_late_cheap_moves" not in scenario.split("alert_rule_test:", 1)[1]
    proc = run_promtool("test", "rules", "late.test.yml", cwd=tmp_path)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
