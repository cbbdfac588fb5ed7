"""Orchestration overhead of the distributed pipeline.

Baseline: bare Celery no-op tasks through the same Redis and the same worker
processes. Measured: a sweep through the full pipeline (retrieve → generate →
verify: three tasks per bundle of ``--bundle`` jobs, as ``qfarm sweep`` sends
them; real retrieval and verification) with the simulator at zero latency. Prints ``orchestration_ratio = pipeline jobs/s ÷
no-op tasks/s`` last. Simulated LLM: these are orchestration figures, not model
throughput.

    python -m bench.perf.orchestration [--jobs 1200] [--noops 3000] [--bundle N] [--llm canned]

``--llm canned`` answers in the workers (bench/perf/cpu_app.py: the simulator's composer
in-process, no HTTP): the ratio the farm reaches when the LLM client costs next to nothing,
an upper bound for a cheaper gateway.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.perf.farmkit import (
    bench_redis_url,
    farm_env,
    flush,
    sweep_on_farm,
    wait_drained,
    workers,
)


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (Linux /proc)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _process_tree(roots: list[int]) -> dict[str, list[int]]:
    """Worker main processes and their pool children, by role."""
    out: dict[str, list[int]] = {}
    for i, root in enumerate(roots, start=1):
        out[f"worker{i}-main"] = [root]
        if kids := _children(root):
            out[f"worker{i}-children"] = kids
    return out


def _pids_named(name: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1200)
    ap.add_argument("--noops", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=2, help="prefork children (CPU stages)")
    ap.add_argument("--threads", type=int, default=16, help="threads of the generate worker (README: -c 16)")
    ap.add_argument("--bundle", type=int, default=None,
                    help="jobs per message (default: QFARM_BUNDLE_SIZE's default, as qfarm sweep)")
    ap.add_argument("--shape", choices=["split", "threads"], default="split",
                    help="split: prefork CPU worker + threads generate worker (README); "
                         "threads: one threads worker for all queues")
    ap.add_argument("--llm", choices=["http", "canned"], default="http",
                    help="http: the gateway calls the simulator (default); canned: answers "
                         "composed in the workers, no HTTP (bench/perf/cpu_app.py)")
    ap.add_argument("--quick", action="store_true",
                    help="seconds, figures meaningless: 48 jobs, 100 no-op tasks (CI)")
    args = ap.parse_args()
    if args.quick:
        args.jobs, args.noops, args.threads = 48, 100, 4
    from bench.perf.farmkit import exit_on_sigterm

    exit_on_sigterm()

    from bench.perf.noop_app import NOOP_TASK
    from qfarm.common import keys
    from qfarm.common.models import ALL_MODES, Question
    from qfarm.common.settings import Settings
    from qfarm.ops.sim.launch import start_simulator
    from qfarm.producer import SweepSpec
    from qfarm.worker.celery import configure_app
    from qfarm.worker.retrieval import ensure_default_index

    tmp = Path(tempfile.mkdtemp(prefix="qfarm-orch-"))
    index = ensure_default_index(Settings(data_dir=tmp / "data"), progress=False)
    client = flush()
    with start_simulator(ttft_ms=0, tpot_ms=0, max_num_seqs=512) as sim:
        env = farm_env(QFARM_LLM_ENDPOINTS=sim.url, QFARM_INDEX_PATH=str(index))
        settings = Settings(redis_url=bench_redis_url(), llm_endpoints=sim.url)
        bundle = args.bundle or settings.bundle_size
        app = configure_app(settings)
        queues = list(keys.QUEUES)
        # The deployment the README documents: CPU stages on prefork, the LLM stage on threads.
        spec = [("orch-cpu", "retrieve,verify", "prefork", args.concurrency),
                ("orch-gpu", "generate", "threads", args.threads)]
        if args.shape == "threads":  # one threads worker for every queue (small hosts)
            spec = [("orch-all", "retrieve,generate,verify", "threads", args.threads)]
        worker_app = "bench.perf.cpu_app" if args.llm == "canned" else "bench.perf.noop_app"
        with workers(env, spec, tmp, app=worker_app) as procs:
            # Warm-up: let every child open its retriever and HTTP client.
            noop = app.tasks[NOOP_TASK]
            for i in range(50):
                noop.apply_async(args=[{}], queue=(keys.RETRIEVE.queue, keys.GENERATE.queue)[i % 2])
            wait_drained(client, queues)

            # Baseline: no-op tasks spread over the same two workers' queues. Bare Celery tasks,
            # not a run, so sent by hand: the run API has nothing to say about them.
            t0 = time.monotonic()
            with app.producer_or_acquire() as producer, producer.batch(1000):
                for i in range(args.noops):
                    noop.apply_async(args=[{}], producer=producer, argsrepr="", kwargsrepr="",
                                     queue=keys.SWEEP_STAGES[i % 3].queue)
            t1 = wait_drained(client, queues)
            noop_rate = args.noops / (t1 - t0)

            per = max(1, args.jobs // (len(ALL_MODES) * 10))
            words = ["Beatles", "France", "photosynthesis", "Hamlet", "jazz",
                     "Napoleon", "DNA", "Amazon River", "Mona Lisa", "atom"]
            questions = [Question(id=f"q{i}", text=f"What is known about {w}?") for i, w in enumerate(words)]
            watched = _process_tree([p.pid for p in procs]) | {
                "simulator": [sim.pid], "redis-server": _pids_named("redis-server")}
            cpu0 = {k: _cpu_s(v) for k, v in watched.items()}
            # Through the run API, as qfarm sweep runs it; the Redis CPU now includes its follower's polls.
            rows, wall = sweep_on_farm(
                SweepSpec(questions=questions, modes=ALL_MODES, n=per, use_cache=False),
                settings.model_copy(update={"bundle_size": bundle, "index_path": index,
                                            "results_dir": tmp / "results"}),
            )
            cpu_ms = {k: (_cpu_s(v) - cpu0[k]) * 1000 / len(rows) for k, v in watched.items()}
            pipeline_rate = len(rows) / wall
            errors = sum(1 for r in rows if r["error"])
            stage_ms = {k: statistics.fmean(r["timings"][k] or 0.0 for r in rows)
                        for k in ("retrieval_ms", "llm_ms", "verify_ms", "total_ms")}

    client.flushdb()
    llm = "answers composed in the workers, no HTTP" if args.llm == "canned" else "simulated LLM at zero latency"
    print(f"orchestration benchmark ({llm}; same Redis and workers for "
          "baseline and pipeline: " + "; ".join(f"{n} -Q {q} -P {p} -c {c}" for n, q, p, c in spec) + ")")
    print(f"noop_tasks={args.noops} noop_tasks_per_s={noop_rate:.1f}")
    print(f"pipeline_jobs={len(rows)} bundle_size={bundle} tasks_per_bundle=3 "
          f"pipeline_jobs_per_s={pipeline_rate:.1f} "
          f"error_rows={errors}")
    print("CPU per pipeline job (ms): " + " ".join(f"{k}={v:.2f}" for k, v in cpu_ms.items())
          + f" total={sum(cpu_ms.values()):.2f}; the no-op baseline spends "
          f"{2000 / noop_rate:.2f} ms of the 2 cores' time per task")
    print("mean in-task stage times per job (ms): "
          + " ".join(f"{k}={v:.2f}" for k, v in stage_ms.items()))
    print(f"orchestration_ratio={pipeline_rate / noop_rate:.3f}")


if __name__ == "__main__":
    main()
