"""The library's log records carry their fields as record attributes; the programs write text or JSON lines."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from cp_observe import cli
from cp_observe._log import LOGGER_NAME, JsonLinesFormatter, log_to_stderr, logger


class Records(logging.Handler):
    """Keeps every record the ``cp_observe`` logger emits."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[Records]:
    """A handler on the ``cp_observe`` logger at DEBUG, removed afterwards."""
    handler = Records()
    stdlib = logging.getLogger(LOGGER_NAME)
    level = stdlib.level
    stdlib.addHandler(handler)
    stdlib.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        stdlib.removeHandler(handler)
        stdlib.setLevel(level)


def test_fields_are_record_attributes_and_the_message_reads_as_before(records: Records) -> None:
    """Each field is an attribute of the LogRecord; the message is still ``event='...' key=value`` in key order."""
    logger.warning("judge call failed", data_source="kb", error_type="TimeoutError", retries=3)
    record = records.records[-1]
    assert (record.event, record.data_source, record.error_type, record.retries) == (  # type: ignore[attr-defined]
        "judge call failed", "kb", "TimeoutError", 3)
    assert record.getMessage() == "event='judge call failed' data_source='kb' error_type='TimeoutError' retries=3"


@pytest.mark.parametrize("field", ["name", "msg", "args", "module", "process", "thread", "message", "asctime",
                                   "levelname", "lineno", "exc_text"])
def test_a_field_named_like_a_record_attribute_is_prefixed(records: Records, field: str) -> None:
    """A field LogRecord already has (the stdlib would refuse it) arrives as ``cp_<field>``; the record stays intact."""
    logger.warning("named", **{field: "ours"})
    record = records.records[-1]
    assert getattr(record, f"cp_{field}") == "ours"
    assert record.name == LOGGER_NAME and record.levelname == "WARNING"
    assert record.getMessage() == f"event='named' {field}='ours'"


def test_secrets_stay_masked_as_attributes(records: Records) -> None:
    """A field named like a secret is masked in the message and in the attribute alike."""
    logger.warning("calling", api_key="sk-live-0000", tokens=12)
    record = records.records[-1]
    assert record.api_key == "***" and record.tokens == 12  # type: ignore[attr-defined]
    assert "sk-live" not in record.getMessage()


def test_a_hosts_json_handler_writes_the_fields(records: Records) -> None:
    """The JSON formatter (as a host's JSON handler would) writes event and fields as keys of one object."""
    logger.info("cp-observe configured", judge="lexical", sample_rate=0.5, name="clash")
    line = JsonLinesFormatter().format(records.records[-1])
    assert "\n" not in line
    data = json.loads(line)
    assert data["event"] == "cp-observe configured" and data["level"] == "info" and data["logger"] == LOGGER_NAME
    assert (data["judge"], data["sample_rate"], data["cp_name"]) == ("lexical", 0.5, "clash")
    assert "msg" not in data and "args" not in data


@pytest.mark.parametrize("chosen, env", [("json", None), (None, "json")])
def test_log_to_stderr_writes_json_lines(monkeypatch: pytest.MonkeyPatch, chosen: str | None, env: str | None) -> None:
    """--log-format json (or CP_OBSERVE_LOG_FORMAT=json): one JSON object per line on stderr."""
    if env is not None:
        monkeypatch.setenv("CP_OBSERVE_LOG_FORMAT", env)
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    restore = log_to_stderr(chosen)
    try:
        logger.warning("first", count=1)
        logger.warning("second\nwith a newline", reason="x")
    finally:
        restore()
    lines = stream.getvalue().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["first", "second\nwith a newline"]
    assert json.loads(lines[0])["count"] == 1


def test_a_bad_log_format_variable_warns_and_writes_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """CP_OBSERVE_LOG_FORMAT=yaml: a warning (as text), then text lines."""
    monkeypatch.setenv("CP_OBSERVE_LOG_FORMAT", "yaml")
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    restore = log_to_stderr()
    try:
        logger.warning("after", count=1)
    finally:
        restore()
    text = stream.getvalue()
    assert "ignoring an unknown log format" in text and "event='after' count=1" in text


def test_an_offline_command_takes_log_format_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                  tmp_path: os.PathLike[str]) -> None:
    """``cp-observe replay --log-format json``: the library's warnings on stderr are JSON lines, no progress lines."""
    trace = os.path.join(tmp_path, "empty.jsonl")
    with open(trace, "w", encoding="utf-8"):
        pass
    monkeypatch.setenv("CP_OBSERVE_THRESHOLD", "not-a-number")  # a bad variable: the library warns
    code = cli.main(["replay", "--log-format", "json", "--dry-run", "--progress-interval", "0", trace])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 0 and lines, err
    parsed = [json.loads(line) for line in lines]
    assert {"event": "ignoring invalid environment value", "variable": "CP_OBSERVE_THRESHOLD",
            "value": "not-a-number"}.items() <= parsed[0].items()


def test_serve_takes_log_format_json(tmp_path: os.PathLike[str]) -> None:
    """``cp-observe serve --log-format json``: every stderr line is one JSON object, from start to drain."""
    env = {**os.environ, "CP_OBSERVE_THRESHOLD": "not-a-number", "CP_OBSERVE_LOG_LEVEL": "info"}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "cp_observe.serve", "--log-format", "json", "--grpc-port", "0", "--http-port", "0",
         "--admin-port", "0", "--no-durable"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # the service prints its ports once it serves
        assert "cp-observe serve: grpc" in first, first + (process.stderr.read() if process.stderr else "")
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    events = [json.loads(line)["event"] for line in err.splitlines() if line.strip()]
    assert "cp-observe serve started" in events and "cp-observe serve stopped" in events
