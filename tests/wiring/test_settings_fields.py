"""The settings' own validator (no pydantic): it accepts and refuses what pydantic did, and keeps secrets hidden."""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from typing import Any

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cp_observe._config._fields import Secret, SettingField
from cp_observe._config._settings import Settings
from cp_observe._errors import ConfigurationError
from cp_observe.serve import ServeSettings

# Inputs a deployment or a caller gives: env strings in every shape people write, and Python values.
INT_INPUTS: list[Any] = [
    "5", " 5 ", "+5", "-5", "05", "00", "1_000", "5.0", "5.00", "1_000.0", "-0.0", "\t5\n", "\u00a05",
    "5.5", "5.", ".0", "1e3", "0x10", "1__0", "_1", "1_", "+ 5", "5 .0", "5.0_0", "5.0e0", "True", "", " ",
    "\u0663", "9" * 25, b"7", 5, 0, -3, True, False, 5.0, -2.0, 5.5, math.inf, math.nan, 2.0**70, [5], None,
]
FLOAT_INPUTS: list[Any] = [
    "1", " 1.5 ", "+1.5", "-1.5", ".5", "5.", "1e3", "1E3", "1e+3", "1e400", "-1e400", "inf", "-inf", "+inf",
    "Infinity", "iNf", "inF ", "nan", "-nan", "1_0.5", "1.5_0", "1__0", "_1", "1_", "", "0x1", "0x1p3",
    "1.5e", "in f", "True", "\u00a01", "\u0661", b"1.5", 1, 0, True, 1.5, -2.5, math.inf, [1.0], None,
]
BOOL_INPUTS: list[Any] = [
    "true", "TRUE", "True", "false", "False", "1", "0", "yes", "Yes", "YES", "no", "on", "ON", "off", "t", "T",
    "f", "F", "y", "Y", "n", "N", "2", "", " true", "true ", "\ttrue", "enabled", b"true", True, False, 1, 0,
    2, -1, 1.0, 0.0, 0.5, math.nan, None,
]
STR_INPUTS: list[Any] = ["x", " x ", "", "ünïcode", b"x", b"\xff", 5, 5.0, True, None, ["x"]]


def _field(kind: type[Any], optional: bool = False) -> SettingField:
    return SettingField("f", kind | None if optional else kind, None, description="", kind=kind, optional=optional)


def _pydantic(kind: type[Any], value: Any) -> tuple[bool, Any]:
    try:
        return True, pydantic.TypeAdapter(kind).validate_python(value)
    except pydantic.ValidationError:
        return False, None


def _ours(kind: type[Any], value: Any) -> tuple[bool, Any]:
    try:
        return True, _field(kind).coerce(value)
    except ValueError:
        return False, None


def _same(kind: type[Any], value: Any) -> None:
    theirs, ours = _pydantic(kind, value), _ours(kind, value)
    assert ours[0] == theirs[0], (kind, value, ours, theirs)
    if ours[0]:
        if isinstance(theirs[1], float) and math.isnan(theirs[1]):
            assert math.isnan(ours[1]), (kind, value)
        else:
            assert (type(ours[1]), ours[1]) == (type(theirs[1]), theirs[1]), (kind, value, ours, theirs)


@pytest.mark.parametrize(("kind", "inputs"), [(int, INT_INPUTS), (float, FLOAT_INPUTS), (bool, BOOL_INPUTS),
                                              (str, STR_INPUTS)], ids=["int", "float", "bool", "str"])
def test_each_type_accepts_and_refuses_what_pydantic_did(kind: type[Any], inputs: list[Any]) -> None:
    """Every input, env string or Python value, is taken (as the same value) or refused exactly as before."""
    for value in inputs:
        _same(kind, value)


_NUMBERISH = st.text(alphabet="0123456789+-._ eEinfatxy\t", max_size=8)


# pydantic strips leading zeros before it reads an int's sign and underscores, so it takes "0-92" as -92 and
# "0__3" as 3. We refuse those on purpose (a typo, not a number); every other verdict must be pydantic's.
_LEADING_ZERO_QUIRK = re.compile(r"\s*[+-]?0[0_]*[-+_]")


@given(_NUMBERISH)
def test_numeric_strings_agree_with_pydantic(text: str) -> None:
    """Random strings of digits, signs, dots, underscores, exponents and spaces: same verdict for int and float."""
    if _pydantic(int, text) != _ours(int, text):
        assert _LEADING_ZERO_QUIRK.match(text) and not _ours(int, text)[0], text
    else:
        _same(int, text)
    _same(float, text)


@pytest.mark.parametrize("text", ["0-92", "0__3", "+0-7"])
def test_leading_zero_quirks_of_pydantic_are_refused(text: str) -> None:
    """Strings pydantic reads as ints after stripping leading zeros ("0-92" as -92) are refused, not misread."""
    assert _pydantic(int, text)[0]
    assert not _ours(int, text)[0]


def test_underscores_in_numbers_follow_pydantic() -> None:
    """Underscores read as pydantic reads them: "1_.5" and "1_e5" are numbers, "_1", "1__0" and " 1_0" are not."""
    for text in ("1_.5", "1_e5", "in_f", "-_1", "_1", "1_", "1__0", " 1_0", "1_0\t"):
        _same(float, text)


@given(st.sampled_from(["true", "false", "yes", "no", "on", "off", "t", "f", "y", "n", "1", "0", "x", ""])
       .flatmap(lambda word: st.sampled_from([word, word.upper(), word.title(), f" {word}", f"{word} "])))
def test_boolean_words_agree_with_pydantic(text: str) -> None:
    """Boolean words in any case, padded or not: same verdict as pydantic (padding is refused)."""
    _same(bool, text)


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("0", False), ("OFF", False), ("yes", True)])
def test_booleans_from_the_environment(raw: str, expected: bool) -> None:
    """CP_OBSERVE_HOLD_SPANS="true"/"0"/"OFF"/"yes" reads as a boolean."""
    assert Settings.resolve({}, environ={"CP_OBSERVE_HOLD_SPANS": raw}).hold_spans is expected


def test_every_field_type_from_environment_strings() -> None:
    """An int, a float, an optional float, a bool, a str and a secret each come typed from their variables."""
    settings = Settings.resolve({}, environ={
        "CP_OBSERVE_QUEUE_SIZE": " 1_500 ", "CP_OBSERVE_SAMPLE_RATE": "2.5e-1", "CP_OBSERVE_DAILY_BUDGET_USD": "3",
        "CP_OBSERVE_CAPTURE_ONLY": "on", "CP_OBSERVE_SERVICE_NAME": "svc", "CP_OBSERVE_JUDGE_API_KEY": "sk-env",
        "CP_OBSERVE_METRICS_PORT": "9464.0",
    })
    assert (settings.queue_size, settings.sample_rate, settings.daily_budget_usd) == (1500, 0.25, 3.0)
    assert (settings.capture_only, settings.service_name, settings.metrics_port) == (True, "svc", 9464)
    assert isinstance(settings.daily_budget_usd, float) and isinstance(settings.metrics_port, int)
    assert settings.judge_api_key == Secret("sk-env")


@pytest.mark.parametrize(("name", "bad", "edge"), [
    ("queue_size", 0, 1), ("judge_timeout_s", 0.0, 1e-9), ("judge_max_retries", -1, 0), ("threshold", 1.01, 1.0),
    ("daily_budget_usd", -0.01, 0.0), ("metrics_port", 65536, 65535), ("max_contexts", 29, 28),
])
def test_bounds_raise_for_arguments_and_fall_back_for_the_environment(
    name: str, bad: float, edge: float, caplog: pytest.LogCaptureFixture
) -> None:
    """Just past a bound: an argument raises naming the field, a variable warns and keeps the default."""
    caplog.set_level(logging.WARNING, logger="cp_observe")
    with pytest.raises(ConfigurationError, match=name):
        Settings.resolve({name: bad}, environ={})
    variable = f"CP_OBSERVE_{name.upper()}"
    assert getattr(Settings.resolve({}, environ={variable: str(bad)}), name) == Settings.model_fields[name].default
    assert variable in caplog.text and "ignoring invalid environment value" in caplog.text
    assert getattr(Settings.resolve({name: edge}, environ={}), name) == edge


def test_every_problem_is_named_in_one_error() -> None:
    """Two bad arguments: one ConfigurationError naming both fields and what each must be."""
    with pytest.raises(ConfigurationError) as caught:
        Settings.resolve({"concurrency": "many", "sample_rate": 2}, environ={})
    message = str(caught.value)
    assert "concurrency='many': must be a whole number" in message
    assert "sample_rate=2: must be <= 1.0" in message


def test_arguments_win_over_the_environment_over_the_default() -> None:
    """Explicit argument > CP_OBSERVE_* > default, field by field; None means unset."""
    environ = {"CP_OBSERVE_CONCURRENCY": "8", "CP_OBSERVE_QUEUE_SIZE": "7"}
    settings = Settings.resolve({"concurrency": 2, "queue_size": None}, environ=environ)
    assert (settings.concurrency, settings.queue_size, settings.turn_timeout_s) == (2, 7, 60.0)


def test_unknown_names_raise() -> None:
    """A name that is no setting is refused before anything else is read."""
    with pytest.raises(ConfigurationError, match="sample_rat"):
        Settings.resolve({"sample_rat": 0.5}, environ={})
    with pytest.raises(TypeError):
        Settings(sample_rat=0.5)  # type: ignore[call-arg]


def test_settings_are_frozen() -> None:
    """A resolved Settings cannot be changed; model_copy gives a new, validated one."""
    settings = Settings.resolve({}, environ={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.queue_size = 5  # type: ignore[misc]
    assert settings.model_copy(update={"queue_size": "5"}).queue_size == 5
    with pytest.raises(ConfigurationError, match="queue_size"):
        settings.model_copy(update={"queue_size": 0})


@pytest.mark.parametrize("cls", [Settings, ServeSettings])
def test_secrets_never_show(cls: type[Settings], caplog: pytest.LogCaptureFixture) -> None:
    """Keys and tokens given as arguments or variables appear in no repr, str, error or log line."""
    caplog.set_level(logging.DEBUG, logger="cp_observe")
    secrets = {"judge_api_key": "sk-arg-1234", "phoenix_api_key": "px-arg-5678"}
    environ = {"CP_OBSERVE_AUTH_TOKEN": "tok-env-9012", "CP_OBSERVE_QUEUE_SIZE": "bad"}
    settings = cls.resolve(secrets, environ=environ)
    assert settings.judge_api_key is not None and settings.judge_api_key.get_secret_value() == "sk-arg-1234"
    shown = [repr(settings), str(settings), str(settings.judge_api_key), repr(settings.phoenix_api_key),
             caplog.text]
    with pytest.raises(ConfigurationError) as caught:
        cls.resolve({"judge_api_key": 12345, "queue_size": 0}, environ={})
    shown.append(str(caught.value))
    for text in shown:
        for secret in ("sk-arg-1234", "px-arg-5678", "tok-env-9012", "12345"):
            assert secret not in text, (secret, text)
    assert "judge_api_key=***" in str(caught.value)


def test_a_pydantic_secret_is_still_taken() -> None:
    """configure(judge_api_key=SecretStr(...)) kept working: any secret with get_secret_value() is read."""
    settings = Settings.resolve({"judge_api_key": pydantic.SecretStr("sk-wrapped")}, environ={})
    assert settings.judge_api_key is not None and settings.judge_api_key.get_secret_value() == "sk-wrapped"


def test_checks_and_patterns() -> None:
    """phoenix_url must be http(s); serve's log_level must be a level name, in any case."""
    with pytest.raises(ConfigurationError, match="phoenix_url"):
        Settings.resolve({"phoenix_url": "127.0.0.1:6006"}, environ={})
    assert ServeSettings.resolve({"log_level": "DEBUG"}, environ={}).log_level == "DEBUG"
    with pytest.raises(ConfigurationError, match="log_level"):
        ServeSettings.resolve({"log_level": "verbose"}, environ={})
    assert ServeSettings.resolve({}, environ={"CP_OBSERVE_LOG_LEVEL": "loud"}).log_level == "info"


def test_the_field_table_lists_each_setting_once_with_its_description() -> None:
    """model_fields: every dataclass field, in order, typed, with a default and a description; serve extends it."""
    names = [field.name for field in dataclasses.fields(Settings)]
    assert list(Settings.model_fields) == names
    assert all(field.description for field in ServeSettings.model_fields.values())
    assert list(ServeSettings.model_fields)[: len(names)] == names
    serve_queue = ServeSettings.model_fields["queue_size"]
    assert serve_queue.description != Settings.model_fields["queue_size"].description and serve_queue.ge == 1
    assert Settings.model_fields["judge_api_key"].secret and ServeSettings.model_fields["auth_token"].secret



def test_a_field_type_the_validator_cannot_read_is_refused() -> None:
    """A settings class declaring a type other than str, int, float, bool or Secret fails when its table is read."""
    from cp_observe._config._fields import setting

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Odd(Settings):
        names: tuple[str, ...] = setting((), "Not a scalar.")

    with pytest.raises(TypeError, match="names"):
        Odd.model_fields  # noqa: B018 - reading the table builds it
