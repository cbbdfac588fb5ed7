"""A farm under supervisord (ops/farm.py, ops/supervisor/qfarm.conf): a worker killed
with ``kill -9`` is started again, Redis restarts under it, and the run completes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


class SupervisedFarm:
    """``python -m qfarm.ops.farm`` on a farm directory of the test's own."""

    def __init__(self, env: dict[str, str], farm_dir: Path):
        self.dir = farm_dir
        self.env = {
            **env,
            "FARM_HOME": str(REPO),
            # A program up this long is RUNNING (supervisord's startsecs); the default 10 s
            # only makes the test wait longer for the same thing.
            "FARM_STARTSECS": "2",
        }

    def farm(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "qfarm.ops.farm", "--dir", str(self.dir), *args],
                              cwd=REPO, env=self.env, capture_output=True, text=True,
                              timeout=timeout_s)  # fmt: skip

    def pid(self, role: str) -> int:
        out = self.farm("ctl", "pid", role).stdout.strip()
        return int(out) if out.isdigit() else 0

    def log(self, role: str) -> str:
        path = self.dir / f"{role}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def count(self, role: str, text: str) -> int:
        return self.log(role).count(text)

    def last_at(self, role: str, text: str) -> float:
        """When the role's log last said ``text`` (the farm's log lines start with a UTC
        stamp, qfarm.common.logs.TextFormatter), as a Unix time."""
        stamps = re.findall(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z .*" + re.escape(text),
                            self.log(role), flags=re.M)  # fmt: skip
        assert stamps, f"{role} never said {text!r}"
        when = datetime.strptime(stamps[-1], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)
        return when.timestamp()

    def stop(self) -> None:
        self.farm("down")
        pidfile = self.dir / "supervisord.pid"
        deadline = time.monotonic() + 90
        while pidfile.exists() and time.monotonic() < deadline:  # it removes it on exit
            time.sleep(0.2)
        if pidfile.exists():  # still up: it and what it started go
            pid = int(pidfile.read_text().strip() or 0)
            for p in [int(c) for c in _children(pid)] + [pid]:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


def _until(predicate, timeout_s: float, poll_s: float = 0.1) -> float | None:
    """Seconds until ``predicate()`` held, or None if it did not within ``timeout_s``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if predicate():
            return round(time.monotonic() - t0, 1)
        time.sleep(poll_s)
    return None


def test_a_supervised_farm_survives_a_worker_kill_and_a_redis_restart(
    aof_redis_server, farm_on, tmp_path, kit
):
    """At the default bundle size (32), the Procfile's cpu and gpu roles under supervisord:
    ``kill -9`` of the generate worker's main process, then a Redis restart, mid-sweep.
    Nothing but the faults: supervisord restarts the worker, the workers reconnect, the
    follower re-sends what was lost, and every job has exactly one row."""
    from qfarm.ops.sim.launch import start_simulator

    # Answers take 50 ms + 20 ms a token, so the run lasts long enough for both faults.
    with start_simulator(ttft_ms=50, tpot_ms=20, max_num_seqs=256) as sim:
        farm = farm_on(aof_redis_server, endpoints=sim.url, QFARM_BUNDLE_SIZE="32")
        sup = SupervisedFarm(farm.env, tmp_path / "farm")
        try:
            res = sup.farm("up", "--roles", "cpu,gpu", "--wait", "90")
            assert res.returncode == 0, res.stderr + sup.log("cpu")[-2000:] + sup.log("gpu")[-2000:]
            _faults_under_a_sweep(farm, sup, aof_redis_server, sim, tmp_path, kit)
        finally:
            sup.stop()


def _faults_under_a_sweep(farm, sup: SupervisedFarm, server, sim, tmp_path: Path, kit) -> None:
    n = 20  # 600 jobs: 19 bundles a stage
    planned = kit.planned_ids(n)
    calls = kit.llm_calls(sim)
    sweep, run_id, rows_key = kit.followed_sweep(farm, tmp_path, n)
    assert farm.wait_for(lambda: farm.redis.hlen(rows_key) >= 32, timeout_s=120)

    # 1. kill -9 of the generate worker's main process: supervisord starts it again.
    victim, ready = sup.pid("gpu"), sup.count("gpu", " ready.")
    assert victim
    t_kill = time.time()
    os.kill(victim, signal.SIGKILL)
    assert _until(lambda: sup.count("gpu", " ready.") > ready, timeout_s=90) is not None, sup.log("gpu")[-3000:]
    worker_back_s = sup.last_at("gpu", " ready.") - t_kill
    assert sup.pid("gpu") not in (0, victim)
    done = farm.redis.hlen(rows_key)
    assert done < len(planned) - 64, "the run ended before the Redis restart: make it longer"

    # 2. Redis restarts (kill -9; AOF on): the workers reconnect by themselves.
    connected = {role: sup.count(role, "Connected to redis") for role in ("cpu", "gpu")}
    t_restart = time.time()
    outage_s = server.restart(kill=True)
    for role in connected:
        assert _until(lambda r=role: sup.count(r, "Connected to redis") > connected[r], timeout_s=90) is not None, \
            sup.log(role)[-3000:]
    reconnect_s = {role: round(sup.last_at(role, "Connected to redis") - t_restart, 1) for role in connected}

    _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, err
    kit.assert_exactly_once(farm, run_id, planned)
    states = sup.farm("status").stdout
    assert states.count("RUNNING") == 2 and "FATAL" not in states, states
    for role in ("cpu", "gpu"):
        assert "Unrecoverable" not in sup.log(role), sup.log(role)[-3000:]
    cost = kit.fault_cost(farm, run_id, "supervised farm: gpu worker kill -9, then Redis kill -9 (AOF)",
                          t_kill, planned=len(planned), llm_calls=kit.llm_calls(sim) - calls,
                          stderr=err)  # fmt: skip
    print("supervised-recovery " + json.dumps({
        **cost,
        "gpu_worker_ready_after_kill_s": round(worker_back_s, 1),
        "redis_down_s": round(outage_s, 1),
        "workers_reconnected_after_redis_went_down_s": reconnect_s,
    }))
