"""Start and stop the pieces of a local farm for benchmarks (Redis DB, workers, simulator)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from qfarm.common import keys

if TYPE_CHECKING:
    from qfarm.common.settings import Settings
    from qfarm.producer import SweepSpec

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
BENCH_DB = int(os.environ.get("QFARM_BENCH_REDIS_DB", "12"))
BENCH_PORT = int(os.environ.get("QFARM_BENCH_REDIS_PORT", "6379"))


def bench_redis_url() -> str:
    return f"redis://127.0.0.1:{BENCH_PORT}/{BENCH_DB}"


def farm_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env.update(QFARM_REDIS_URL=bench_redis_url(), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def exit_on_sigterm() -> None:
    """Turn SIGTERM (e.g. from `timeout`) into SystemExit so the cleanup in finally blocks
    stops the workers and simulators this benchmark started."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


@contextmanager
def workers(env: dict[str, str], specs: list[tuple[str, str, str, int]], log_dir: Path,
            app: str = "qfarm.worker"):
    """specs: (name, queues, pool, concurrency); ``app`` the module ``celery -A`` loads.
    Yields once every worker is ready."""
    procs: list[subprocess.Popen] = []
    try:
        for name, queues, pool, conc in specs:
            log = (log_dir / f"{name}.log").open("wb")
            procs.append(subprocess.Popen(
                [str(BIN / "celery"), "-A", app, "worker", "-Q", queues, "-P", pool,
                 "-c", str(conc), "-n", f"{name}@%h", "--without-gossip", "--without-mingle",
                 "--loglevel", "WARNING"],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        _wait_ready(env, len(specs))
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _wait_ready(env: dict[str, str], count: int, timeout_s: float = 90.0) -> None:
    from celery import Celery

    app = Celery(broker=env["QFARM_REDIS_URL"])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        replies = app.control.ping(timeout=1.0) or []
        if len(replies) >= count:
            return
    raise RuntimeError("workers did not start; see their logs")


def flush(url: str | None = None) -> redis.Redis:
    client = redis.Redis.from_url(url or bench_redis_url())
    client.flushdb()
    return client


def wait_drained(client: redis.Redis, queues: list[str], timeout_s: float = 600.0) -> float:
    """Block until the queues and the unacked hash are empty; returns the monotonic time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pipe = client.pipeline()
        for q in queues:
            pipe.llen(q)
        pipe.hlen(keys.UNACKED_KEY)
        if sum(pipe.execute()) == 0:
            return time.monotonic()
        time.sleep(0.02)
    raise TimeoutError("queues did not drain")


def sweep_on_farm(spec: SweepSpec, settings: Settings) -> tuple[list[dict[str, Any]], float]:
    """Run ``spec`` through the run API on workers already started; returns its rows (as
    written to rows.jsonl) and the seconds from the first job's enqueue to the last job's end.

    The wall comes from the rows' own clocks rather than around the call: the call also opens
    the retriever, checks the endpoints, follows at its poll interval and writes the summary,
    none of which a jobs/s figure is about."""
    from qfarm.producer import run_sweep

    result = run_sweep(spec, settings=settings)
    rows = [json.loads(line) for line in result.rows_path.read_text().splitlines() if line.strip()]
    started = [r for r in rows if r["started_at"] is not None]
    enqueued = min(r["started_at"] - (r["timings"]["queue_wait_ms"] or 0.0) / 1000 for r in started)
    return rows, max(r["finished_at"] or r["started_at"] for r in started) - enqueued
