"""Eager runs: every job in this process through the in-process runner (the stages
concurrently, or one job at a time), and resuming one."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from qfarm.common.errors import InputError
from qfarm.common.models import Job, Manifest, Mode
from qfarm.common.settings import Settings, load_settings
from qfarm.common.vocab import RunStatus
from qfarm.producer import interrupts
from qfarm.producer.reports.summary import warm_plotting
from qfarm.producer.rundir import (
    create_run_dir,
    is_disk_full,
    producer_alive,
    read_manifest,
    read_status,
    stopped_by_full_disk,
    this_process,
    write_status,
)
from qfarm.producer.runs.aggregator import Aggregator
from qfarm.producer.runs.capacity import check_plan_fits
from qfarm.producer.runs.follow import finish_run, newest_row_finished_at
from qfarm.producer.runs.services import (
    check_same_preflight,
    corpus_label,
    eager_services,
    open_local_retriever,
    run_manifest,
)
from qfarm.producer.runs.sweep import Follower, SweepPlan, run_questions
from qfarm.producer.runs.types import (
    Endpoints,
    EndpointsFor,
    OnProgress,
    QuestionSet,
    RunResult,
    SweepSpec,
    configured_endpoints,
)
from qfarm.producer.store import ProducerStore

log = logging.getLogger(__name__)

# The follower of an in-process run, opened on its in-memory store: the one that follows
# every run (``sweep.Follower``), its runner calling ``step`` between jobs.
FollowerFor = Callable[[ProducerStore], Follower]


@contextlib.contextmanager
def _throughput() -> Iterator[None]:
    """The runner's interpreter settings (``throughput_mode``) over a whole eager run: its
    plan classifies every question and its summary reads every row back, and the cyclic
    collector's passes over the run's caches cost those parts as they cost the runner
    (about 0.1 s of a 1,976-job sweep's plan and summary, bench/README 'CPU per job')."""
    from qfarm.worker.runner import throughput_mode  # the worker's stack: eager runs only

    with throughput_mode():
        yield


def run_eager(spec: SweepSpec, questions: QuestionSet, modes: list[Mode], settings: Settings,
               endpoints: EndpointsFor, on_progress: OnProgress | None,
               index_progress: bool, *, serial: bool = False) -> RunResult:
    with _throughput():
        return _run_eager(spec, questions, modes, settings, endpoints, on_progress,
                          index_progress, serial=serial)


def _run_eager(spec: SweepSpec, questions: QuestionSet, modes: list[Mode], settings: Settings,
               endpoints: EndpointsFor, on_progress: OnProgress | None,
               index_progress: bool, *, serial: bool) -> RunResult:
    retriever = open_local_retriever(settings, progress=index_progress)
    with _searching(retriever, settings, len(questions.questions), serial) as retriever, \
            endpoints(settings) as eps:  # fmt: skip
        settings = eps.apply(settings)
        plan = SweepPlan(
            manifest=run_manifest(spec, questions, modes, settings, eps, retriever, eager=True,
                               corpus=corpus_label(retriever)),
            questions=questions.questions,
        )
        check_plan_fits(plan.manifest, settings)
        run_dir = create_run_dir(settings.results_dir, plan.manifest)
        write_status(run_dir, read_status(run_dir).started(time.time(), this_process(), enqueueing=False))
        return _execute_eager(plan, plan.jobs(), run_dir, settings, eps, retriever, on_progress,
                              serial=serial)


@contextlib.contextmanager
def _searching(retriever: Any, settings: Settings, questions: int, serial: bool) -> Iterator[Any]:
    """The retriever an eager run searches with: the embedded index in a process beside
    this one when that pays (``search_beside``), started first, while this process is
    still alone (a fork) and plans the run; closed (its process stopped) when the run ends."""
    from qfarm.worker.retrieval.beside import search_beside  # the worker's stack: eager runs only

    searching = search_beside(retriever, questions=questions, endpoints=len(settings.endpoints),
                              enabled=settings.eager_search_process and not serial)  # fmt: skip
    try:
        yield searching
    finally:
        if searching is not retriever:
            searching.close()


def resume_eager(
    run_id: str,
    *,
    settings: Settings | None = None,
    on_progress: OnProgress | None = None,
    endpoints: EndpointsFor = configured_endpoints,
    serial: bool = False,
) -> RunResult:
    """Run, in this process, the jobs of an eager run that have no row in its rows.jsonl
    (``qfarm sweep --resume RUN --eager``): an interrupted or killed eager run's rows are
    valid, and its job ids are fixed by its manifest and question file."""
    from qfarm.producer.runs.aggregator import cut_partial_line, file_rows

    settings = settings or load_settings()
    run_dir = settings.results_dir / run_id
    manifest = read_manifest(run_dir)
    if not manifest.eager:
        raise InputError(f"run {run_id} is a distributed run: resume it without --eager "
                         f"(qfarm sweep --resume {run_id})")
    status = read_status(run_dir)
    alive = producer_alive(status)
    status.check_ended(run_id, alive, then="stop it first or wait for it to end")
    plan = SweepPlan(manifest=manifest, questions=run_questions(manifest))
    rows_path = run_dir / "rows.jsonl"
    cut_partial_line(rows_path)  # a line the killed process was writing: its job runs again
    have = {job_id for job_id, _ in file_rows(rows_path)}
    missing = [job for job in plan.jobs() if job.job_id not in have]
    # The time the run stood still since its last row or its recorded end: its wall time
    # leaves it out.
    resumed = status.resumed(time.time(), this_process(), jobs=len(missing),
                             producer_alive=alive, run_id=run_id,
                             last_row_at=newest_row_finished_at(rows_path))
    retriever = open_local_retriever(settings, progress=False)
    questions = len({job.question.text for job in missing})
    with _throughput(), _searching(retriever, settings, questions, serial) as retriever:
        check_same_preflight(manifest, (q.text for q in plan.questions), retriever,
                             "resume it")
        with endpoints(settings) as eps:
            settings = eps.apply(settings)
            write_status(run_dir, resumed)
            return _execute_eager(plan, missing, run_dir, settings, eps, retriever, on_progress,
                                  serial=serial)


def run_in_process(manifest: Manifest, jobs: Iterable[Job], follower_of: FollowerFor,
                   settings: Settings, retriever: Any, n_endpoints: int,
                   progress: OnProgress | None, *, serial: bool) -> tuple[ProducerStore, Follower, bool]:
    """Run ``jobs`` of ``manifest`` in this process over an in-memory Redis, followed by the
    follower ``follower_of`` opens on it (it drains their rows and reports ``progress`` as
    they land): through the in-process runner, as many jobs in flight as the endpoints take from
    one process, or with ``serial`` one job at a time, each to its row before the next
    starts. Eager sweeps, resumes and retries all run here. Returns the store, the
    follower and whether the jobs ran to the end (False: a Ctrl-C, or SIGTERM for the
    command line, stopped them; the rows so far are drained)."""
    svc, store = eager_services(settings, retriever)
    store.put_manifest(manifest)
    follower = follower_of(store)

    def tick() -> None:
        warm_plotting()  # once rows land: the start-up's CPU is spent by then
        follower.step(progress)

    try:
        try:
            from qfarm.worker.runner import InProcessRunner, cpu_threads_for

            if serial:  # each job to its row, and a progress report, before the next starts
                runner = InProcessRunner(svc, max_inflight=1, bundle_size=1, cpu_threads=1)
                for job in jobs:
                    runner.run([job], tick=tick)
            else:
                inflight = n_endpoints * max(1, settings.llm_max_inflight_per_endpoint)
                threads = cpu_threads_for(retriever)
                InProcessRunner(svc, max_inflight=inflight, bundle_size=settings.bundle_size,
                                cpu_threads=threads).run(jobs, tick=tick)  # fmt: skip
        finally:
            svc.close()
    except KeyboardInterrupt:
        interrupts.handled()
        follower.step()
        return store, follower, False
    follower.step()
    return store, follower, True


def _execute_eager(plan: SweepPlan, jobs: Iterable[Job], run_dir: Path, settings: Settings,
                   eps: Endpoints, retriever: Any, on_progress: OnProgress | None, *,
                   serial: bool) -> RunResult:
    """Run ``jobs`` in this process, appending their rows to the run's rows.jsonl. A Ctrl-C
    (or SIGTERM, for the command line) ends the run as interrupted with its rows so far."""
    run_id, n_jobs = plan.manifest.run_id, plan.manifest.n_jobs

    rows_path = run_dir / "rows.jsonl"
    aggregators: list[Aggregator] = []

    def follow(store: ProducerStore) -> Follower:
        aggregators.append(Aggregator(store, run_id, rows_path, forget_drained=True))
        return Follower(store, plan.manifest, rows_path, aggregator=aggregators[-1],
                        say=log.warning)

    try:
        store, _, finished = run_in_process(plan.manifest, jobs, follow, settings,
                                            retriever, len(eps.urls), on_progress, serial=serial)
        agg = aggregators[-1]
        if not finished:
            return finish_run(plan.manifest, run_dir, agg.written, interrupted=True)
        error = store.progress(run_id, n_jobs).error
        if error:
            write_status(run_dir, read_status(run_dir).failed(error, rows=agg.written))
            return RunResult(plan.manifest, run_dir, RunStatus.FAILED, agg.written, error=error)
        return finish_run(plan.manifest, run_dir, agg.written)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        written = aggregators[0].written if aggregators else 0
        raise stopped_by_full_disk(run_dir, run_id, exc, written) from None
