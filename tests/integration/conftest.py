"""Fixtures of the integration tests: a real Arize Phoenix on loopback, one per test module that asks for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.phoenix_support import PhoenixServer, phoenix_server


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """One Phoenix server for the module, on free loopback ports, with its database in a temporary directory."""
    with phoenix_server(tmp_path_factory.mktemp("phoenix")) as server:
        yield server
