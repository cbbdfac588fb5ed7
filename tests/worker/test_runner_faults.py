"""The in-process runner when a stage raises where nothing expects it: the run still ends,
every job has exactly one row (the broken bundle's as error rows) and every slot is back."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from qfarm.common.errors import TransientServiceError
from qfarm.common.models import Generation, Job
from qfarm.producer.store import ProducerStore
from qfarm.worker import flow, pipeline, runner, stages
from qfarm.worker.runner import InProcessRunner
from qfarm.worker.services import Services

pytestmark = pytest.mark.timeout(120)

QUESTIONS = ("What is jazz?", "Who was Napoleon?", "What is the capital of France?")
N = 4  # samples per question: one bundle per question (bundle_size=N)
POISON = "q1"  # the question whose bundle breaks
POISON_TEXT = QUESTIONS[1]
RUN_S = 15.0


class FutureGateway:
    """Answers on its own threads through futures, as the real gateway's loop does; a
    request of POISON fails with a service error when ``fail_poison`` is set."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(4, thread_name_prefix="test-gateway")
        self.fail_poison = False

    def submit_many(self, items: list) -> list[Future]:
        return [self.pool.submit(self._answer, prompt) for prompt, _, _ in items]

    def _answer(self, prompt: str) -> Generation:
        if self.fail_poison and POISON_TEXT in prompt:
            raise TransientServiceError("endpoint refused the request")
        return Generation(text='"Jazz is a music genre" [E1]', endpoint="canned")

    def close(self) -> None:
        self.pool.shutdown(wait=True)


@pytest.fixture
def setup(eager_run) -> tuple[Services, ProducerStore, FutureGateway, list[Job]]:
    gateway = FutureGateway()
    svc, store, jobs = eager_run(gateway, QUESTIONS, N)
    return svc, store, gateway, jobs


def is_poison(job: Job) -> bool:
    return job.question.id == POISON


def run_to_the_end(r: InProcessRunner, jobs: list[Job]) -> None:
    """``r.run`` in a thread: a run that hangs fails the test instead of blocking the suite."""
    t = threading.Thread(target=r.run, args=(jobs,), kwargs={"tick_s": 0.05}, daemon=True)
    t.start()
    t.join(RUN_S)
    assert not t.is_alive(), "the run hung: some job's slot was never released"


def assert_one_row_each(store: ProducerStore, jobs: list[Job], error: str | None) -> None:
    """Exactly one row per job; the poisoned bundle's carry ``error`` (None: no job failed)."""
    rows = [json.loads(raw) for raw in store.read_rows("r", 0)]
    assert sorted(r["job_id"] for r in rows) == sorted(j.job_id for j in jobs)
    for row in rows:
        if error is not None and row["question_id"] == POISON:
            assert error in (row["error"] or ""), row
        else:
            assert row["error"] is None, row


def assert_every_slot_back(r: InProcessRunner) -> None:
    # The cap is the semaphore's value: a missing release lowers it, a double one raises it.
    assert r._slots._value == r._max_inflight  # type: ignore[attr-defined]


def a_runner(svc: Services) -> InProcessRunner:
    return InProcessRunner(svc, max_inflight=2, bundle_size=N)  # 4 slots: one bundle at a time


def run_expecting(svc: Services, store: ProducerStore, jobs: list[Job], error: str) -> None:
    """A run to the end: one row per job, the poisoned bundle's with ``error``, every slot back."""
    r = a_runner(svc)
    run_to_the_end(r, jobs)
    assert_one_row_each(store, jobs, error)
    assert_every_slot_back(r)


# ------------------------------------------------------------------ the retrieve stage


def raise_for_poison(real, is_hit, message: str):  # type: ignore[no-untyped-def]
    def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
        if is_hit(*args):
            raise RuntimeError(message)
        return real(*args, **kwargs)

    return wrapped


def is_poisoned_refs(payload) -> bool:  # type: ignore[no-untyped-def]
    """A first link's payload (job refs) that holds the poisoned job."""
    return any(isinstance(r, dict) and r.get("qid") == POISON for r in payload)


RETRIEVE_FAULTS = {
    # (module, attribute, do the arguments belong to the poisoned bundle?)
    "handle_stage": (
        flow,
        "handle_stage",
        lambda stage, payload, *_: is_poisoned_refs(payload),
    ),
    "ref_for": (runner, "ref_for", is_poison),
    "enter": (flow, "enter", lambda rs, *_: any(is_poison(r.job) for r in rs)),
    "generation_request": (pipeline, "generation_request", lambda rec: is_poison(rec.job)),
}


@pytest.mark.parametrize("where", list(RETRIEVE_FAULTS))
def test_a_bundle_whose_retrieve_stage_raises_ends_as_error_rows(setup, monkeypatch, where) -> None:
    svc, store, _, jobs = setup
    module, name, is_hit = RETRIEVE_FAULTS[where]
    monkeypatch.setattr(
        module, name, raise_for_poison(getattr(module, name), is_hit, f"{where} broke")
    )
    run_expecting(svc, store, jobs, f"RuntimeError: {where} broke")


# ------------------------------------------------------------------ the gateway


def test_a_gateway_submit_that_raises_ends_as_error_rows(setup, monkeypatch) -> None:
    svc, store, gateway, jobs = setup
    real = gateway.submit_many

    def submit_many(items: list) -> list[Future]:
        if any(POISON_TEXT in prompt for prompt, _, _ in items):
            raise RuntimeError("the gateway's loop is gone")
        return real(items)

    monkeypatch.setattr(gateway, "submit_many", submit_many)
    run_expecting(svc, store, jobs, "RuntimeError: the gateway's loop is gone")


def test_a_failed_answer_that_cannot_be_recorded_ends_as_an_error_row(setup, monkeypatch) -> None:
    svc, store, gateway, jobs = setup
    gateway.fail_poison = True
    real = pipeline.with_generation

    def with_generation(record, result, t0):  # type: ignore[no-untyped-def]
        if isinstance(result, Exception):
            raise RuntimeError("cannot record the service error")
        return real(record, result, t0)

    monkeypatch.setattr(pipeline, "with_generation", with_generation)
    run_expecting(svc, store, jobs, "RuntimeError: cannot record the service error")


# ------------------------------------------------------------------ verification


def test_a_verification_that_raises_ends_as_error_rows(setup, monkeypatch) -> None:
    svc, store, _, jobs = setup
    monkeypatch.setattr(pipeline, "verification_stage",
                        raise_for_poison(pipeline.verification_stage, lambda rec: is_poison(rec.job),
                                         "verification broke"))  # fmt: skip
    run_expecting(svc, store, jobs, "RuntimeError: verification broke")


def test_an_answered_job_whose_row_cannot_be_built_still_gets_an_error_row(
    setup, monkeypatch
) -> None:
    # A bug in the parts a record gains after retrieval (here: building the row of an
    # answered job) must not also break the error row written for it.
    svc, store, _, jobs = setup
    monkeypatch.setattr(pipeline, "finish",
                        raise_for_poison(pipeline.finish,
                                         lambda rec: is_poison(rec.job) and rec.generation is not None,
                                         "row of an answered job broke"))  # fmt: skip
    run_expecting(svc, store, jobs, "RuntimeError: row of an answered job broke")


def test_a_row_that_cannot_be_built_fails_only_its_own_jobs(setup, monkeypatch) -> None:
    """All questions in one bundle, so the poisoned rows are built beside healthy ones:
    a row that cannot be built fails its job alone, not the jobs finishing with it."""
    svc, store, _, jobs = setup
    monkeypatch.setattr(pipeline, "finish",
                        raise_for_poison(pipeline.finish,
                                         lambda rec: is_poison(rec.job) and rec.generation is not None,
                                         "row of an answered job broke"))  # fmt: skip
    r = InProcessRunner(svc, max_inflight=8, bundle_size=len(QUESTIONS) * N)
    run_to_the_end(r, jobs)
    assert_one_row_each(store, jobs, "RuntimeError: row of an answered job broke")
    assert_every_slot_back(r)


def test_a_question_that_cannot_be_serialised_fails_only_its_own_jobs(setup) -> None:
    """A lone surrogate in a question that got past loading: its jobs had no row, the
    summary said incomplete. The jobs are built here, past the loader that refuses it."""
    svc, store, _, jobs = setup
    poisoned = [
        j.model_copy(update={"question": j.question.model_copy(update={"text": "Who was \ud800?"})})
        if is_poison(j) else j
        for j in jobs
    ]  # fmt: skip
    r = InProcessRunner(svc, max_inflight=4, bundle_size=2 * N)  # the poison shares a bundle
    run_to_the_end(r, poisoned)
    assert_one_row_each(store, poisoned, "this job cannot be serialised")
    rows = [json.loads(raw) for raw in store.read_rows("r", 0)]
    poisoned = [r for r in rows if r["question_id"] == POISON]
    assert {r["question"] for r in poisoned} == {"Who was \ufffd?"}
    assert {r["endpoint"] for r in poisoned} == {None}  # never sent to a model
    assert_every_slot_back(r)


# ------------------------------------------------------------------ progress


def test_an_eager_run_feeds_the_stage_counters_the_progress_bar_reads(setup) -> None:
    svc, store, _, jobs = setup
    r = a_runner(svc)
    run_to_the_end(r, jobs)
    assert_one_row_each(store, jobs, error=None)
    assert store.progress("r", len(jobs)).stages == {
        s: len(jobs) for s in ("retrieve", "generate", "verify")
    }
    assert_every_slot_back(r)


def test_an_interrupted_run_gives_back_the_slots_of_the_bundles_it_cancelled(
    setup, monkeypatch
) -> None:
    svc, _, _, jobs = setup
    real = flow.handle_stage

    def slow(stage, *args, **kwargs):  # type: ignore[no-untyped-def]
        if stage == stages.CHAIN[0].stage:
            time.sleep(0.3)  # the first bundle is still running when the run is interrupted
        return real(stage, *args, **kwargs)

    monkeypatch.setattr(flow, "handle_stage", slow)
    # 6 slots, bundles of 2, one CPU thread: three bundles admitted, one of them running.
    r = InProcessRunner(svc, max_inflight=3, bundle_size=2, cpu_threads=1)
    ticks = 0

    def tick() -> None:  # the 4th bundle waits for slots; Ctrl-C arrives meanwhile
        nonlocal ticks
        ticks += 1
        if ticks == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        r.run(jobs, tick=tick, tick_s=0.05)
    # The running bundle frees its own slots as its jobs end; the cancelled two are freed
    # by run() itself (they were lost before, lowering the cap of a reused runner).
    deadline = time.monotonic() + 10
    while r._slots._value != r._max_inflight and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.05)
    assert_every_slot_back(r)
