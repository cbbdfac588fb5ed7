"""A small real farm for integration tests: Redis database, simulator, Celery workers.

Workers are real ``celery worker`` processes started with the same command a
user runs; the simulator is a real HTTP server process; Redis is the machine's
server, one dedicated database per test, flushed before and after.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
TEST_DB = int(os.environ.get("QFARM_TEST_REDIS_DB", "9"))
# Another port lets several checkouts run the suite at once, each against its own server.
TEST_PORT = int(os.environ.get("QFARM_TEST_REDIS_PORT", "6379"))


def redis_url(db: int = TEST_DB) -> str:
    return f"redis://127.0.0.1:{TEST_PORT}/{db}"


@dataclass
class Farm:
    """Environment and processes of one test's farm."""

    env: dict[str, str]
    log_dir: Path
    workers: list[subprocess.Popen] = field(default_factory=list)

    @property
    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.env["QFARM_REDIS_URL"])

    def start_worker(
        self,
        name: str,
        queues: str = "retrieve,generate,verify,interactive",
        pool: str = "threads",
        concurrency: int = 8,
        wait: bool = True,
    ) -> subprocess.Popen:
        log = (self.log_dir / f"worker-{name}.log").open("ab")
        proc = subprocess.Popen(
            [
                str(VENV_BIN / "celery"), "-A", "qfarm.worker", "worker",
                "-Q", queues, "-P", pool, "-c", str(concurrency),
                "-n", f"{name}@%h", "--without-gossip", "--without-mingle",
                "--loglevel", "INFO",
            ],
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.workers.append(proc)
        if wait:
            self.wait_ready(name, proc)
        return proc

    def wait_ready(self, name: str, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
        path = self.log_dir / f"worker-{name}.log"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"worker {name} exited: {path.read_text()[-3000:]}")
            if b" ready." in path.read_bytes():
                return
            time.sleep(0.2)
        raise RuntimeError(f"worker {name} not ready in {timeout_s}s: {path.read_text()[-3000:]}")

    def worker_log(self, name: str) -> str:
        return (self.log_dir / f"worker-{name}.log").read_text(errors="replace")

    def kill9(self, proc: subprocess.Popen) -> None:
        """SIGKILL the worker's whole process group (main process and children)."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=15)
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait(timeout=10)
        self.workers.clear()

    def qfarm(self, *args: str, timeout_s: float = 300.0, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(VENV_BIN / "qfarm"), *args],
            cwd=REPO,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def qfarm_bg(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [str(VENV_BIN / "qfarm"), *args],
            cwd=REPO,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )


    def rows(self, run_id: str) -> dict[str, dict]:
        raw = self.redis.hgetall(f"qfarm:run:{run_id}:rows")
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    @staticmethod
    def wait_for(predicate, timeout_s: float = 60.0, poll_s: float = 0.2) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(poll_s)
        return bool(predicate())


@pytest.fixture(scope="session")
def simulator_url():
    """One zero-latency simulator process for the distributed tests."""
    from qfarm.ops.sim.launch import start_simulator

    handle = start_simulator(ttft_ms=0, tpot_ms=0, max_num_seqs=256)
    try:
        yield handle.url
    finally:
        handle.stop()


@pytest.fixture
def farm(tmp_path: Path, default_index: Path, simulator_url: str):
    """Dedicated Redis database (flushed around the test), env for workers and CLI."""
    client = redis.Redis.from_url(redis_url())
    client.flushdb()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env.update(
        QFARM_REDIS_URL=redis_url(),
        QFARM_LLM_ENDPOINTS=simulator_url,
        QFARM_INDEX_PATH=str(default_index),
        QFARM_RESULTS_DIR=str(tmp_path / "results"),
        QFARM_VISIBILITY_TIMEOUT_S="8",
        QFARM_BROKER_SOCKET_TIMEOUT_S="10",
        PYTHONUNBUFFERED="1",
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    f = Farm(env=env, log_dir=logs)
    try:
        yield f
    finally:
        f.stop_all()
        client.flushdb()
