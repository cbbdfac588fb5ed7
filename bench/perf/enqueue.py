"""Enqueue rate, Redis memory per pending job, producer and aggregator peak RSS.

* enqueue rate: 100k jobs through ``qfarm.producer.runs.sweep.enqueue_jobs`` (kombu publish
  batches, bundles of ``QFARM_BUNDLE_SIZE`` jobs a message as ``qfarm sweep``
  sends them), against a baseline of plain one-by-one ``apply_async`` of
  one-job messages in the same run;
* Redis memory per pending job: ``used_memory`` growth ÷ pending jobs, for the
  default bundle size and for one job a message;
* producer peak RSS when enqueueing 10k and 100k jobs (flat = no growth with n);
* aggregator peak RSS streaming 10k and 100k rows to rows.jsonl and rendering
  the summary from the file.

These time the producer's enqueue and aggregation stages alone, so they call them
directly rather than ``producer.run_sweep``: a whole run would add the workers' time.

    python -m bench.perf.enqueue [--jobs 100000] [--bundle 8]
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.perf.farmkit import bench_redis_url, flush
from qfarm.common import keys

N_QUESTIONS = 1000


def _questions(count: int):
    from qfarm.common.models import Question

    return [Question(id=f"q{i:05d}", text=f"What is notable about topic number {i} in the corpus?")
            for i in range(count)]


def _plan(run_id: str, jobs: int):
    from qfarm.common.models import ALL_MODES
    from qfarm.common.policy import Policy
    from qfarm.common.settings import DEFAULT_MODEL
    from qfarm.producer.runs.sweep import SweepPlan, make_manifest

    n = max(1, -(-jobs // (N_QUESTIONS * len(ALL_MODES))))
    manifest = make_manifest(
        run_id=run_id, question_file="<bench>", question_file_digest="-", n_questions=N_QUESTIONS,
        modes=list(ALL_MODES), n=n, policy=Policy(), model=DEFAULT_MODEL, endpoints=[],
        simulated=True, retriever="embedded", index_version=None, corpus=None, eager=False,
    )
    return SweepPlan(manifest=manifest, questions=_questions(N_QUESTIONS))


def child_producer(jobs: int, bundle: int) -> None:
    from qfarm.common.settings import Settings
    from qfarm.producer.runs.sweep import enqueue_jobs
    from qfarm.producer.store import ProducerStore, connect
    from qfarm.worker.celery import configure_app

    settings = Settings(redis_url=bench_redis_url())
    app = configure_app(settings)
    plan = _plan(f"rss-{jobs}", jobs)
    ProducerStore(connect(settings.redis_url)).put_manifest(plan.manifest)
    t0 = time.perf_counter()
    sent = enqueue_jobs(app, itertools.islice(plan.jobs(), jobs), bundle_size=bundle)
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"sent": sent, "seconds": dt, "rss_mb": rss}))


def child_aggregator(run_id: str, out: str) -> None:
    from qfarm.common.settings import Settings
    from qfarm.producer.reports.summary import write_summary
    from qfarm.producer.rundir import write_json_atomic
    from qfarm.producer.runs.aggregator import Aggregator
    from qfarm.producer.store import ProducerStore, connect

    store = ProducerStore(connect(Settings(redis_url=bench_redis_url()).redis_url))
    run_dir = Path(out)
    manifest = store.manifest(run_id)
    write_json_atomic(run_dir / "manifest.json", manifest.model_dump(mode="json"))
    agg = Aggregator(store, run_id, run_dir / "rows.jsonl")
    t0 = time.perf_counter()
    agg.drain()
    write_summary(run_dir)
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rows": agg.written, "seconds": dt, "rss_mb": rss}))


def _child(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.perf.enqueue", *args],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fill_rows(client, run_id: str, count: int) -> None:
    """Synthetic rows written with the workers' own write-once script."""
    from qfarm.common.models import Mode, Row, Timings, Verdict
    from qfarm.worker.store import WorkerStore

    plan = _plan(run_id, count)
    store = WorkerStore(client)
    client.set(keys.manifest_key(run_id), plan.manifest.model_dump_json())
    verdicts = list(Verdict)
    pipe = client.pipeline(transaction=False)
    for i, job in enumerate(itertools.islice(plan.jobs(), count)):
        row = Row(run_id=run_id, job_id=job.job_id, question=job.question.text,
                  question_id=job.question.id, mode=Mode(job.mode), sample_index=job.sample_index,
                  verdict=verdicts[i % 3], ratio=(i % 3) / 2, n_claims=3, n_verified=i % 4,
                  violation_kinds=["CITATION_MISMATCH"] if i % 5 == 0 else [],
                  timings=Timings(total_ms=100 + i % 50, llm_ms=80))
        store.write_row(row, pipeline=pipe)
        if i % 2000 == 1999:
            pipe.execute()
    pipe.execute()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--bundle", type=int, default=None, help="jobs per message (default: QFARM_BUNDLE_SIZE's)")
    ap.add_argument("--child", choices=["producer", "aggregator"])
    ap.add_argument("--run-id")
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true", help="seconds, figures meaningless: 2,000 jobs (CI)")
    args = ap.parse_args()
    if args.quick:
        args.jobs = 2000
    if args.child == "producer":
        child_producer(args.jobs, args.bundle or 1)
        return
    if args.child == "aggregator":
        child_aggregator(args.run_id, args.out)
        return

    from qfarm.common.settings import Settings
    from qfarm.worker.celery import configure_app

    client = flush()
    # Baseline: plain apply_async, one round trip per message.
    app = configure_app(Settings(redis_url=bench_redis_url()))
    plan = _plan("baseline", 3000)
    task = app.tasks["qfarm.retrieve"]
    from qfarm.common.jobs import ref_for

    refs = [ref_for(j).model_dump(mode="json", exclude_none=True) for j in plan.jobs()]
    t0 = time.perf_counter()
    for ref in refs:
        task.apply_async(args=[[ref]])
    base_rate = len(refs) / (time.perf_counter() - t0)
    client.flushdb()

    bundle = args.bundle or Settings().bundle_size
    small = _child("--child", "producer", "--jobs", str(args.jobs // 10), "--bundle", str(bundle))
    client.flushdb()
    per_job = {}
    for size in dict.fromkeys((bundle, 1)):
        mem0 = client.info("memory")["used_memory"]
        res = _child("--child", "producer", "--jobs", str(args.jobs), "--bundle", str(size))
        mem1 = client.info("memory")["used_memory"]
        per_job[size] = ((mem1 - mem0) / max(res["sent"], 1), client.llen(keys.RETRIEVE.queue))
        if size == bundle:
            big = res
        client.flushdb()

    tmp = Path(tempfile.mkdtemp(prefix="qfarm-agg-"))
    agg = {}
    for count in (args.jobs // 10, args.jobs):
        run_id = f"agg-{count}"
        _fill_rows(client, run_id, count)
        out = tmp / run_id
        out.mkdir()
        agg[count] = _child("--child", "aggregator", "--run-id", run_id, "--out", str(out))
        client.flushdb()

    rate = big["sent"] / big["seconds"]
    print(f"baseline apply_async one by one: {base_rate:,.0f} jobs/s")
    print(f"enqueue {big['sent']:,} jobs in bundles of {bundle}: {rate:,.0f} jobs/s "
          f"({rate / base_rate:.1f}x baseline)")
    for size, (nbytes, messages) in per_job.items():
        print(f"redis memory per pending job, bundles of {size}: {nbytes:,.0f} bytes "
              f"({big['sent']:,} jobs in {messages:,} messages)")
    print(f"producer peak RSS: {small['rss_mb']:.0f} MB at {small['sent']:,} jobs, "
          f"{big['rss_mb']:.0f} MB at {big['sent']:,} jobs")
    for res in agg.values():
        print(f"aggregator peak RSS: {res['rss_mb']:.0f} MB for {res['rows']:,} rows "
              f"(drain + summary {res['seconds']:.1f}s)")
    print(f"enqueue_jobs_per_s={rate:.0f}")


if __name__ == "__main__":
    main()
