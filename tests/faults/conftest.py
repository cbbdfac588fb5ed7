"""Fixtures of the fault suite: a Redis server of its own, a simulator, a farm on both.

Each test gets a private ``redis-server`` on a free port (with a data directory,
so it can be restarted with or without AOF, gracefully or by ``kill -9``), real
``celery worker`` processes and the real ``qfarm`` CLI. The farm helpers are
the distributed tests' (tests/producer/conftest.py), loaded by path. ``hosts`` spreads a
farm over network namespaces (netns.py, netfarm.py, faultproxy.py: as root only; the
scenarios skip with one line elsewhere).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


TESTS = Path(__file__).resolve().parents[1]
Farm = _load("qfarm_farm_helpers", TESTS / "producer" / "conftest.py").Farm

# Short enough that a dead worker's messages come back within seconds.
VISIBILITY_TIMEOUT_S = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RedisServer:
    """A redis-server process this test owns: restart it, kill it, with or without AOF."""

    port: int
    data_dir: Path
    aof: bool
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def start(self) -> None:
        exe = shutil.which("redis-server")
        assert exe, "redis-server is not installed"
        log = (self.data_dir / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir),
             "--save", "", "--appendonly", "yes" if self.aof else "no", "--daemonize", "no"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if self.client().ping():
                    return
            except redis.exceptions.BusyLoadingError:
                pass
            except redis.exceptions.ConnectionError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on {self.port} did not start")

    def shutdown(self) -> None:
        """Graceful: SHUTDOWN (an AOF server flushes its file first)."""
        try:
            self.client().shutdown(nosave=not self.aof)
        except redis.exceptions.ConnectionError:
            pass
        assert self.proc is not None
        self.proc.wait(timeout=20)

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def restart(self, *, kill: bool = False, down_s: float = 2.0) -> float:
        """Stop (SHUTDOWN, or SIGKILL), stay down ``down_s``, start again; returns the outage in s."""
        t0 = time.monotonic()
        self.kill9() if kill else self.shutdown()
        time.sleep(down_s)
        self.start()
        return time.monotonic() - t0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _redis_server(tmp_path: Path, aof: bool):
    data = tmp_path / ("redis-aof" if aof else "redis")
    data.mkdir()
    server = RedisServer(port=free_port(), data_dir=data, aof=aof)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server(tmp_path: Path):
    """A private Redis without persistence: a restart loses everything."""
    yield from _redis_server(tmp_path, aof=False)


@pytest.fixture
def aof_redis_server(tmp_path: Path):
    """A private Redis with ``appendonly yes``: a restart keeps what was written."""
    yield from _redis_server(tmp_path, aof=True)


@pytest.fixture(scope="session")
def simulator():
    from qfarm.ops.sim.launch import start_simulator

    handle = start_simulator(ttft_ms=0, tpot_ms=0, max_num_seqs=256)
    try:
        yield handle
    finally:
        handle.stop()


def make_farm(tmp_path: Path, server: RedisServer, endpoints: str, index: Path, **env: str) -> Farm:
    base = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    base.update(
        QFARM_REDIS_URL=server.url,
        QFARM_LLM_ENDPOINTS=endpoints,
        QFARM_INDEX_PATH=str(index),
        QFARM_RESULTS_DIR=str(tmp_path / "results"),
        QFARM_VISIBILITY_TIMEOUT_S=str(VISIBILITY_TIMEOUT_S),
        QFARM_BROKER_SOCKET_TIMEOUT_S="5",
        # The scenarios stop a run part-way (kill a worker after 40 of 120 rows, ...): they
        # need more bundles than the workers run at once, so not the sweep default's 32.
        QFARM_BUNDLE_SIZE="8",
        PYTHONUNBUFFERED="1",
        # A process that hangs is sent SIGABRT (``interrupt``): it prints every thread's stack.
        PYTHONFAULTHANDLER="1",
    )
    base.update(env)  # a test's own settings win (e.g. the default bundle size)
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    return Farm(env=base, log_dir=logs)


@pytest.fixture
def farm_on(tmp_path: Path, default_index: Path, simulator):
    """``farm_on(server)``: a farm whose workers and CLI use that Redis server."""
    farms: list[Farm] = []

    def build(server: RedisServer, endpoints: str | None = None, **env: str) -> Farm:
        f = make_farm(tmp_path, server, endpoints or simulator.url, default_index, **env)
        farms.append(f)
        return f

    try:
        yield build
    finally:
        for f in farms:
            f.stop_all()


def file_ids(farm: Farm, run_id: str) -> list[str]:
    path = Path(farm.env["QFARM_RESULTS_DIR"]) / run_id / "rows.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["job_id"] for line in path.read_text().splitlines()]


def assert_exactly_once(farm: Farm, run_id: str, planned: set[str]) -> None:
    """The invariant: every planned job id has exactly one row, in Redis and in rows.jsonl,
    and the summary's counts equal the distinct ids."""
    ids = file_ids(farm, run_id)
    dupes = [j for j, n in Counter(ids).items() if n > 1]
    assert not dupes, f"{len(dupes)} job ids twice in rows.jsonl"
    assert set(ids) == planned, f"missing {len(planned - set(ids))}, extra {len(set(ids) - planned)}"
    assert set(farm.rows(run_id)) == planned
    assert farm.redis.llen(f"qfarm:run:{run_id}:log") == len(planned)
    run_dir = Path(farm.env["QFARM_RESULTS_DIR"]) / run_id
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "complete" and status["rows"] == len(planned), status
    summary = (run_dir / "summary.md").read_text()
    # "N of N expected", and the error rows named when there are any (they count as rows).
    n = len(planned)
    assert re.search(rf"\| rows \| {n} of {n} expected(; \d+ of {n} rows are errors \([\d.]+ %\))? \|",
                     summary), summary[:800]


QUESTIONS = _load("qfarm_distributed_tests", TESTS / "producer" / "runs" / "test_distributed.py").QUESTIONS[:10]


def planned_ids(n: int, questions: list[str] = QUESTIONS) -> set[str]:
    from qfarm.common.jobs import make_job_id
    from qfarm.common.models import ALL_MODES
    from qfarm.common.questions import question_id_for

    return {make_job_id(question_id_for(q), m, i) for q in questions for m in ALL_MODES for i in range(n)}


def run_id_from(text: str) -> str:
    match = re.search(r"run (\S+?):", text)
    assert match, text
    return match.group(1)


def question_file(tmp_path: Path) -> Path:
    path = tmp_path / "q.txt"
    path.write_text("\n".join(QUESTIONS) + "\n")
    return path


def detached_sweep(farm: Farm, tmp_path: Path, n: int) -> str:
    """Enqueue a sweep without following it; returns its run id."""
    res = farm.qfarm("sweep", str(question_file(tmp_path)), "-n", str(n), "--detach", "--quiet")
    assert res.returncode == 0, res.stderr
    return run_id_from(res.stderr)


def followed_sweep(farm: Farm, tmp_path: Path, n: int,
                   *options: str) -> tuple[subprocess.Popen, str, bytes]:  # fmt: skip
    """A following ``qfarm sweep`` (with ``options``) in the background; returns it, its run
    id and rows key."""
    proc = farm.qfarm_bg("sweep", str(question_file(tmp_path)), "-n", str(n), "--quiet", *options)
    assert farm.wait_for(lambda: farm.redis.keys("qfarm:run:*:rows"), timeout_s=60)
    (rows_key,) = farm.redis.keys("qfarm:run:*:rows")
    return proc, rows_key.decode().split(":")[2], rows_key


def interrupt(proc: subprocess.Popen, timeout_s: float = 60) -> tuple[str, str]:
    """Ctrl-C a following ``qfarm`` (it detaches); returns its (stdout, stderr).

    Detaching takes well under a second on an idle host; on a loaded 2-core one the
    follower's last drain and status write once took over 20 s, hence the margin.
    """
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # Say where it hangs: the fault handler (PYTHONFAULTHANDLER) prints each thread's stack.
        os.killpg(proc.pid, signal.SIGABRT)
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"{proc.args} still running {timeout_s:.0f}s after Ctrl-C; its stderr:\n{err[-6000:]}")


def llm_calls(sim) -> int:
    """Generation requests the simulator has answered so far (its request log)."""
    return sum(1 for r in sim.stats()["requests"] if "completions" in r["path"])


def fault_cost(farm: Farm, run_id: str, name: str, t_fault: float, *, planned: int,
               llm_calls: int | None = None, stderr: str = "") -> dict:
    """What a fault cost the run, printed for docs/distributed.md (run with -s):
    jobs the producer re-sent, model calls beyond one a job, and the longest stretch
    after the fault with no row landing (time to recover)."""
    finished = sorted(r["finished_at"] for r in farm.rows(run_id).values() if r.get("finished_at"))
    after = [t for t in finished if t >= t_fault]
    before = [t for t in finished if t < t_fault]
    points = ([before[-1]] if before else [t_fault]) + after
    stall = max((b - a for a, b in zip(points, points[1:], strict=False)), default=0.0)
    cost = {
        "fault": name,
        "jobs": planned,
        "resent_by_producer": sum(
            int(a or b) for a, b in re.findall(r"re-enqueued (\d+) jobs without a row|(\d+) jobs had no row", stderr)
        ),
        "llm_calls_beyond_one_a_job": None if llm_calls is None else llm_calls - planned,
        "longest_gap_without_rows_s": round(stall, 1),
    }
    print(f"\nfault-cost {json.dumps(cost)}")
    return cost


# The namespace scenarios' helpers import each other by module name (sys.modules).
netns = _load("netns", Path(__file__).resolve().parent / "netns.py")
netfarm = _load("netfarm", Path(__file__).resolve().parent / "netfarm.py")
faultproxy = _load("faultproxy", Path(__file__).resolve().parent / "faultproxy.py")


@pytest.fixture(scope="session")
def netns_ok() -> None:
    why = netns.available()
    if why:
        pytest.skip(f"network-namespace scenarios skipped: {why}")


@pytest.fixture(scope="module")
def hosts(netns_ok, tmp_path_factory: pytest.TempPathFactory, default_index: Path):
    """A farm over namespace hosts (tests/faults/netfarm.py), one per test module; its
    ``producer_of(redis_url)`` is a ``Farm`` whose CLI and Redis client run in the test's
    namespace (over the control link, never cut)."""
    tmp = tmp_path_factory.mktemp("hosts")
    base = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    base.update(
        QFARM_INDEX_PATH=str(default_index),
        QFARM_RESULTS_DIR=str(tmp / "results"),
        QFARM_VISIBILITY_TIMEOUT_S=str(NET_VISIBILITY_TIMEOUT_S),
        QFARM_BROKER_SOCKET_TIMEOUT_S="5",
        QFARM_BUNDLE_SIZE="8",
        PYTHONUNBUFFERED="1",
        PYTHONFAULTHANDLER="1",
    )
    nf = netfarm.NetFarm(netns.Network(), tmp, base)
    logs = tmp / "logs"
    logs.mkdir(exist_ok=True)
    nf.producer_of = lambda redis_url, **env: Farm(env={**nf.base_env, "QFARM_REDIS_URL": redis_url, **env},
                                                   log_dir=logs)  # fmt: skip
    try:
        yield nf
    finally:
        nf.close()


# The namespace scenarios' visibility timeout: a silent worker's bundles are back in their
# queue within qfarm.worker.leases.redelivery_bound_s(8) = 24 s.
NET_VISIBILITY_TIMEOUT_S = 8


@pytest.fixture
def kit():
    """The suite's helpers, for test modules (which cannot import this conftest)."""
    return SimpleNamespace(
        planned_ids=planned_ids, run_id_from=run_id_from, question_file=question_file,
        detached_sweep=detached_sweep, followed_sweep=followed_sweep, interrupt=interrupt, file_ids=file_ids,
        assert_exactly_once=assert_exactly_once, fault_cost=fault_cost, llm_calls=llm_calls,
        questions=QUESTIONS, proxy_control=faultproxy.control,
    )
