"""Redis restarted under a run: without persistence (then --resume) and with AOF."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_restart_without_persistence_then_resume_gives_each_job_exactly_one_row(
    redis_server, farm_on, tmp_path, kit, simulator
):
    """A failure seen once: rows.jsonl had 304 lines but 264 distinct ids after such a resume."""
    farm = farm_on(redis_server)
    n = 8  # 10 questions x 3 modes x 8 = 240 jobs
    planned = kit.planned_ids(n)
    run_id = kit.detached_sweep(farm, tmp_path, n)
    # Slow enough to be killed mid-run: with the async gateway and the zero-latency simulator,
    # -c 4 finished 120 jobs within one 0.2 s poll of the first 40 rows.
    worker = farm.start_worker("w1", concurrency=1)
    follower = farm.qfarm_bg("sweep", "--attach", run_id, "--quiet")
    assert farm.wait_for(lambda: len(farm.rows(run_id)) >= 40, timeout_s=120)
    farm.kill9(worker)
    in_redis = len(farm.rows(run_id))
    assert farm.wait_for(lambda: len(kit.file_ids(farm, run_id)) >= in_redis, timeout_s=30)
    kit.interrupt(follower)
    in_file = set(kit.file_ids(farm, run_id))
    assert 0 < len(in_file) < len(planned)

    calls, t_fault = kit.llm_calls(simulator), time.time()
    redis_server.restart()  # no persistence: rows, log, manifest and queues are gone
    assert farm.redis.dbsize() == 0

    farm.start_worker("w2", concurrency=8)
    res = farm.qfarm("sweep", "--resume", run_id, "--quiet", timeout_s=300)
    assert res.returncode == 0, res.stderr
    assert f"re-enqueued {len(planned) - len(in_file)} jobs" in res.stderr
    assert f"recovered {len(in_file)} rows from rows.jsonl and 0 from Redis" in res.stderr
    kit.assert_exactly_once(farm, run_id, planned)
    summary = (Path(farm.env["QFARM_RESULTS_DIR"]) / run_id / "summary.md").read_text()
    assert f"`--resume`: {len(in_file)} rows recovered from rows.jsonl" in summary, summary
    kit.fault_cost(farm, run_id, "redis restart, no persistence, then --resume", t_fault,
                   planned=len(planned) - len(in_file), llm_calls=kit.llm_calls(simulator) - calls,
                   stderr=res.stderr)


def resent_jobs(stderr: str) -> int:
    """Jobs the follower had to re-send because they had neither a row nor a message."""
    return sum(int(n) for n in re.findall(r"(\d+) jobs had no row and no message", stderr))


@pytest.mark.parametrize(
    ("server", "kill"),
    [("aof_redis_server", False), ("aof_redis_server", True), ("redis_server", False)],
    ids=["aof-shutdown", "aof-kill-9", "no-persistence"],
)
def test_redis_restart_under_a_followed_sweep_loses_and_doubles_nothing(
    request, farm_on, tmp_path, kit, server, kill
):
    """A failure seen once: with appendonly, 88 and 96 of 304 jobs were lost and the following
    sweep died with a traceback. Workers and the follower ride the restart out; after a
    restart without persistence the follower puts back what Redis lost (manifest, rows
    from rows.jsonl) and re-sends the jobs with neither a row nor a message, no --attach."""
    from qfarm.ops.sim.launch import start_simulator

    redis_server = request.getfixturevalue(server)
    # Answers take 50 ms + 20 ms a token: against a zero-latency simulator the farm
    # finished its run before the restart, and there was no restart to ride out.
    with start_simulator(ttft_ms=50, tpot_ms=20, max_num_seqs=256) as simulator:
        _ride_out_a_restart(farm_on(redis_server, endpoints=simulator.url), redis_server,
                            tmp_path, kit, simulator, kill)


def _ride_out_a_restart(farm, redis_server, tmp_path, kit, simulator, kill) -> None:
    n = 20  # 600 jobs
    planned = kit.planned_ids(n)
    worker = farm.start_worker("w1", concurrency=8)
    calls = kit.llm_calls(simulator)
    sweep, run_id, rows_key = kit.followed_sweep(farm, tmp_path, n)
    assert farm.wait_for(lambda: farm.redis.hlen(rows_key) >= 30, timeout_s=120)
    assert farm.redis.hlen(rows_key) < len(planned) - 30, "the run ended before the fault"
    t_fault = time.time()
    redis_server.restart(kill=kill)
    _, err = sweep.communicate(timeout=240)
    assert sweep.returncode == 0, err
    assert worker.poll() is None, farm.worker_log("w1")[-3000:]  # it rode the restart out
    assert "Traceback" not in err, err
    kit.assert_exactly_once(farm, run_id, planned)
    assert "Redis unreachable" in err and "Redis is back" in err, err
    if redis_server.aof:
        # Nothing was acknowledged without its result stored. The one loss left is kombu's:
        # a message popped by the worker's BRPOP as the connection dropped (at most one
        # bundle a consumer), which the follower re-sends.
        assert resent_jobs(err) <= 8, err
    else:
        assert "Redis had lost this run" in err, err
    how = ("AOF, " if redis_server.aof else "no persistence, ") + ("kill -9" if kill else "SHUTDOWN")
    kit.fault_cost(farm, run_id, f"redis restart ({how}) under a following sweep", t_fault,
                   planned=len(planned), llm_calls=kit.llm_calls(simulator) - calls, stderr=err)


def test_workers_with_free_slots_ride_out_a_redis_restart_at_the_default_bundle_size(
    redis_server, farm_on, tmp_path, kit
):
    """At bundles of 32 the generate worker (threads, -c 16) stopped consuming at every
    Redis outage: ``Unrecoverable error: AttributeError … hostname``. A worker holding
    fewer tasks than its concurrency has a BRPOP pending beside its unacknowledged
    messages, and kombu then closed its channel again after detaching it from its
    connection (worker/broker.py). The Procfile's roles, run with fewer bundles than slots."""
    from qfarm.ops.sim.launch import start_simulator

    # Answers take a second or more (40 ms a token): the restart lands while bundles generate.
    with start_simulator(ttft_ms=50, tpot_ms=40, max_num_seqs=256) as sim:
        farm = farm_on(redis_server, endpoints=sim.url, QFARM_BUNDLE_SIZE="32")
        workers = {
            "cpu": farm.start_worker("cpu", queues="retrieve,verify", pool="prefork", concurrency=2),
            "gpu": farm.start_worker("gpu", queues="generate", pool="threads", concurrency=16),
        }
        n = 4  # 120 jobs: 4 bundles a stage, fewer than the generate worker's 16 threads
        planned = kit.planned_ids(n)
        calls = kit.llm_calls(sim)
        sweep, run_id, rows_key = kit.followed_sweep(farm, tmp_path, n)
        # The generate worker holds bundles (unacknowledged) and has free threads (a BRPOP pending).
        assert farm.wait_for(lambda: sim.stats()["running"] > 0, timeout_s=120, poll_s=0.05)
        assert farm.redis.hlen(rows_key) < len(planned), "the run ended before the fault"
        t_fault = time.time()
        redis_server.restart()
        _, err = sweep.communicate(timeout=240)
        for name, proc in workers.items():
            log = farm.worker_log(name)
            assert proc.poll() is None and "Unrecoverable" not in log, log[-3000:]
        assert sweep.returncode == 0, err
        kit.assert_exactly_once(farm, run_id, planned)
        kit.fault_cost(farm, run_id, "redis restart (no persistence), bundles of 32, workers with free slots",
                       t_fault, planned=len(planned), llm_calls=kit.llm_calls(sim) - calls, stderr=err)
