"""Shared samples end to end: an eager sweep against the simulator with share_samples, its
requests counted in the simulator's log (one per question x mode), its rows one per job,
reproducible however the samples were grouped, and whole under HTTP faults."""

from __future__ import annotations

import json
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


@pytest.fixture
def farm(sim, default_index):
    """The Celery tasks, eagerly, on an in-memory Redis, with a gateway to the simulator."""
    import fakeredis

    from qfarm.producer.store import ProducerStore
    from qfarm.worker.celery import configure_app
    from qfarm.worker.llm import open_gateway
    from qfarm.worker.retrieval import open_retriever
    from qfarm.worker.services import Services, install_services
    from qfarm.worker.store import WorkerStore

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    settings = Settings(index_path=default_index, llm_endpoints=sim.url)
    configure_app(settings, eager=True)
    gateway = open_gateway(settings)
    svc = Services(settings=settings, store=WorkerStore(client), worker_name="t",
                   retriever_factory=lambda: open_retriever(settings),
                   gateway_factory=lambda: gateway)
    install_services(svc)
    yield ProducerStore(client)
    install_services(None)
    gateway.close()


def test_a_redelivered_bundle_whose_group_was_half_written_regroups_the_rest(sim, farm):
    """On the farm a bundle is redelivered whole; the jobs that have rows are skipped at
    the entry check (rows are set-if-absent) and the rest regroup into one request seeded
    by its first sample: no duplicate row, and each answer is the one the whole group
    would have given."""
    from qfarm.common.jobs import expand_jobs, ref_for
    from qfarm.common.models import Mode, Question
    from qfarm.producer.runs.sweep import make_manifest
    from qfarm.worker import celery as tasks

    def bundle(run_id: str) -> list[dict]:
        farm.put_manifest(make_manifest(
            run_id=run_id, question_file="-", question_file_digest="-", n_questions=1,
            modes=[Mode.CLAIM_LATTICE], n=N, policy=Policy(share_samples=True), model=Settings().model,
            endpoints=[], simulated=True, retriever="embedded", index_version=None, corpus=None,
            eager=True, keep_answers=True, use_cache=False,
        ))
        jobs = expand_jobs(run_id, [Question(id="q", text="What is jazz?")], [Mode.CLAIM_LATTICE], N,
                           Policy(share_samples=True), model=Settings().model, keep_answers=True,
                           use_cache=False)
        return [ref_for(j).model_dump(mode="json", exclude_none=True) for j in jobs]

    def answers(run_id: str) -> dict[int, str]:
        rows = [json.loads(r) for r in farm.read_rows(run_id, 0)]
        assert len(rows) == len({r["job_id"] for r in rows}) == N  # one row per job
        return {r["sample_index"]: r["answer"] for r in rows}

    sim.reset()
    refs = bundle("half")
    tasks.retrieve.apply_async(args=[refs[:2]])  # the first two samples' rows landed
    tasks.retrieve.apply_async(args=[refs])  # then the whole bundle came again
    sent = [r for r in sim.stats()["requests"] if "completions" in r["path"]]
    assert len(sent) == 2 and sent[1]["seed"] == sent[0]["seed"] + 2
    tasks.retrieve.apply_async(args=[bundle("whole")])
    whole = answers("whole")
    assert len(set(whole.values())) > 1  # the samples differ: the seeds reached the model
    assert answers("half") == whole
