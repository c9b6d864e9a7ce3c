"""Durable intake: SIGKILL `cp-observe serve` under load from the real OTLP exporter, restart it, lose nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cp_observe._errors import ConfigurationError
from cp_observe.serve._durable import DurableStore, Row
from cp_observe.serve._service import ScorerService
from cp_observe.serve._settings import ServeSettings
from tests.crash_support import EARLY, LATE, crash_run

pytestmark = pytest.mark.e2e  # a whole program in child processes: not the quick unit tier


def test_every_accepted_target_is_scored_exactly_once_across_sigkills(tmp_path: Path) -> None:
    """Four SIGKILLs at random moments under load: each target that got a 200 has exactly one evaluation."""
    report = crash_run(tmp_path, turns_total=480, batch=8, kills=(LATE, EARLY, LATE, LATE), seed=22, pace_s=0.3)
    assert report.kills == 4
    assert report.accepted, "nothing was accepted"
    assert not report.missing, f"{len(report.missing)} accepted targets never scored"
    assert not report.twice, f"{len(report.twice)} targets judged twice"
    assert report.left_in_store == 0  # the final drain left no target behind
    assert report.total("recovered") > 0  # at least one kill left work that a restart resumed
    assert sum(1 for s in report.stats[:-1] if s["scored"]) >= 2  # the late kills landed while judgements ran
    final = report.stats[-1]
    assert final["sampled"] == final["scored"] + final["failed"] + final["dropped"] + final["skipped"]


def test_no_durable_keeps_nothing_on_disk(tmp_path: Path) -> None:
    """--no-durable: no store is opened, the data directory is never created."""
    settings = ServeSettings.resolve({"durable": False, "data_dir": str(tmp_path / "never"), "judge": "lexical",
                                      "grpc_port": 0, "http_port": 0, "admin_port": 0})
    with ScorerService(settings) as service:
        assert service.store is None and service.stats()["durable"] is None
    assert not (tmp_path / "never").exists()


def test_an_unwritable_data_dir_refuses_to_start(tmp_path: Path) -> None:
    """A data directory that cannot be written is a configuration error naming the setting."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    settings = ServeSettings.resolve({"data_dir": str(blocker / "data"), "judge": "lexical"})
    with pytest.raises(ConfigurationError, match="data_dir"):
        ScorerService(settings)


def test_the_store_refuses_past_its_byte_bound_and_keeps_tombstones(tmp_path: Path) -> None:
    """Past max_bytes a claim is refused (store_full); a removed target leaves a tombstone that survives a reopen."""
    store = DurableStore(tmp_path, max_bytes=1 << 16, max_age_s=60, linger_s=1)
    try:
        big = [Row((1, i), True, i, b"x" * 20_000) for i in range(1, 5)]
        assert store.claim(big) == ("store_full", [])
        reason, claimed = store.claim(big[:2])
        assert reason == "" and store.write(claimed)
        assert store.claim(big[:2]) == ("", [])  # already stored: not claimed (nor fed) twice
        store.remove([big[0].key])
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "intake.sqlite3") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    reopened = DurableStore(tmp_path, max_bytes=1 << 16, max_age_s=60, linger_s=1)
    try:
        assert [row.key for row in reopened.recovered_rows] == [big[1].key]
        assert reopened.known(big[0].key) and reopened.known(big[1].key) and not reopened.known((1, 9))
    finally:
        reopened.close()
