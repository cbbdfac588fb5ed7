"""Worker CPU per job, by stage (retrieval + prompt + verification + messaging).

Two measurements in one run, over the same sweep (the general question set, every
mode, ``-n`` samples, cache off):

* **farm**: real Celery workers on Redis, as the README deploys them (prefork CPU
  worker for retrieve/verify, threads worker for generate), bundles as ``qfarm sweep``
  sends them, but with the LLM answered in-process (``bench/perf/cpu_app.py``: the
  simulator's composer, timed and subtracted) so that what is left is the worker's own
  work. CPU is read from /proc for every worker process. Baseline in the same workers:
  bare no-op Celery tasks, CPU per task.
* **stages**: the same jobs through the stage functions in this process, no Celery,
  timed with ``time.process_time``: preflight, search, prompt (fitting at retrieve,
  rendering at generate), verification (verifier, gold, sidecar), row (build + JSON),
  and the records' JSON between stages. ``messaging`` is the farm figure minus these:
  Celery, kombu, billiard and Redis round trips.

The LLM gateway's own CPU (HTTP client, balancer) is not in these figures:
bench/perf/saturation.py measures it. Prints ``worker_cpu_ms_per_job=`` last.

    python -m bench.perf.worker_cpu [-n 4] [--bundle N] [--noops 2000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.perf.farmkit import (
    REPO,
    bench_redis_url,
    exit_on_sigterm,
    farm_env,
    flush,
    wait_drained,
    workers,
)
from bench.perf.orchestration import _cpu_s, _process_tree


def _stage_costs(jobs: list[Any], retriever: Any, bundle: int) -> dict[str, float]:
    """CPU seconds of each stage over ``jobs``, run in bundles as the workers run them."""
    from bench.perf.cpu_app import CannedGateway
    from qfarm.worker import encoding, pipeline

    spent: dict[str, float] = dict.fromkeys(
        ("preflight", "search", "prompt", "verification", "row", "records_json"), 0.0)

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.process_time()
        out = fn()
        spent[name] += time.process_time() - t0
        return out

    gateway = CannedGateway(None)
    for start in range(0, len(jobs), bundle):
        part = jobs[start:start + bundle]
        records = timed("preflight", lambda p=part: [
            pipeline.preflight_stage(pipeline.begin(j)) for j in p])
        texts = list(dict.fromkeys(r.job.question.text for r in records))
        policy = records[0].job.policy
        timed("search", lambda t=texts, p=policy: retriever.search_many(
            t, top_k=p.top_k, title_boost=p.title_boost))
        # retrieval_stage searches again (the embedded index caches nothing): its cost less
        # the search above is the prompt fitting.
        t0 = time.process_time()
        records = pipeline.retrieval_stage(records, retriever)
        spent["prompt"] += time.process_time() - t0
        records = timed("records_json", lambda rs=records: encoding.parse_records(
            encoding.dump_records(rs)))
        prompts = timed("prompt", lambda rs=records: [pipeline.render_prompt(r) for r in rs])
        answers = gateway.generate_many(
            [(p, pipeline.sampling_for(r), r.job.job_id) for p, r in zip(prompts, records, strict=True)])
        records = [pipeline.with_generation(r, a, time.perf_counter())
                   for r, a in zip(records, answers, strict=True)]
        records = timed("records_json", lambda rs=records: encoding.parse_records(
            encoding.dump_records(rs)))
        records = timed("verification", lambda rs=records: [
            pipeline.verification_stage(r) for r in rs])
        timed("row", lambda rs=records: [pipeline.finish(r).model_dump_json() for r in rs])
    # The prompt figure above includes a second search per distinct question.
    spent["prompt"] = max(0.0, spent["prompt"] - spent["search"])
    return spent


def _sweep(spec: Any, settings: Any) -> list[dict[str, Any]]:
    """``spec`` through the run API, its endpoints declared rather than probed: the workers'
    gateway is canned and nothing listens at the endpoint URL."""
    import contextlib
    import json

    from qfarm.producer import run_sweep
    from qfarm.producer.api import Endpoints

    @contextlib.contextmanager
    def canned(settings: Any) -> Any:
        yield Endpoints(urls=settings.endpoints, simulated=True)

    result = run_sweep(spec, settings=settings, endpoints=canned)
    return [json.loads(line) for line in result.rows_path.read_text().splitlines() if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=4, help="samples per question x mode")
    ap.add_argument("--bundle", type=int, default=None,
                    help="jobs per message (default: QFARM_BUNDLE_SIZE's default, as qfarm sweep)")
    ap.add_argument("--noops", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=2, help="prefork children (CPU stages)")
    ap.add_argument("--threads", type=int, default=4, help="threads of the generate worker")
    ap.add_argument("--quick", action="store_true",
                    help="seconds, figures meaningless: 1 sample, 100 no-op tasks, 20 questions (CI)")
    args = ap.parse_args()
    if args.quick:
        args.n, args.noops = 1, 100
    exit_on_sigterm()

    from bench.perf.cpu_app import CANNED_DIR_ENV
    from bench.perf.noop_app import NOOP_TASK
    from qfarm.common import keys
    from qfarm.common.jobs import expand_jobs
    from qfarm.common.policy import Policy
    from qfarm.common.settings import Settings
    from qfarm.producer import QuestionSet, SweepSpec
    from qfarm.worker.celery import configure_app
    from qfarm.worker.retrieval import ensure_default_index, open_retriever

    tmp = Path(tempfile.mkdtemp(prefix="qfarm-wcpu-"))
    canned = tmp / "canned"
    canned.mkdir()
    index = ensure_default_index(Settings(data_dir=tmp / "data"), progress=False)
    questions = QuestionSet.from_file(REPO / "bench/questions/general.jsonl")
    if args.quick:
        questions = QuestionSet.from_texts(questions.questions[:20], source=questions.source)
    client = flush()
    env = farm_env(QFARM_LLM_ENDPOINTS="http://127.0.0.1:9", QFARM_INDEX_PATH=str(index),
                   **{CANNED_DIR_ENV: str(canned)})
    settings = Settings(redis_url=bench_redis_url(), llm_endpoints="http://127.0.0.1:9")
    bundle = args.bundle or settings.bundle_size
    app = configure_app(settings)
    spec = [("wcpu-cpu", "retrieve,verify", "prefork", args.concurrency),
            ("wcpu-gpu", "generate", "threads", args.threads)]
    with workers(env, spec, tmp, app="bench.perf.cpu_app") as procs:
        noop = app.tasks[NOOP_TASK]
        for i in range(50):  # warm-up: every child opens its connections
            noop.apply_async(args=[{}], queue=keys.SWEEP_STAGES[i % 3].queue)
        wait_drained(client, list(keys.QUEUES))
        watched = _process_tree([p.pid for p in procs])
        pids = [pid for group in watched.values() for pid in group]
        cpu0 = _cpu_s(pids)
        with app.producer_or_acquire() as producer, producer.batch(1000):
            for i in range(args.noops):
                noop.apply_async(args=[{}], producer=producer, argsrepr="", kwargsrepr="",
                                 queue=keys.SWEEP_STAGES[i % 3].queue)
        wait_drained(client, list(keys.QUEUES))
        noop_ms = (_cpu_s(pids) - cpu0) * 1000 / args.noops

        spec_run = SweepSpec(questions=questions, n=args.n, use_cache=False)
        cpu0 = {k: _cpu_s(v) for k, v in watched.items()}
        rows = _sweep(spec_run, settings.model_copy(update={
            "bundle_size": bundle, "index_path": index, "results_dir": tmp / "results"}))
        by_proc = {k: (_cpu_s(v) - cpu0[k]) * 1000 / len(rows) for k, v in watched.items()}
    canned_ms = sum(float(f.read_text() or 0) for f in canned.iterdir()) * 1000 / len(rows)
    client.flushdb()
    errors = sum(1 for r in rows if r["error"])

    jobs = list(expand_jobs("wcpu", questions.questions, list(spec_run.modes), args.n, Policy(),
                            model=settings.model, use_cache=False))
    retriever = open_retriever(settings.model_copy(update={"index_path": index}))
    stages = {k: v * 1000 / len(jobs) for k, v in _stage_costs(jobs, retriever, bundle).items()}
    farm_ms = sum(by_proc.values()) - canned_ms
    messaging = farm_ms - sum(stages.values())

    print("worker CPU per job (simulated answers composed in-process and subtracted; "
          "workers: " + "; ".join(f"{n} -Q {q} -P {p} -c {c}" for n, q, p, c in spec) + ")")
    print(f"jobs={len(rows)} error_rows={errors} bundle_size={bundle}")
    print("farm CPU per job (ms) by process: "
          + " ".join(f"{k}={v:.3f}" for k, v in by_proc.items())
          + f" minus canned answers={canned_ms:.3f}")
    print("stages, in-process (ms per job): " + " ".join(f"{k}={v:.3f}" for k, v in stages.items())
          + f" messaging(farm minus stages)={messaging:.3f}")
    print(f"baseline: a no-op Celery task costs {noop_ms:.3f} ms of worker CPU in the same workers; "
          f"a job costs {farm_ms / noop_ms:.2f} no-op tasks")
    print(f"worker_cpu_ms_per_job={farm_ms:.3f}")


if __name__ == "__main__":
    main()
