"""One check of a ``data_source`` argument: ``configure()`` and the processor take and refuse the same values."""

from __future__ import annotations

from typing import Any

import pytest

import cp_observe
from cp_observe._config._settings import Settings
from cp_observe._errors import ConfigurationError
from tests.conftest import Otel


@pytest.mark.parametrize("bad", [{"tenant": "kb"}, 5, ["tenant", 3]], ids=["mapping", "number", "not_names"])
def test_configure_and_the_processor_refuse_with_one_error(otel: Otel, bad: Any) -> None:
    """Neither a callable nor attribute names: the same ``ConfigurationError`` (a ``ValueError``) from both."""
    with pytest.raises(ConfigurationError, match="data_source must be") as from_configure:
        cp_observe.configure(data_source=bad)
    with pytest.raises(ConfigurationError, match="data_source must be") as from_processor:
        otel.processor("lexical", data_source=bad)
    assert str(from_configure.value) == str(from_processor.value)
    assert isinstance(from_processor.value, ValueError)


@pytest.mark.parametrize(("given", "setting"), [
    ("tenant", "tenant"), (["tenant", "kb"], "tenant,kb"), (("tenant",), "tenant"), (None, None),
])
def test_attribute_names_become_the_setting(otel: Otel, given: Any, setting: str | None) -> None:
    """Attribute names, as a list or the comma-separated string, become the setting's value in the processor."""
    assert Settings.data_source_setting(given) == setting
    assert otel.processor("lexical", data_source=given).options.data_source == setting
