"""The stage chain a sweep's jobs pass, declared once: what each stage does to a bundle.

The order is ``keys.SWEEP_STAGES`` (retrieve → generate → verify): the producer reads
the same tuple for its progress counters without importing the worker. Here each of
those stages gets its step, and everything that moves jobs along walks ``CHAIN``:
the Celery tasks (worker/celery.py registers one task per link, each forwarding to the
next link's queue), the interactive task that runs a job whole (``flow.handle_job``)
and the in-process runner of eager runs (worker/runner.py). Adding a stage is a
``keys.Stage`` in ``SWEEP_STAGES`` and its ``Step`` in ``STEPS``.

Around every step, worker/flow.py does what is common to all: the entry check
(cancelled run, job already has a row, the stage's counter), per-job failure
isolation, and what leaves the stage (rows, or a message to the next one). The first
link also loads the jobs, runs the preflight and serves cache hits before its step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from qfarm.common import keys
from qfarm.common.models import JobRecord
from qfarm.common.vocab import ErrorKind
from qfarm.worker import pipeline
from qfarm.worker.services import Services

log = logging.getLogger("qfarm.worker")


@dataclass(frozen=True)
class Step:
    """One link of the chain."""

    stage: keys.Stage
    # A bundle's records in, the same records out with this stage's part added; a job
    # that fails carries its error in its record (``pipeline``'s stages never raise for it).
    run: Callable[[list[JobRecord], Services], list[JobRecord]]
    # Check the run's cancel flag and the jobs' rows before the step (and count the jobs
    # into the stage). The last link needs no check: the row write is set-if-absent.
    checks_entry: bool = True
    # A job that failed in this step ends as its row here; otherwise it travels on and
    # the later steps pass it through untouched until the last link writes its row.
    ends_failed: bool = False
    # The step is the model call: the in-process runner sends its requests to the async
    # gateway (``pipeline.generation_request``/``with_generation``, the two halves of
    # ``pipeline.generation_stage``) instead of blocking a thread on it.
    calls_model: bool = False


def _retrieve(records: list[JobRecord], svc: Services) -> list[JobRecord]:
    return pipeline.retrieval_stage(records, svc.retriever)


def _generate(records: list[JobRecord], svc: Services) -> list[JobRecord]:
    """The model calls; a job whose run is cancelled while its request waits is dropped
    here (no row) and counted with the run's cancelled jobs."""
    out = pipeline.generation_stage(records, svc.gateway, cancelled_runs=svc.store.cancelled_runs)
    stopped = [r for r in out if r.error_kind == ErrorKind.CANCELLED]
    by_run: dict[str, list[str]] = {}
    for r in stopped:
        by_run.setdefault(r.job.run_id, []).append(r.job.job_id)
    for run_id, job_ids in by_run.items():
        log.info("run %s cancelled; abandoned %d unanswered request(s) of a taken bundle",
                 run_id, len(job_ids))
        svc.store.add_cancelled_jobs(run_id, job_ids)
    return [r for r in out if r.error_kind != ErrorKind.CANCELLED]


def _verify(records: list[JobRecord], svc: Services) -> list[JobRecord]:
    return [pipeline.verification_stage(r) for r in records]


STEPS: dict[keys.Stage, Step] = {
    keys.RETRIEVE: Step(keys.RETRIEVE, _retrieve, ends_failed=True),
    keys.GENERATE: Step(keys.GENERATE, _generate, calls_model=True),
    keys.VERIFY: Step(keys.VERIFY, _verify, checks_entry=False),
}

CHAIN: tuple[Step, ...] = tuple(STEPS[stage] for stage in keys.SWEEP_STAGES)
if set(STEPS) != set(keys.SWEEP_STAGES):  # a stage without a step, or a step off the chain
    raise RuntimeError("qfarm.worker.stages.STEPS must give every keys.SWEEP_STAGES stage one step")


def step_for(stage: keys.Stage) -> Step:
    return STEPS[stage]


def after(step: Step) -> Step | None:
    """The link after ``step``; None after the last (which writes the rows)."""
    i = CHAIN.index(step)
    return CHAIN[i + 1] if i + 1 < len(CHAIN) else None
