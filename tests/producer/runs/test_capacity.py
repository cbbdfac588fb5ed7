"""A sweep too big for the farm is refused before its first message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from qfarm.common.settings import Settings
from qfarm.producer.runs.capacity import (
    HOST_MEMORY_SHARE,
    MESSAGE_BYTES,
    estimated_queue_bytes,
    free_redis_bytes,
)

REPO = Path(__file__).resolve().parents[3]
QFARM = str(Path(sys.executable).parent / "qfarm")
QUESTIONS = "\n".join(f"What is notable about topic number {i}?" for i in range(10)) + "\n"


def test_the_estimate_counts_messages_and_jobs():
    one_a_message = estimated_queue_bytes(800, 1)
    bundled = estimated_queue_bytes(800, 8)
    assert one_a_message - bundled == (800 - 100) * MESSAGE_BYTES
    assert estimated_queue_bytes(801, 8) - bundled == estimated_queue_bytes(1, 8)  # one more message


def test_free_memory_is_maxmemory_left_or_a_share_of_the_host_or_unknown():
    assert free_redis_bytes({"used_memory": 3, "maxmemory": 10, "total_system_memory": 99})[0] == 7
    free, how = free_redis_bytes({"used_memory": 10, "maxmemory": 0, "total_system_memory": 110})
    assert free == int(100 * HOST_MEMORY_SHARE) and "no maxmemory" in how
    assert free_redis_bytes({"used_memory": 10, "maxmemory": 0}) is None


@pytest.fixture
def small_redis(own_redis):
    """A Redis of our own with a 3 MB maxmemory."""
    return redis.Redis.from_url(own_redis("--maxmemory", "3mb"))


@pytest.fixture
def sweep(tmp_path, default_index, simulator_url, small_redis):
    (tmp_path / "q.txt").write_text(QUESTIONS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env.update(
        QFARM_REDIS_URL=f"redis://127.0.0.1:{small_redis.connection_pool.connection_kwargs['port']}/0",
        QFARM_LLM_ENDPOINTS=simulator_url, QFARM_INDEX_PATH=str(default_index),
        QFARM_RESULTS_DIR=str(tmp_path / "results"),
    )

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([QFARM, "sweep", str(tmp_path / "q.txt"), "--quiet", *args],
                              cwd=REPO, env=env | extra, capture_output=True, text=True, timeout=120)

    return run


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "extra", "needle"),
    [
        (["-n", "1000000000"], {}, "above QFARM_MAX_JOBS_PER_RUN=5,000,000"),
        (["-n", "1"], {"QFARM_MAX_JOBS_PER_RUN": "29"}, "this sweep is 30 jobs (10 questions x 3 modes"),
        (["-n", "300"], {}, "only"),  # 9,000 jobs: about 3.4 MB of messages in a 3 MB Redis
    ],
)
def test_a_plan_over_a_limit_sends_nothing(sweep, small_redis, tmp_path, args, extra, needle):
    res = sweep(*args, **extra)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("qfarm: error: this sweep") and needle in lines[-1], res.stderr
    assert small_redis.dbsize() == 0  # no message, no manifest
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_a_plan_that_fits_is_sent_and_costs_no_more_than_estimated(sweep, small_redis):
    # A first run pays Redis's one-time costs (kombu's bindings, the queue key, allocator
    # arenas); the estimate is about what each further job costs.
    assert sweep("-n", "1", "--detach").returncode == 0
    before = small_redis.info("memory")["used_memory"]
    res = sweep("-n", "20", "--detach")  # 600 jobs, no worker: every message stays pending
    assert res.returncode == 0, res.stderr
    used = small_redis.info("memory")["used_memory"] - before
    bundle = Settings().bundle_size  # the sweep's default
    assert small_redis.llen("retrieve") == -(-30 // bundle) + -(-600 // bundle)
    assert 0 < used <= estimated_queue_bytes(600, bundle) * 1.25, used  # the estimate is not optimistic
