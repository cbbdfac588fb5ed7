"""Two followers of one run: one drains the rows into the files, the other watches."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.slow


def test_two_followers_of_one_run_write_each_row_once(redis_server, farm_on, tmp_path, kit):
    """A failure seen once: a second `--attach` while the sweep followed wrote every row twice."""
    farm = farm_on(redis_server)
    n = 5  # 150 jobs
    planned = kit.planned_ids(n)
    run_id = kit.detached_sweep(farm, tmp_path, n)
    first = farm.qfarm_bg("sweep", "--attach", run_id, "--quiet")
    second = farm.qfarm_bg("sweep", "--attach", run_id, "--quiet")
    farm.start_worker("w1", concurrency=8)
    out1, err1 = first.communicate(timeout=240)
    out2, err2 = second.communicate(timeout=240)
    assert first.returncode == 0 and second.returncode == 0, err1 + err2
    kit.assert_exactly_once(farm, run_id, planned)
    assert (err1 + err2).count("watching progress read-only") >= 1, err1 + err2


def test_a_watching_follower_takes_over_when_the_drainer_dies(redis_server, farm_on, tmp_path, kit):
    from qfarm.ops.sim.launch import start_simulator

    # Answers take 50 ms + 5 ms a token, so the drainer is killed mid-run: against a
    # zero-latency simulator the run could end before the kill, with nothing to take over.
    with start_simulator(ttft_ms=50, tpot_ms=5, max_num_seqs=256) as sim:
        farm = farm_on(redis_server, endpoints=sim.url)
        n = 10  # 300 jobs
        planned = kit.planned_ids(n)
        run_id = kit.detached_sweep(farm, tmp_path, n)
        drainer = farm.qfarm_bg("sweep", "--attach", run_id, "--quiet")
        assert farm.wait_for(lambda: farm.redis.exists(f"qfarm:run:{run_id}:follower"),
                             timeout_s=30)
        watcher = farm.qfarm_bg("sweep", "--attach", run_id, "--quiet")
        farm.start_worker("w1", concurrency=4)
        assert farm.wait_for(lambda: len(kit.file_ids(farm, run_id)) >= 30, timeout_s=120)
        assert len(kit.file_ids(farm, run_id)) < len(planned), "the run ended before the kill"
        t_fault = time.time()
        drainer.kill()  # no release: the watcher waits for the lease to expire
        drainer.communicate(timeout=10)
        _, err = watcher.communicate(timeout=240)
        assert watcher.returncode == 0, err
        assert "drains the rows now" in err, err
        kit.assert_exactly_once(farm, run_id, planned)
        kit.fault_cost(farm, run_id, "the draining follower kill -9 (a watcher takes over)",
                       t_fault, planned=len(planned), stderr=err)
