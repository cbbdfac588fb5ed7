"""A distributed sweep's cost and logs, through a real worker on a password-protected Redis:
the worker's JSON log parses line by line and holds no secret at DEBUG, Celery's lines go
through it once, and the run's cost reaches the manifest, `qfarm status` and /metrics."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import redis

from qfarm.common import keys
from qfarm.ops.sim.launch import start_simulator
from tests.producer.conftest import Farm

pytestmark = pytest.mark.slow

API_KEY = "sk-worker-key-7c6b5a49"
TOKEN = "api-token-fedcba9876543210"
REDIS_PASSWORD = "redis-pw-1q2w3e4r5t"
SECRETS = (API_KEY, TOKEN, REDIS_PASSWORD)


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_worker_s_json_log_and_a_distributed_run_s_cost(tmp_path: Path, own_redis,
                                                          default_index: Path) -> None:
    url = own_redis("--requirepass", REDIS_PASSWORD, password=REDIS_PASSWORD)
    with start_simulator(latency="zero", api_key=API_KEY) as sim:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
        env.update(
            QFARM_REDIS_URL=url, QFARM_LLM_ENDPOINTS=sim.url, QFARM_LLM_API_KEY=API_KEY,
            QFARM_API_TOKENS=f"admin:{TOKEN}", QFARM_INDEX_PATH=str(default_index),
            QFARM_RESULTS_DIR=str(tmp_path / "results"), QFARM_LOG_FORMAT="json",
            QFARM_LOG_LEVEL="debug", QFARM_LLM_GPUS_PER_ENDPOINT="2",
            QFARM_LLM_PRICE_PER_GPU_HOUR="3", QFARM_METRICS_FLUSH_S="0.5",
            PYTHONUNBUFFERED="1",
        )
        (tmp_path / "logs").mkdir()
        farm = Farm(env=env, log_dir=tmp_path / "logs")
        try:
            farm.start_worker("w1", concurrency=4)
            done = farm.qfarm("sweep", "smoke", "--modes", "quote")
            assert done.returncode == 0, done.stderr[-3000:]
            json_lines(done.stderr)  # the producer's stderr: JSON objects only
            run_id = Path(done.stdout.split("rows:", 1)[1].split()[0]).parent.name

            status = farm.qfarm("status", run_id, env={**env, "QFARM_LOG_FORMAT": "text"})
            assert status.returncode == 0, status.stderr
            assert "cost: " in status.stdout and " prompt + " in status.stdout
            assert "GPU-h" in status.stdout and "USD" in status.stdout

            client = redis.Redis.from_url(url)
            assert farm.wait_for(lambda: any(
                k.startswith(b"llm_prompt_tokens|") for k in client.hkeys(keys.METRICS_COUNTERS_KEY)),
                timeout_s=20)
            log = farm.worker_log("w1")  # read while the worker runs: its whole life's lines
        finally:
            farm.stop_all()
    records = json_lines(log)
    assert {r["role"] for r in records} >= {"worker", "worker:mixed"}
    assert any(r["logger"].startswith("celery") for r in records)
    assert sum(r["message"].endswith(" ready.") for r in records) == 1  # Celery's line, once
    assert any(r["level"] == "debug" for r in records)
    for secret in SECRETS:
        assert secret not in log and secret not in done.stderr and secret not in status.stdout

    manifest = json.loads((tmp_path / "results" / run_id / "manifest.json").read_text())
    run = manifest["cost"]["lines"][0]
    assert run["rows"] == 15 and run["prompt_tokens"] > 0 and not run["estimated"]
    assert run["gpus"] == 2 and run["gpu_hours"] > 0 and run["price_gpu"] > 0
    summary = (tmp_path / "results" / run_id / "summary.md").read_text()
    assert "## What the run cost (SIMULATED)" in summary
