"""The jobs half of ``bench.perf.scale``: eager and distributed sweeps of N jobs.

Each point is the general set × 3 modes × n (n the smallest giving N jobs or more) on
one zero-latency simulator (SIMULATED: the endpoint is not the subject). A distributed
point gets its own redis-server (so ``used_memory_peak`` is that run's), is enqueued
by one child process with no worker running (enqueue time, producer RSS, Redis bytes
per pending job), then drained by Celery workers (the README's split: a prefork worker
for retrieve/verify, a threads worker for generate) while a second child follows it
(the aggregator: rows.jsonl and summary.md) and this process samples the workers' RSS
and scrapes ``/metrics``. Then ``qfarm report``, ``qfarm compare`` (eager against
distributed at the same N) and the viewer run on the finished rows, each in a child.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.perf.farmkit import REPO, farm_env, workers
from bench.perf.scale_children import GENERAL, spawn

# figure -> unit; KINDS: "grows" (a time or a size that may grow at most linearly),
# "flat" (memory and per-job figures, expected not to grow), "rate" (jobs/s).
UNITS: dict[str, str] = {
    "eager: wall": "s",
    "eager: jobs/s": "",
    "eager: process peak RSS": "MB",
    "eager: last row → summary.md": "s",
    "enqueue": "s",
    "enqueue: producer peak RSS": "MB",
    "Redis bytes per pending job": "B",
    "Redis peak memory": "MB",
    "distributed: jobs/s": "",
    "aggregator peak RSS": "MB",
    "worker peak RSS (largest process)": "MB",
    "distributed: last row → summary.md": "s",
    "/metrics scrape, run live (median)": "ms",
    "qfarm report": "s",
    "qfarm report peak RSS": "MB",
    "qfarm compare": "s",
    "qfarm compare peak RSS": "MB",
    "viewer first load": "s",
    "viewer filtered page": "s",
    "viewer peak RSS": "MB",
}
KINDS: dict[str, str] = {name: ("flat" if unit in ("MB", "B") or name.startswith("/metrics")
                                else "rate" if name.endswith("jobs/s") else "grows")
                         for name, unit in UNITS.items()}
KINDS["Redis peak memory"] = "grows"  # rows stay in Redis (ROW_TTL_S): linear by design


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server(work: Path) -> Iterator[str]:
    """A private redis-server on a free port; yields its URL (database 0)."""
    import redis

    port = free_port()
    work.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(work)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _tree(pid: int) -> list[int]:
    out = [pid]
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    for kid in kids:
        out += _tree(int(kid))
    return out


class Sampler:
    """Peak RSS of worker processes and /metrics scrape times, sampled while a run is live."""

    def __init__(self, roots: list[int], redis_url: str) -> None:
        self.roots = roots
        self.redis_url = redis_url
        self.peak_rss = 0.0
        self.scrapes_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        from prometheus_client import CollectorRegistry, generate_latest

        from qfarm.producer.http.metrics import FarmCollector
        from qfarm.producer.store import ProducerStore, connect

        registry = CollectorRegistry()
        registry.register(FarmCollector(ProducerStore(connect(self.redis_url))))
        tick = 0
        while not self._stop.wait(0.5):
            for root in self.roots:
                for pid in _tree(root):
                    self.peak_rss = max(self.peak_rss, rss_mb(pid))
            tick += 1
            if tick % 4 == 0:
                t0 = time.perf_counter()
                generate_latest(registry)
                self.scrapes_ms.append((time.perf_counter() - t0) * 1000)


def rows_clock(rows_path: Path) -> tuple[int, float | None, float | None]:
    """(rows, first started_at, last finished_at), streamed."""
    n, first, last = 0, None, None
    with rows_path.open("rb") as fh:
        for line in fh:
            row = json.loads(line)
            n += 1
            s, f = row.get("started_at"), row.get("finished_at")
            if s is not None:
                first = s if first is None else min(first, s)
            if f is not None:
                last = f if last is None else max(last, f)
    return n, first, last


def _after_run(prefix: str, run_dir: Path, fig: dict[str, float | None]) -> None:
    """Jobs/s and the summary's delay from the rows; report and viewer on them."""
    n, first, last = rows_clock(run_dir / "rows.jsonl")
    if first is not None and last is not None and last > first:
        fig[f"{prefix}: jobs/s"] = n / (last - first)
    if last is not None:
        fig[f"{prefix}: last row → summary.md"] = max(
            (run_dir / "summary.md").stat().st_mtime - last, 1e-3)


def _report_and_viewer(run_dir: Path, fig: dict[str, float | None]) -> None:
    rep = spawn("cli", "report", str(run_dir))
    fig["qfarm report"], fig["qfarm report peak RSS"] = rep["seconds"], rep["rss_mb"]
    view = spawn("viewer", str(run_dir.parent), run_dir.name)
    fig["viewer first load"] = view["first_load_s"]
    fig["viewer filtered page"] = view["filtered_s"]
    fig["viewer peak RSS"] = view["rss_mb"]


def eager_point(jobs: int, work: Path, index: Path, sim_url: str,
                fig: dict[str, float | None], questions: Path) -> Path:
    results = work / f"eager-{jobs}"
    res = spawn("sweep", "eager", str(jobs), str(results), str(index), sim_url, "",
                str(questions))
    run_dir = Path(res["run_dir"])
    fig["eager: wall"] = res["seconds"]
    fig["eager: process peak RSS"] = res["rss_mb"]
    _after_run("eager", run_dir, fig)
    _report_and_viewer(run_dir, fig)
    print(f"  eager {res['jobs']:,} jobs: {res['status']} in {res['seconds']:.1f}s", flush=True)
    return run_dir


def distributed_point(jobs: int, work: Path, index: Path, sim_url: str,
                      fig: dict[str, float | None], questions: Path) -> Path:
    import redis

    results = work / f"dist-{jobs}"
    with redis_server(work / f"redis-{jobs}") as url:
        client = redis.Redis.from_url(url)
        mem0 = int(client.info("memory")["used_memory"])
        res = spawn("sweep", "distributed", str(jobs), str(results), str(index), sim_url, url,
                    str(questions))
        mem1 = int(client.info("memory")["used_memory"])
        fig["enqueue"] = res["enqueue_s"]
        fig["enqueue: producer peak RSS"] = res["rss_mb"]
        fig["Redis bytes per pending job"] = (mem1 - mem0) / res["jobs"]
        env = farm_env(QFARM_REDIS_URL=url, QFARM_LLM_ENDPOINTS=sim_url,
                       QFARM_INDEX_PATH=str(index))
        spec = [(f"scale-cpu-{jobs}", "retrieve,verify", "prefork", 2),
                (f"scale-gpu-{jobs}", "generate", "threads", 16)]
        with workers(env, spec, work) as procs:
            follow = subprocess.Popen(
                [sys.executable, "-m", "bench.perf.scale", "--child", "follow", res["run_id"],
                 str(results), str(index), sim_url, url],
                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            with Sampler([p.pid for p in procs], url) as sampler:
                out, err = follow.communicate()
        if follow.returncode != 0:
            raise RuntimeError(f"follower failed:\n{err[-3000:]}")
        agg = json.loads(out.strip().splitlines()[-1])
        fig["aggregator peak RSS"] = agg["rss_mb"]
        fig["worker peak RSS (largest process)"] = sampler.peak_rss
        if sampler.scrapes_ms:
            fig["/metrics scrape, run live (median)"] = statistics.median(sampler.scrapes_ms)
        fig["Redis peak memory"] = int(client.info("memory")["used_memory_peak"]) / 2**20
    run_dir = Path(res["run_dir"])
    _after_run("distributed", run_dir, fig)
    print(f"  distributed {res['jobs']:,} jobs: {agg['status']}, enqueue {res['enqueue_s']:.1f}s, "
          f"follow {agg['seconds']:.1f}s", flush=True)
    return run_dir


def measure(sizes: list[int], drivers: list[str], work: Path, *,
            eager_up_to: int | None = None,
            questions: int | None = None) -> dict[int, dict[str, float | None]]:
    from qfarm.common.settings import Settings
    from qfarm.ops.sim.launch import start_simulator
    from qfarm.worker.retrieval import ensure_default_index

    question_file = GENERAL
    if questions:
        question_file = work / f"general-{questions}.jsonl"
        lines = GENERAL.read_text(encoding="utf-8").splitlines()
        question_file.write_text("\n".join(lines[:questions]) + "\n", encoding="utf-8")
    index = ensure_default_index(Settings(data_dir=Path(os.environ.get(
        "QFARM_DATA_DIR", Path.home() / ".cache" / "qfarm"))), progress=False)
    points: dict[int, dict[str, float | None]] = {}
    with start_simulator(ttft_ms=0, tpot_ms=0, max_num_seqs=512) as sim:
        for jobs in sizes:
            print(f"jobs {jobs:,}:", flush=True)
            fig: dict[str, float | None] = {}
            runs: list[Path] = []
            eager = "eager" in drivers and (eager_up_to is None or jobs <= eager_up_to)
            if eager:
                runs.append(eager_point(jobs, work, index, sim.url, fig, question_file))
            if "distributed" in drivers:
                dist_fig: dict[str, float | None] = {}
                runs.append(distributed_point(jobs, work, index, sim.url, dist_fig, question_file))
                if not eager:
                    _report_and_viewer(runs[-1], dist_fig)
                fig.update({k: v for k, v in dist_fig.items() if k not in fig})
            if len(runs) == 2:
                cmp = spawn("cli", "compare", str(runs[0]), str(runs[1]))
                fig["qfarm compare"], fig["qfarm compare peak RSS"] = cmp["seconds"], cmp["rss_mb"]
            points[jobs] = fig
    return points
