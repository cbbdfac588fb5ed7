"""``run_sweep``: check a sweep's input, then run it in this process or on the farm."""

from __future__ import annotations

import logging

from qfarm.common.errors import InputError
from qfarm.common.jobs import check_samples, parse_modes
from qfarm.common.logs import job_fields
from qfarm.common.settings import Settings, load_settings
from qfarm.producer.runs.distributed import run_distributed
from qfarm.producer.runs.eager import run_eager
from qfarm.producer.runs.services import say_to_log
from qfarm.producer.runs.types import (
    EndpointsFor,
    OnProgress,
    RunResult,
    Say,
    SweepSpec,
    configured_endpoints,
)

log = logging.getLogger(__name__)


def run_sweep(
    spec: SweepSpec,
    *,
    eager: bool = False,
    detach: bool = False,
    settings: Settings | None = None,
    on_progress: OnProgress | None = None,
    say: Say | None = None,
    endpoints: EndpointsFor = configured_endpoints,
    index_progress: bool = False,
    serial: bool = False,
    retry_errors: str | None = None,
) -> RunResult:
    """Run a sweep and return when every job has a row (or the run stopped).

    ``eager`` runs the jobs in this process, concurrently (``worker/runner.py``: the
    endpoints' in-flight caps of LLM requests at once), or one at a time with ``serial``
    (for debugging); otherwise they go to Redis workers and this call follows the run
    (``detach``: returns once every job is enqueued).
    ``on_progress`` receives each poll's progress, ``say`` lines for the operator
    (default: the ``qfarm.producer`` log). ``index_progress`` shows the progress of
    building the default index when it does not exist yet.

    ``retry_errors``: a run id; instead of a new run, run again that run's jobs whose row
    is an error (``qfarm.producer.runs.retry``). ``spec`` must then be the run's (its questions, modes,
    n and policy); the rows replace the error rows in the same run.
    """
    settings = settings or load_settings()
    say = say or say_to_log
    if retry_errors is not None:
        return _retry(spec, retry_errors, eager=eager, settings=settings, on_progress=on_progress,
                      say=say, endpoints=endpoints, serial=serial)
    modes = parse_modes([str(m) for m in spec.modes])
    check_samples(spec.n)
    questions = spec.question_set(settings.max_question_chars).selected(
        limit=spec.limit, sample=spec.sample, seed=spec.seed)
    if eager:
        result = run_eager(spec, questions, modes, settings, endpoints, on_progress,
                           index_progress, serial=serial)
    else:
        result = run_distributed(spec, questions, modes, settings, endpoints, on_progress, say,
                                 detach=detach, index_progress=index_progress)
    log_run_end(result)
    return result


def log_run_end(result: RunResult) -> None:
    """A sweep's end, on the log at INFO whatever it was (its start: ``create_run_dir``)."""
    log.info("run %s ended %s: %d of %d jobs have a row%s", result.run_id, result.status,
             result.rows_written, result.manifest.n_jobs,
             f" ({result.error})" if result.error else "",
             extra=job_fields(run_id=result.run_id))


def _retry(spec: SweepSpec, run_id: str, *, eager: bool, settings: Settings,
           on_progress: OnProgress | None, say: Say, endpoints: EndpointsFor,
           serial: bool) -> RunResult:
    from qfarm.producer.rundir import read_manifest
    from qfarm.producer.runs.retry import retry_errors

    manifest = read_manifest(settings.results_dir / run_id)
    modes = parse_modes([str(m) for m in spec.modes])
    if tuple(modes) != tuple(manifest.modes) or spec.n != manifest.n:
        raise InputError(f"run {run_id} ran modes {','.join(manifest.modes)} with n={manifest.n}; "
                         "retry its errors with the same, or start a new run")
    return retry_errors(run_id, eager=eager, settings=settings,
                        questions=spec.question_set(settings.max_question_chars),
                        policy=spec.policy, on_progress=on_progress, say=say,
                        endpoints=endpoints, serial=serial)
