"""``cp-observe deploy backfill``: the passes it plans from the shipped rules, and its errors.

The live run (promtool and a real Prometheus, eight days of raw history) is
``tests/integration/test_detection_prometheus.py``, whose alert reads the backfilled records' baseline.
"""

from __future__ import annotations

import pytest
import yaml

from cp_observe import cli
from cp_observe._errors import CpObserveError
from cp_observe.deploy._backfill import plan, shipped_rule_files


def test_the_shipped_rules_backfill_in_one_pass_per_window_shortest_first() -> None:
    """The first pass reads the raw counters; each later pass holds one window's records, which read only the
    window of the pass before; the detection's and the canary's window records are all there."""
    texts = shipped_rule_files()
    passes = plan(texts)
    assert [p.window for p in passes] == ["5m", "10m", "20m", "40m", "80m", "160m", "320m", "640m", "1280m"]
    assert [p.raw for p in passes] == [True] + [False] * 8
    # window records: the raw counters' increase or two recorded halves (a long window's statistics carry their
    # window as a static label too, and are computed live)
    shipped = {(r["record"], r["labels"]["window"]) for t in texts for g in yaml.safe_load(t)["groups"]
               for r in g["rules"] if str(r.get("record", "")).endswith(":window") and "window" in r.get("labels", {})
               and ("increase(" in r["expr"] or " offset " in r["expr"])}
    assert ("gen_ai_data_source_id_stage_window:context_precision_score_count:window", "80m") not in shipped
    planned = set()
    for before, step in zip([None, *passes], passes, strict=False):
        rules = yaml.safe_load(step.text)["groups"][0]["rules"]
        planned |= {(r["record"], r["labels"]["window"]) for r in rules}
        for rule in rules:
            assert ("increase(" in rule["expr"]) == step.raw
            if before is not None:
                assert f'{{window="{before.window}"}}' in rule["expr"]
    assert planned == shipped
    assert not any(r.endswith((":baseline", ":drop_z")) for r, _ in planned)  # computed live from the records


def test_records_that_read_a_window_no_pass_records_are_refused() -> None:
    """A window record reading a window nothing records cannot be ordered: a clear error, not a partial run."""
    text = yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"record": "x:window", "expr": 'x:window{window="7m"} + x:window{window="7m"} offset 7m',
         "labels": {"window": "14m"}}]}]})
    with pytest.raises(CpObserveError, match="14m"):
        plan([text])
    with pytest.raises(CpObserveError, match="no window record"):
        plan([yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "y", "expr": "up"}]}]})])
    with pytest.raises(CpObserveError, match="not a Prometheus rule file"):
        plan(["- just a list"])


def test_a_missing_promtool_is_one_error_line_and_exit_status_1(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: object) -> None:
    """Without promtool the command says so and exits 1; --days must be positive (2)."""
    argv = ["deploy", "backfill", "--url", "http://127.0.0.1:9", "--output-dir", str(tmp_path),
            "--promtool", "no-such-promtool-here"]
    assert cli.main(argv) == 1
    assert "no-such-promtool-here not found" in capsys.readouterr().err
    assert cli.main([*argv, "--days", "0"]) == 2
