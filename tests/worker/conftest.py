"""Retrieval fixtures shared by the worker tests.

* ``default_index_path``: the embedded index of the real default corpus (the
  suite-wide ``default_index`` fixture, built once per session); ``default_index_settings``
  points a ``Settings`` at it.
* ``search_server`` / ``search_url``: an ``osmem-server`` process (in-memory
  OpenSearch-compatible HTTP server, started once per session and stopped at
  its end) and a fresh copy-on-write clone of it per test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qfarm.common.settings import Settings


@pytest.fixture(scope="session")
def default_index_path(default_index: Path) -> Path:
    """The suite-wide index (tests/conftest.py), under the name these tests use."""
    return default_index


@pytest.fixture
def default_index_settings(default_index_path: Path, tmp_path: Path) -> Settings:
    return Settings(retriever="embedded", index_path=default_index_path, data_dir=tmp_path)


@pytest.fixture(scope="session")
def search_server() -> Iterator[Any]:
    from osmem_server import OsmemServer

    server = OsmemServer.start(japanese=False, startup_timeout=60.0)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def search_url(search_server: Any) -> Iterator[str]:
    clone = search_server.clone()
    try:
        yield clone.url
    finally:
        clone.close()
