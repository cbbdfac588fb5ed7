"""What every command-line test runs under: the test index and its own results directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path, default_index) -> dict[str, str]:
    """The caller's environment without QFARM_* settings, on the session's test index."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    e.update(QFARM_INDEX_PATH=str(default_index), QFARM_RESULTS_DIR=str(tmp_path / "results"))
    # The qfarm command of this checkout, whichever checkout the venv installed.
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), e.get("PYTHONPATH")) if p)
    return e
