"""Fixtures of the HTTP API tests: an eager app on the simulator, and Redis for the
checks that a refused request enqueued nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis

from qfarm.common.settings import Settings

ADMIN_TOKEN = "admin-token-0123456789abcdef"
ASK_TOKEN = "ask-token-0123456789abcdefgh"
TOKENS = f"{ADMIN_TOKEN},ask:{ASK_TOKEN}"
TEST_PORT = int(os.environ.get("QFARM_TEST_REDIS_PORT", "6379"))
TEST_DB = int(os.environ.get("QFARM_TEST_REDIS_DB", "9"))


@pytest.fixture(scope="session")
def sim_url():
    from qfarm.ops.sim.launch import start_simulator

    handle = start_simulator(ttft_ms=0, tpot_ms=0, max_num_seqs=64)
    try:
        yield handle.url
    finally:
        handle.stop()


@pytest.fixture
def make_settings(tmp_path: Path, default_index: Path, sim_url: str):
    def build(**overrides: object) -> Settings:
        base: dict[str, object] = {
            "results_dir": tmp_path / "results",
            "data_dir": tmp_path / "data",
            "index_path": default_index,
            "llm_endpoints": sim_url,
            "redis_url": f"redis://127.0.0.1:{TEST_PORT}/{TEST_DB}",
        }
        base.update(overrides)
        return Settings(**base)  # type: ignore[arg-type]

    return build


@pytest.fixture
def test_redis():
    """The test Redis database, flushed before and after (tests/producer/conftest.py's)."""
    client = redis.Redis(port=TEST_PORT, db=TEST_DB)
    client.flushdb()
    yield client
    client.flushdb()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
