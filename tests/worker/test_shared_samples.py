"""Shared samples end to end: an eager sweep against the simulator with share_samples, its
requests counted in the simulator's log (one per question x mode), its rows one per job,
reproducible however the samples were grouped, and whole under HTTP faults."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from qfarm.common.models import ALL_MODES
from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.producer import RunResult, SweepSpec, run_sweep

pytestmark = pytest.mark.slow
QUESTIONS = ["Who were the members of the Beatles?", "What is jazz?", "Where is Mount Etna?"]
N = 4
JOBS = len(QUESTIONS) * len(ALL_MODES) * N
# What differs between two runs of the same jobs: identity of the run, and timings.
PER_RUN = {"run_id", "started_at", "finished_at", "timings", "llm_request", "worker"}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(latency="zero", profile="clean") as handle:
        yield handle


def sweep(sim: SimulatorHandle, index: Path, tmp_path: Path, *, share: bool = True,
          faults: dict[str, float] | None = None,
          **settings: object) -> tuple[RunResult, int]:  # fmt: skip
    """A run and the completion requests the simulator got for it (``faults``: its HTTP
    fault rates for this run)."""
    sim.reset()
    if faults:
        sim.set_faults(rates=faults)
    opts: dict[str, object] = {"llm_endpoints": sim.url, "index_path": index,
                               "results_dir": tmp_path / "results", "llm_backoff_base_s": 0.01,
                               "llm_backoff_max_s": 0.02, **settings}
    spec = SweepSpec(questions=QUESTIONS, modes=ALL_MODES, n=N,
                     policy=Policy(share_samples=share), use_cache=False, keep_answers=True)
    result = run_sweep(spec, eager=True, settings=Settings(**opts))  # type: ignore[arg-type]
    requests = [r for r in sim.stats()["requests"] if "completions" in r["path"]]
    return result, len(requests)


def by_job(result: RunResult) -> dict[str, dict]:
    rows = [row.model_dump(mode="json") for row in result.rows()]
    assert len(rows) == len({r["job_id"] for r in rows}) == JOBS  # one row per job
    return {r["job_id"]: {k: v for k, v in r.items() if k not in PER_RUN} for r in rows}


def test_a_shared_sweep_sends_one_request_per_question_and_mode(sim, default_index, tmp_path):
    result, requests = sweep(sim, default_index, tmp_path)
    rows = by_job(result)
    assert result.status == "complete"
    assert requests == JOBS // N
    assert not [r for r in rows.values() if r["error"]]
    # The cost table counts each prompt once: a run's prompt tokens are those of its requests.
    texts = {(r["question_id"], r["mode"]): r["usage"]["prompt_tokens"] for r in rows.values()}
    assert len(texts) == JOBS // N


def test_without_the_switch_every_job_is_its_own_request(sim, default_index, tmp_path):
    result, requests = sweep(sim, default_index, tmp_path, share=False)
    assert requests == JOBS
    by_job(result)


def test_rows_do_not_depend_on_how_the_samples_were_grouped(sim, default_index, tmp_path):
    """The same sweep twice gives the same rows; so does one whose bundles of 2 cut every
    (question, mode) into two requests of 2 (as a redelivered, half-written bundle would
    regroup): sample i's answer is choice i - first of a request seeded base + first.
    Only the usage differs: a request's prompt tokens are shared among its choices."""
    whole, _ = sweep(sim, default_index, tmp_path / "a")
    again, _ = sweep(sim, default_index, tmp_path / "b")
    halves, requests = sweep(sim, default_index, tmp_path / "c", bundle_size=2)
    assert requests == JOBS // 2
    a, b, c = by_job(whole), by_job(again), by_job(halves)
    assert a == b
    # Only a request's usage is shared out by its group's size; the answers are the same.
    assert ({job: {**r, "usage": None} for job, r in a.items()}
            == {job: {**r, "usage": None} for job, r in c.items()})

def test_faults_leave_one_row_per_job(sim, default_index, tmp_path):
    """Malformed bodies, 500s and replies without choices, at rates: each shared request
    is retried as a unit, and every job ends with exactly one row."""
    clean, _ = sweep(sim, default_index, tmp_path / "clean")
    faults = {"malformed": 0.25, "stream_error": 0.2, "empty": 0.15}
    try:
        faulty, requests = sweep(sim, default_index, tmp_path / "faults", faults=faults,
                                 llm_max_attempts=12)
    finally:
        sim.reset()
    rows, expected = by_job(faulty), by_job(clean)
    assert requests > JOBS // N  # the faults were met, and retried
    answered = [job for job, r in rows.items() if not r["error"]]
    assert answered
    for job in answered:  # a retried request answers as the first try would have
        assert rows[job]["answer"] and rows[job]["answer"] == expected[job]["answer"]
        assert rows[job]["verdict"] == expected[job]["verdict"]
