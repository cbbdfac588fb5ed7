"""The stage chain is declared once (worker/stages.py): the Celery tasks, the interactive
task and the in-process runner all follow it, so a link added there is run by every path."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from qfarm.common import keys
from qfarm.common.jobs import ref_for
from qfarm.common.models import Generation, Job, JobRecord
from qfarm.producer.store import ProducerStore
from qfarm.worker import encoding, flow, stages
from qfarm.worker.runner import InProcessRunner
from qfarm.worker.services import Services

pytestmark = pytest.mark.timeout(120)

QUESTIONS = ("What is jazz?", "Who was Napoleon?")
N = 2
ANNOTATE = keys.Stage("annotate", "qfarm.annotate")


class Gateway:
    """Answers through futures (the runner's path) and in bulk (the tasks' path)."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="test-gateway")

    def submit_many(self, items: list) -> list[Future]:
        return [self.pool.submit(self._answer) for _ in items]

    def generate_many(self, items: list) -> list[Generation]:
        return [self._answer() for _ in items]

    def _answer(self) -> Generation:
        return Generation(text='"Jazz is a music genre" [E1]', endpoint="canned")

    def close(self) -> None:
        self.pool.shutdown(wait=True)


@pytest.fixture
def setup(eager_run) -> tuple[Services, ProducerStore, list[Job]]:
    return eager_run(Gateway(), QUESTIONS, N)


@pytest.fixture
def annotating(monkeypatch) -> list[JobRecord]:
    """A link added between the model's and the verifier's; returns what passed it."""
    seen: list[JobRecord] = []
    lock = threading.Lock()

    def annotate(records: list[JobRecord], svc: Services) -> list[JobRecord]:
        with lock:
            seen.extend(records)
        return records

    step = stages.Step(ANNOTATE, annotate)
    chain = list(stages.CHAIN)
    chain.insert(chain.index(stages.step_for(keys.VERIFY)), step)
    monkeypatch.setitem(stages.STEPS, ANNOTATE, step)
    monkeypatch.setattr(stages, "CHAIN", tuple(chain))
    return seen


def assert_passed_once_between_answer_and_verdict(seen: list[JobRecord], jobs: list[Job]) -> None:
    assert sorted(r.job.job_id for r in seen) == sorted(j.job_id for j in jobs)
    assert all(r.generation is not None and r.verification is None for r in seen)


def assert_one_clean_row_each(store: ProducerStore, run_id: str, jobs: list[Job]) -> None:
    rows = [json.loads(raw) for raw in store.read_rows(run_id, 0)]
    assert sorted(r["job_id"] for r in rows) == sorted(j.job_id for j in jobs)
    assert all(r["error"] is None and r["verdict"] for r in rows)


def test_every_link_of_the_chain_is_a_task_on_its_own_queue() -> None:
    from qfarm.worker import celery as tasks

    assert [s.stage for s in stages.CHAIN] == list(keys.SWEEP_STAGES)
    assert list(tasks.STAGE_TASKS) == list(keys.SWEEP_STAGES)
    for stage, task in tasks.STAGE_TASKS.items():
        assert task.name == stage.task
        assert tasks.TASK_ROUTES[stage.task] == {"queue": stage.queue}
    assert tasks.retrieve is tasks.STAGE_TASKS[stages.CHAIN[0].stage]


def test_a_link_added_to_the_chain_runs_in_the_in_process_runner(setup, annotating) -> None:
    svc, store, jobs = setup
    r = InProcessRunner(svc, max_inflight=2, bundle_size=N)
    t = threading.Thread(target=r.run, args=(jobs,), kwargs={"tick_s": 0.05}, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert_passed_once_between_answer_and_verdict(annotating, jobs)
    assert_one_clean_row_each(store, "r", jobs)


def test_a_link_added_to_the_chain_runs_in_the_queue_handlers(setup, annotating) -> None:
    """Each link's handler sends to the next declared link; the added one is entry-checked
    and counted like the others."""
    svc, store, jobs = setup
    refs = [ref_for(j).model_dump(mode="json", exclude_none=True) for j in jobs]
    queue: list[tuple[keys.Stage, str | list[dict]]] = [(stages.CHAIN[0].stage, refs)]
    visited = []
    while queue:
        stage, payload = queue.pop(0)
        visited.append(stage)
        flow.handle_stage(stage, payload, svc,
                          lambda s, rs: queue.append((s, encoding.dump_records(rs))))  # fmt: skip
    assert visited == [step.stage for step in stages.CHAIN]
    assert_passed_once_between_answer_and_verdict(annotating, jobs)
    assert_one_clean_row_each(store, "r", jobs)
    assert svc.store.client.get(ANNOTATE.counter_key("r")) == str(len(jobs)).encode()


def test_a_link_added_to_the_chain_runs_in_the_interactive_task(setup, annotating) -> None:
    svc, store, jobs = setup
    job = jobs[0]
    flow.handle_job(ref_for(job).model_dump(mode="json", exclude_none=True), svc)
    assert_passed_once_between_answer_and_verdict(annotating, [job])
    assert_one_clean_row_each(store, "r", [job])


def test_the_interactive_task_enters_and_leaves_every_link_through_the_tasks_entry(
    setup, monkeypatch
) -> None:
    """One job, every link in one task: the same entry and leave as a sweep's bundle,
    the job counted in as interactive at the first link (not as a sweep's retrieval)."""
    svc, store, jobs = setup
    calls: list[tuple[str, keys.Stage]] = []
    handle_stage = flow.handle_stage

    def handling(stage, payload, svc, send, **kw):  # type: ignore[no-untyped-def]
        calls.append(("enter", stage))
        return handle_stage(stage, payload, svc, send, **kw)

    monkeypatch.setattr(flow, "handle_stage", handling)
    flow.handle_job(ref_for(jobs[0]).model_dump(mode="json", exclude_none=True), svc)
    assert calls == [("enter", step.stage) for step in stages.CHAIN]
    assert_one_clean_row_each(store, "r", jobs[:1])
    counted = {stage: svc.store.client.get(stage.counter_key("r")) for stage in keys.STAGES}
    assert counted[keys.INTERACTIVE] == b"1"
    assert counted[stages.CHAIN[0].stage] is None


def test_the_runner_enters_and_leaves_every_link_through_the_tasks_entry(setup, monkeypatch) -> None:
    """The model's link included: the runner runs its step's halves (``ask``, ``settle``)
    between the same entry and leave the tasks run around the whole step."""
    svc, store, jobs = setup
    entered: list[keys.Stage] = []
    left: list[keys.Stage] = []
    lock = threading.Lock()
    enter_stage, leave = flow.enter_stage, flow.leave

    def entering(step, payload, svc, **kw):  # type: ignore[no-untyped-def]
        with lock:
            entered.append(step.stage)
        return enter_stage(step, payload, svc, **kw)

    def leaving(step, records, ended, svc, send):  # type: ignore[no-untyped-def]
        with lock:
            left.append(step.stage)
        return leave(step, records, ended, svc, send)

    monkeypatch.setattr(flow, "enter_stage", entering)
    monkeypatch.setattr(flow, "leave", leaving)
    InProcessRunner(svc, max_inflight=2, bundle_size=N).run(jobs, tick_s=0.05)
    assert set(entered) == set(left) == set(keys.SWEEP_STAGES)
    assert [s.calls_model for s in stages.CHAIN] == [s.stage == keys.GENERATE for s in stages.CHAIN]
    assert_one_clean_row_each(store, "r", jobs)
