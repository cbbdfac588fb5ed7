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
