"""Distributed runs: plan, check, enqueue a sweep's jobs on Redis and follow it."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from qfarm.common.models import Mode
from qfarm.common.settings import Settings
from qfarm.common.vocab import RunStatus
from qfarm.producer.rundir import create_run_dir, read_status, this_process, write_status
from qfarm.producer.runs.capacity import check_plan_fits
from qfarm.producer.runs.follow import follow_to_end, reconciler
from qfarm.producer.runs.services import (
    celery_app,
    corpus_label,
    enqueue_counted,
    open_local_retriever,
    require_endpoints_for_workers,
    run_manifest,
)
from qfarm.producer.runs.sweep import SweepPlan
from qfarm.producer.runs.types import RunResult
from qfarm.producer.store import ProducerStore, connect

if TYPE_CHECKING:
    from qfarm.producer.runs.types import EndpointsFor, OnProgress, QuestionSet, Say, SweepSpec


def run_distributed(spec: SweepSpec, questions: QuestionSet, modes: list[Mode],
                     settings: Settings, endpoints: EndpointsFor, on_progress: OnProgress | None,
                     say: Say, *, detach: bool, index_progress: bool) -> RunResult:
    require_endpoints_for_workers(settings)
    client = connect(settings.redis_url)
    retriever = open_local_retriever(settings, progress=index_progress)
    with endpoints(settings) as eps:
        pass  # the workers call the endpoints; this only checks they answer
    plan = SweepPlan(
        manifest=run_manifest(spec, questions, modes, settings, eps, retriever, eager=False,
                           corpus=corpus_label(retriever), live_traces=True),
        questions=questions.questions,
    )
    check_plan_fits(plan.manifest, settings, client)
    app = celery_app(settings)
    store = ProducerStore(client)
    run_dir = create_run_dir(settings.results_dir, plan.manifest)
    store.put_manifest(plan.manifest)
    write_status(run_dir, read_status(run_dir).started(time.time(), this_process(), enqueueing=True))
    t0 = time.perf_counter()
    try:
        sent = enqueue_counted(app, store, plan.jobs(), bundle_size=settings.bundle_size)
    except KeyboardInterrupt:
        write_status(run_dir, read_status(run_dir).enqueue_interrupted())
        return RunResult(plan.manifest, run_dir, RunStatus.ENQUEUE_INTERRUPTED)
    elapsed = time.perf_counter() - t0
    write_status(run_dir, read_status(run_dir).jobs_sent(sent))
    say(f"run {plan.manifest.run_id}: enqueued {sent} jobs in {elapsed:.2f}s "
        f"({sent / max(elapsed, 1e-9):,.0f} jobs/s)")
    if detach:
        return RunResult(plan.manifest, run_dir, RunStatus.RUNNING, enqueued=sent, enqueue_s=elapsed)
    result = follow_to_end(store, run_dir, plan.manifest, settings, on_progress, say,
                     reconcile=reconciler(app, plan, store, settings.bundle_size, say))
    return dataclasses.replace(result, enqueued=sent, enqueue_s=elapsed)
