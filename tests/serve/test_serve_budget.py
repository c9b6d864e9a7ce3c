"""serve's judge budget: the period's spend is kept beside the durable store, so a restart resumes it."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from cp_observe.serve._service import ScorerService
from cp_observe.serve._settings import ServeSettings


def _settings(data_dir: Path, **more: object) -> ServeSettings:
    return ServeSettings.resolve({"data_dir": str(data_dir), "judge": "lexical", "grpc_port": 0, "http_port": 0,
                                  "admin_port": 0, "daily_budget_usd": 2.0, **more}, environ={})


def test_a_restarted_service_resumes_the_periods_spend_from_its_data_dir(tmp_path: Path) -> None:
    """The spend a previous run saved in data_dir/budget.json for this UTC day is where the new run starts."""
    tmp_path.mkdir(exist_ok=True)
    start = math.floor(time.time() / 86_400) * 86_400
    (tmp_path / "budget.json").write_text(
        json.dumps({"period_start": start, "period_s": 86_400.0, "spent_usd": 0.75}), encoding="utf-8")
    with ScorerService(_settings(tmp_path)) as service:
        budget = service.stats()["budget"]
    assert budget["spent_usd"] == 0.75 and budget["limit_usd"] == 2.0


def test_each_replica_paces_its_share_and_an_earlier_period_starts_at_zero(tmp_path: Path) -> None:
    """budget_replicas=4: a quarter of the budget; yesterday's file does not count against today."""
    tmp_path.mkdir(exist_ok=True)
    yesterday = math.floor(time.time() / 86_400) * 86_400 - 86_400
    (tmp_path / "budget.json").write_text(
        json.dumps({"period_start": yesterday, "period_s": 86_400.0, "spent_usd": 1.5}), encoding="utf-8")
    with ScorerService(_settings(tmp_path, budget_replicas=4)) as service:
        budget = service.stats()["budget"]
    assert budget["spent_usd"] == 0.0 and budget["limit_usd"] == 0.5
