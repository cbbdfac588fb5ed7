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
link (``loads_jobs``) also loads the jobs, runs the preflight and serves cache hits
before its step. The model's link (``calls_model``) also declares its step's two
halves, ``ask`` and ``settle`` (``pipeline.generation_request`` and
``with_generation``, which its ``run``, ``pipeline.generation_stage``, calls with a
wait between), for a driver that waits for the model without a thread (the
in-process runner).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qfarm.common import keys
from qfarm.common.models import JobRecord, Sampling
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
    # The link takes job refs, not records: it loads the jobs, runs the preflight and
    # serves cache hits before its step (``flow.enter_stage``). The chain's first link.
    loads_jobs: bool = False
    # The step is the model call, in two halves around the wait for the model: ``ask``
    # gives a job's request to the gateway (None: nothing to ask, the job passes
    # untouched), ``settle`` records the gateway's answer or failure for a request sent
    # at a time. The in-process runner sends the requests to the async gateway with them
    # instead of blocking a thread on ``run``.
    ask: Callable[[JobRecord], tuple[str, Sampling, str] | None] | None = None
    settle: Callable[[JobRecord, Any, float], JobRecord] | None = None

    @property
    def calls_model(self) -> bool:
        return self.ask is not None


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


def _ask(record: JobRecord) -> tuple[str, Sampling, str] | None:
    return pipeline.generation_request(record)


def _settle(record: JobRecord, result: Any, t0: float) -> JobRecord:
    return pipeline.with_generation(record, result, t0)


def _verify(records: list[JobRecord], svc: Services) -> list[JobRecord]:
    return [pipeline.verification_stage(r) for r in records]


STEPS: dict[keys.Stage, Step] = {
    keys.RETRIEVE: Step(keys.RETRIEVE, _retrieve, ends_failed=True, loads_jobs=True),
    keys.GENERATE: Step(keys.GENERATE, _generate, ask=_ask, settle=_settle),
    keys.VERIFY: Step(keys.VERIFY, _verify, checks_entry=False),
}

CHAIN: tuple[Step, ...] = tuple(STEPS[stage] for stage in keys.SWEEP_STAGES)
if set(STEPS) != set(keys.SWEEP_STAGES):  # a stage without a step, or a step off the chain
    raise RuntimeError("qfarm.worker.stages.STEPS must give every keys.SWEEP_STAGES stage one step")
if [s.loads_jobs for s in CHAIN] != [True] + [False] * (len(CHAIN) - 1):
    raise RuntimeError("qfarm.worker.stages.CHAIN: its first link, and only it, loads the jobs")
if any((s.ask is None) != (s.settle is None) for s in CHAIN):
    raise RuntimeError("qfarm.worker.stages.STEPS: a model step declares both halves")


def step_for(stage: keys.Stage) -> Step:
    return STEPS[stage]


def after(step: Step) -> Step | None:
    """The link after ``step``; None after the last (which writes the rows)."""
    i = CHAIN.index(step)
    return CHAIN[i + 1] if i + 1 < len(CHAIN) else None
