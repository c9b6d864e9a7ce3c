"""The demo's closing verdict: its arithmetic is the shipped rules', and the default run ends with it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

from cp_observe.demo import _alerts
from cp_observe.demo._alerts import Window, report
from tests.deploy_support import DETECTION_GENERATOR, alert_rules


def test_constants_are_the_shipped_rules() -> None:
    """z, the MAPDrop line, the regression's margin, z and variance floor, and the minimum are the rules' own."""
    drop = " ".join(alert_rules()["ContextPrecisionMAPDrop"]["expr"].split())
    assert f"+ {_alerts.Z} *" in drop and f"< {_alerts.DROP_THRESHOLD} and" in drop
    assert f">= {_alerts.MINIMUM}" in drop
    assert f"< {_alerts.MINIMUM}" in alert_rules()["ContextPrecisionLowVolume"]["expr"]
    spec = importlib.util.spec_from_file_location("detection_rules", DETECTION_GENERATOR)
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert (generator.MARGIN, generator.LEVEL_SD, generator.Z, generator.VAR_FLOOR, generator.MIN_COUNT) == (
        _alerts.REGRESSION_MARGIN, _alerts.REGRESSION_LEVEL_SD, _alerts.REGRESSION_Z, _alerts.VAR_FLOOR,
        _alerts.MINIMUM)


def test_window_matches_the_recording_rules_formula() -> None:
    """SE = sqrt((squares/n - mean^2) / (n - 1))."""
    window = Window.of([1.0, 0.0, 1.0, 0.0])
    assert window.count == 4 and window.mean == 0.5
    assert abs(window.stderr - (0.25 / 3) ** 0.5) < 1e-12


def test_report_names_the_alerts_the_evidence_supports() -> None:
    """A clear drop fires both MAP alerts; a thin degraded phase only says LowVolume; a small one fires none."""
    healthy = [1.0, 0.8] * 15
    assert "ContextPrecisionMAPDrop" in report(healthy, [0.0, 0.2] * 12)[-1]
    assert "ContextPrecisionMAPRegression" in report(healthy, [0.0, 0.2] * 12)[-1]
    thin = report(healthy, [0.0] * 5)[-1]
    assert "ContextPrecisionLowVolume" in thin and "MAPDrop" not in thin
    assert report(healthy, [1.0, 0.78] * 12)[-1].endswith("none")
    spread = report([1.0] * 30, [0.0, 1.0] * 10 + [0.0])[-1]  # mean 0.48 but SE 0.11: not shown below 0.5
    assert "MAPDrop" not in spread and "MAPRegression" in spread


def test_default_demo_run_ends_with_a_degraded_phase_and_the_verdict() -> None:
    """`cp-observe demo` with no options prints the drop, its interval and the alerts that would fire."""
    out = subprocess.run([sys.executable, "-m", "cp_observe.cli", "demo", "--quiet"], capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "the retriever is degraded" in out.stdout
    match = re.search(r"drop (\d\.\d\d), 95% interval (-?\d\.\d\d) \.\. (\d\.\d\d)", out.stdout)
    assert match, out.stdout
    low, high = float(match.group(2)), float(match.group(3))
    assert 0 < low <= float(match.group(1)) <= high
    assert re.search(r"alerts that would fire: ContextPrecisionMAPDrop \(99% upper bound 0\.\d\d < 0\.5\)",
                     out.stdout), out.stdout  # fmt: skip
