"""``run_sweep``: check a sweep's input, then run it in this process or on the farm."""

from __future__ import annotations

from qfarm.common.jobs import check_samples, parse_modes
from qfarm.common.settings import Settings, load_settings
from qfarm.producer._distributed import run_distributed
from qfarm.producer._eager import run_eager
from qfarm.producer._services import say_to_log
from qfarm.producer._types import (
    EndpointsFor,
    OnProgress,
    RunResult,
    Say,
    SweepSpec,
    configured_endpoints,
)


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
) -> RunResult:
    """Run a sweep and return when every job has a row (or the run stopped).

    ``eager`` runs the jobs in this process, concurrently (``worker/runner.py``: the
    endpoints' in-flight caps of LLM requests at once), or one at a time with ``serial``
    (for debugging); otherwise they go to Redis workers and this call follows the run
    (``detach``: returns once every job is enqueued).
    ``on_progress`` receives each poll's progress, ``say`` lines for the operator
    (default: the ``qfarm.producer`` log). ``index_progress`` shows the progress of
    building the default index when it does not exist yet.
    """
    settings = settings or load_settings()
    say = say or say_to_log
    modes = parse_modes([str(m) for m in spec.modes])
    check_samples(spec.n)
    questions = spec.question_set(settings.max_question_chars)
    if eager:
        return run_eager(spec, questions, modes, settings, endpoints, on_progress, index_progress,
                          serial=serial)
    return run_distributed(spec, questions, modes, settings, endpoints, on_progress, say,
                            detach=detach, index_progress=index_progress)
