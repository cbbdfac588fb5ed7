"""Requests that carry several jobs (``--share-samples``: a question x mode's samples in one
request with ``n`` choices) under the faults the farm rides out: an endpoint killed with
such requests in flight, a worker killed with their bundles unacknowledged (redelivered),
and a Redis restart without persistence. Each job still gets exactly one row."""

from __future__ import annotations

import os
import signal
import time

import pytest

pytestmark = pytest.mark.slow

SAMPLES = 4  # 10 questions x 3 modes x 4 samples: 120 jobs in 30 requests when all goes well
SHARE = ("--share-samples",)  # the default temperature (0.7): samples differ


def _ended_exactly(kit, farm, sweep, run_id: str, planned: set[str], fault: str,
                   t_fault: float) -> str:  # fmt: skip
    """The followed sweep exits 0 with one row per planned job and no error row; prints
    what the fault cost (``pytest -s | grep fault-cost``). Returns its stderr."""
    _, err = sweep.communicate(timeout=240)
    assert sweep.returncode == 0, err
    kit.assert_exactly_once(farm, run_id, planned)
    kit.fault_cost(farm, run_id, f"shared requests: {fault}", t_fault, planned=len(planned),
                   stderr=err)  # fmt: skip
    assert [r["error"] for r in farm.rows(run_id).values() if r["error"]] == []
    return err


def test_an_endpoint_killed_with_shared_requests_in_flight_fails_them_over_whole(
    redis_server, farm_on, tmp_path, kit
):
    from qfarm.ops.sim.launch import start_simulator

    # 40 ms + 10 ms a token: requests are in flight when the endpoint dies.
    latency = {"ttft_ms": 40, "tpot_ms": 10, "max_num_seqs": 64}
    with start_simulator(**latency) as one, start_simulator(**latency) as two:
        farm = farm_on(redis_server, endpoints=f"{one.url},{two.url}")
        planned = kit.planned_ids(SAMPLES)
        farm.start_worker("w1", concurrency=8)
        sweep, run_id, rows_key = kit.followed_sweep(farm, tmp_path, SAMPLES, *SHARE)
        assert farm.wait_for(lambda: farm.redis.hlen(rows_key) >= SAMPLES, timeout_s=120)
        assert farm.redis.hlen(rows_key) < len(planned) - 2 * SAMPLES, "ended before the fault"
        t_fault = time.time()
        two.kill()
        _ended_exactly(kit, farm, sweep, run_id, planned, "one of two endpoints kill -9", t_fault)
        # Shared: the surviving endpoint answered in requests of several choices.
        assert kit.llm_calls(one) < len(planned), kit.llm_calls(one)


def test_a_worker_killed_with_shared_bundles_unacked_has_them_redelivered_once(
    redis_server, farm_on, tmp_path, kit
):
    from qfarm.ops.sim.launch import start_simulator

    with start_simulator(ttft_ms=50, tpot_ms=5, max_num_seqs=256) as simulator:
        farm = farm_on(redis_server, endpoints=simulator.url)
        planned = kit.planned_ids(SAMPLES)
        victim = farm.start_worker("victim", concurrency=8)
        sweep, run_id, rows_key = kit.followed_sweep(farm, tmp_path, SAMPLES, *SHARE)
        assert farm.wait_for(lambda: farm.redis.hlen(rows_key) >= SAMPLES, timeout_s=120)
        t_fault = time.time()
        os.kill(victim.pid, signal.SIGKILL)  # its reserved bundles wait for redelivery
        assert farm.redis.hlen(rows_key) < len(planned), "the run ended before the kill"
        farm.start_worker("survivor", concurrency=8)
        _ended_exactly(kit, farm, sweep, run_id, planned, "worker kill -9", t_fault)


def test_a_redis_restart_under_shared_requests_loses_and_doubles_nothing(
    redis_server, farm_on, tmp_path, kit
):
    from qfarm.ops.sim.launch import start_simulator

    with start_simulator(ttft_ms=50, tpot_ms=20, max_num_seqs=256) as simulator:
        farm = farm_on(redis_server, endpoints=simulator.url)
        n = 3 * SAMPLES  # 360 jobs: enough still to run when Redis goes
        planned = kit.planned_ids(n)
        worker = farm.start_worker("w1", concurrency=8)
        sweep, run_id, rows_key = kit.followed_sweep(farm, tmp_path, n, *SHARE)
        assert farm.wait_for(lambda: farm.redis.hlen(rows_key) >= n, timeout_s=120)
        assert farm.redis.hlen(rows_key) < len(planned) - 2 * n, "the run ended before the fault"
        t_fault = time.time()
        redis_server.restart()
        err = _ended_exactly(kit, farm, sweep, run_id, planned, "redis restart (no persistence)",
                             t_fault)  # fmt: skip
        assert worker.poll() is None, farm.worker_log("w1")[-3000:]
        assert "Traceback" not in err, err
