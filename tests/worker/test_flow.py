"""Task bodies around the pipeline, run eagerly on an in-memory Redis (fakeredis)."""

from __future__ import annotations

import fakeredis
import pytest

from common.jobs import expand_jobs, ref_for
from common.models import Generation, Mode, Question
from common.policy import Policy
from common.settings import Settings
from producer.store import ProducerStore
from producer.sweep import make_manifest


class Canned:
    def __init__(self, text: str = '"Jazz is a music genre" [E1]'):
        self.text = text
        self.calls = 0

    def generate(self, prompt, sampling, *, job_id):
        self.calls += 1
        return Generation(text=self.text, endpoint="canned")


class BrokenRetriever:
    backend = "embedded"

    def index_version(self) -> str:
        return "v"

    def search(self, query, *, top_k, title_boost):
        raise ValueError("index file is corrupt")


@pytest.fixture
def eager(default_index):
    from worker.celery_app import configure_app
    from worker.retrieval import open_retriever
    from worker.services import Services, install_services
    from worker.store import WorkerStore

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    settings = Settings(index_path=default_index)
    configure_app(settings, eager=True)
    gateway = Canned()
    svc = Services(settings=settings, store=WorkerStore(client), worker_name="t",
                   retriever_factory=lambda: open_retriever(settings),
                   gateway_factory=lambda: gateway)
    install_services(svc)
    store = ProducerStore(client)
    manifest = make_manifest(
        run_id="r", question_file="-", question_file_digest="-", n_questions=1,
        modes=[Mode.QUOTE], n=1, policy=Policy(), model="m", endpoints=[], simulated=True,
        retriever="embedded", index_version=None, corpus=None, eager=True,
    )
    store.put_manifest(manifest)
    yield svc, store, gateway
    install_services(None)


def a_ref():
    job = next(iter(expand_jobs("r", [Question(id="q", text="What is jazz?")], [Mode.QUOTE], 1,
                                Policy(), model="m")))
    return job, ref_for(job).model_dump(mode="json", exclude_none=True)


def test_the_three_stage_tasks_write_one_row(eager):
    from worker import tasks

    svc, store, gateway = eager
    job, ref = a_ref()
    tasks.retrieve.apply_async(args=[ref])
    tasks.retrieve.apply_async(args=[ref])  # a duplicate delivery: skipped, no second row
    rows = [r for r in store.read_rows("r", 0)]
    assert len(rows) == 1 and gateway.calls == 1
    assert store.progress("r", 1).stages == {"retrieve": 2, "generate": 1, "verify": 1}


def test_an_unexpected_exception_becomes_an_error_row(eager):
    from worker import tasks

    svc, store, _ = eager
    svc._retriever = BrokenRetriever()  # noqa: SLF001 - swap the backend under the task
    _, ref = a_ref()
    tasks.retrieve.apply_async(args=[ref])
    (raw,) = list(store.read_rows("r", 0))
    assert b'"error":"internal: ValueError: index file is corrupt"' in raw
    assert store.progress("r", 1).failed == 1


def test_a_cancelled_run_starts_nothing(eager):
    from worker import tasks

    svc, store, gateway = eager
    store.set_cancelled("r", 0.0)
    _, ref = a_ref()
    tasks.retrieve.apply_async(args=[ref])
    assert list(store.read_rows("r", 0)) == [] and gateway.calls == 0
