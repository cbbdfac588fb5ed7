"""Suite-wide fixtures only; the rest live beside the tests that use them."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's QFARM_* variables (httpx's clean_environ)."""
    for key in list(os.environ):
        if key.startswith("QFARM_") and key != "QFARM_DATA_DIR":
            monkeypatch.delenv(key, raising=False)


@pytest.fixture(scope="session")
def default_index(tmp_path_factory: pytest.TempPathFactory):
    """The embedded index of the real default corpus, built once per test session."""
    from common.settings import Settings
    from worker.retrieval import ensure_default_index

    data_dir = tmp_path_factory.mktemp("qfarm-data")
    settings = Settings(data_dir=data_dir)
    return ensure_default_index(settings, progress=False)
