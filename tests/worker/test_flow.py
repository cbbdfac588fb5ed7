"""Task bodies around the pipeline, run eagerly on an in-memory Redis (fakeredis)."""

from __future__ import annotations

import json

import fakeredis
import pytest

from qfarm.common import keys
from qfarm.common.jobs import expand_jobs, ref_for
from qfarm.common.models import Generation, Mode, Question
from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.producer.runs.sweep import make_manifest
from qfarm.producer.store import ProducerStore


class Canned:
    def __init__(self, text: str = '"Jazz is a music genre" [E1]'):
        self.text = text
        self.calls = 0
        self.many_calls: list[int] = []  # prompts per generate_many call

    def generate(self, prompt, sampling, *, job_id):
        self.calls += 1
        if "poison" in prompt:
            raise RuntimeError("a bug for one prompt only")
        return Generation(text=self.text, endpoint="canned")

    def generate_many(self, items):
        self.many_calls.append(len(items))
        return [self.generate(p, s, job_id=j) for p, s, j in items]


class BrokenRetriever:
    backend = "embedded"

    def index_version(self) -> str:
        return "v"

    def search(self, query, *, top_k, title_boost):
        raise ValueError("index file is corrupt")

    def search_many(self, queries, *, top_k, title_boost):
        raise ValueError("index file is corrupt")


@pytest.fixture
def eager(default_index):
    from qfarm.worker.celery import configure_app
    from qfarm.worker.retrieval import open_retriever
    from qfarm.worker.services import Services, install_services
    from qfarm.worker.store import WorkerStore

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
    from qfarm.worker import celery as tasks

    svc, store, gateway = eager
    job, ref = a_ref()
    tasks.retrieve.apply_async(args=[[ref]])
    tasks.retrieve.apply_async(args=[[ref]])  # a duplicate delivery: skipped, no second row
    rows = [r for r in store.read_rows("r", 0)]
    assert len(rows) == 1 and gateway.calls == 1
    assert store.progress("r", 1).stages == {"retrieve": 2, "generate": 1, "verify": 1}


def test_an_unexpected_exception_becomes_an_error_row(eager):
    from qfarm.worker import celery as tasks

    svc, store, _ = eager
    svc._retriever = BrokenRetriever()  # swap the backend under the task
    _, ref = a_ref()
    tasks.retrieve.apply_async(args=[[ref]])
    (raw,) = list(store.read_rows("r", 0))
    assert b'"error":"internal: ValueError: index file is corrupt"' in raw
    assert store.progress("r", 1).failed == 1
    assert json.loads(raw)["error_kind"] == "internal"


class DownRetriever(BrokenRetriever):
    """A search backend that fails the way a backend does (``RetrievalError``)."""

    def search_many(self, queries, *, top_k, title_boost):
        from qfarm.common.errors import RetrievalError

        raise RetrievalError("search cluster unreachable")


def test_each_stage_names_the_kind_of_its_error_rows(eager):
    """A retrieval failure, an LLM failure and a bug: each row says where it came from
    (``error_kind``) and its ``error`` text still starts with that kind."""
    from qfarm.common.errors import LLMConnectError
    from qfarm.worker import celery as tasks

    svc, store, gateway = eager
    good = svc.retriever
    svc._retriever = DownRetriever()
    tasks.retrieve.apply_async(args=[[a_ref()[1]]])
    (raw,) = list(store.read_rows("r", 0))
    row = json.loads(raw)
    assert (row["error_kind"], row["error"]) == ("retrieval", "retrieval: search cluster unreachable")

    svc._retriever = good
    store.client.delete(keys.rows_key("r"), keys.log_key("r"))  # the job may run again
    gateway.generate_many = lambda items: [
        LLMConnectError("connection refused", endpoint="http://gpu1:8000", attempts=3)
        for _ in items]
    tasks.retrieve.apply_async(args=[[a_ref()[1]]])
    (raw,) = list(store.read_rows("r", 0))
    row = json.loads(raw)
    assert row["error_kind"] == "llm" and row["error"].startswith("llm: connection refused")
    assert row["endpoint"] == "http://gpu1:8000" and row["attempts"] == 3


def test_a_row_without_an_error_has_no_error_kind(eager):
    from qfarm.worker import celery as tasks

    _, store, _ = eager
    tasks.retrieve.apply_async(args=[[a_ref()[1]]])
    (raw,) = list(store.read_rows("r", 0))
    row = json.loads(raw)
    assert row["error"] is None and row["error_kind"] is None


def test_a_cancelled_run_starts_nothing(eager):
    from qfarm.worker import celery as tasks

    svc, store, gateway = eager
    store.set_cancelled("r", 0.0)
    _, ref = a_ref()
    tasks.retrieve.apply_async(args=[[ref]])
    assert list(store.read_rows("r", 0)) == [] and gateway.calls == 0


class CountingRetriever:
    """The real index, counting the searches the flow asks for."""

    def __init__(self, inner):
        self.inner = inner
        self.backend = inner.backend
        self.queries: list[str] = []

    def index_version(self) -> str:
        return self.inner.index_version()

    def search_many(self, queries, *, top_k, title_boost):
        self.queries.extend(queries)
        return self.inner.search_many(queries, top_k=top_k, title_boost=title_boost)


def bundle_refs(run_id="r", texts=("What is jazz?", "Who was Napoleon?"), n=3):
    questions = [Question(id=f"q{i}", text=t) for i, t in enumerate(texts)]
    jobs = list(expand_jobs(run_id, questions, [Mode.QUOTE], n, Policy(), model="m"))
    return jobs, [ref_for(j).model_dump(mode="json", exclude_none=True) for j in jobs]


def manifest_for(store, run_id, n_questions, n, use_cache=False):
    store.put_manifest(make_manifest(
        run_id=run_id, question_file="-", question_file_digest="-", n_questions=n_questions,
        modes=[Mode.QUOTE], n=n, policy=Policy(), model="m", endpoints=[], simulated=True,
        retriever="embedded", index_version=None, corpus=None, eager=True, use_cache=use_cache,
    ))


def test_a_bundle_searches_once_per_question_and_sends_its_prompts_together(eager):
    from qfarm.worker import celery as tasks

    svc, store, gateway = eager
    counting = CountingRetriever(svc.retriever)
    svc._retriever = counting
    manifest_for(store, "b", 2, 3)
    jobs, refs = bundle_refs("b")
    tasks.retrieve.apply_async(args=[refs])
    rows = [json.loads(r) for r in store.read_rows("b", 0)]
    assert sorted(r["job_id"] for r in rows) == sorted(j.job_id for j in jobs)
    assert all(r["error"] is None and r["verdict"] for r in rows)
    assert sorted(counting.queries) == ["What is jazz?", "Who was Napoleon?"]
    assert gateway.many_calls == [6]
    assert store.progress("b", 6).stages == {"retrieve": 6, "generate": 6, "verify": 6}


def test_one_failing_job_does_not_take_its_bundle_down(eager):
    from qfarm.worker import celery as tasks

    svc, store, gateway = eager
    manifest_for(store, "p", 2, 2)
    jobs, refs = bundle_refs("p", texts=("What is jazz?", "What is poison ivy?"), n=2)
    tasks.retrieve.apply_async(args=[refs])
    rows = {r["job_id"]: r for r in map(json.loads, store.read_rows("p", 0))}
    assert len(rows) == 4
    failed = {j for j, r in rows.items() if r["error"]}
    assert failed == {j.job_id for j in jobs if "poison" in j.question.text}
    assert all("RuntimeError: a bug for one prompt only" in rows[j]["error"] for j in failed)
    assert store.progress("p", 4).failed == 2


def test_a_redelivered_bundle_only_redoes_jobs_without_a_row(eager):
    from qfarm.worker import celery as tasks

    svc, store, gateway = eager
    manifest_for(store, "d", 2, 3)
    jobs, refs = bundle_refs("d")
    tasks.retrieve.apply_async(args=[refs[:2]])
    assert gateway.calls == 2
    tasks.retrieve.apply_async(args=[refs])  # the whole bundle again
    assert gateway.calls == 6  # only the four new jobs went to the model
    assert sorted(json.loads(r)["job_id"] for r in store.read_rows("d", 0)) == sorted(
        j.job_id for j in jobs)


def test_a_bundle_is_served_from_the_cache_on_a_second_run(eager):
    from qfarm.worker import celery as tasks

    svc, store, gateway = eager
    for run_id in ("c1", "c2"):
        manifest_for(store, run_id, 2, 3, use_cache=True)
        tasks.retrieve.apply_async(args=[bundle_refs(run_id)[1]])
    assert gateway.calls == 6
    second = [json.loads(r) for r in store.read_rows("c2", 0)]
    assert len(second) == 6 and all(r["cache_hit"] for r in second)
    assert store.progress("c2", 6).stages["retrieve"] == 6


def _unreadable_second_record(records) -> str:
    """A forwarded bundle whose second record lost its job (no id, no question)."""
    from qfarm.worker import encoding

    bundle = json.loads(encoding.dump_records(records))
    bundle["records"][1]["job"] = {"run_id": "v"}
    return json.dumps(bundle)


def test_an_unreadable_record_in_a_forwarded_bundle_spares_the_others(eager):
    from qfarm.worker import encoding, flow, pipeline

    svc, store, gateway = eager
    manifest_for(store, "v", 2, 1)
    jobs, _ = bundle_refs("v", n=1)
    records = pipeline.retrieval_stage([pipeline.begin(j) for j in jobs], svc.retriever)
    sent = []
    flow.handle_stage(keys.GENERATE, _unreadable_second_record(records), svc,
                      lambda stage, rs: sent.extend(rs))
    assert [r.job.job_id for r in sent] == [jobs[0].job_id]
    assert sent[0].retrieval.evidence == records[0].retrieval.evidence  # put back, one by one
    assert gateway.calls == 1
    # Forwarded as one string, the good one verifies into its row.
    flow.handle_stage(keys.VERIFY, encoding.dump_records(sent), svc, lambda stage, rs: None)
    (row,) = [json.loads(r) for r in store.read_rows("v", 0)]
    assert row["job_id"] == jobs[0].job_id and row["error"] is None


def test_a_bundle_carries_each_evidence_list_once_and_reads_back_equal(eager):
    from qfarm.worker import encoding, flow, pipeline

    svc, store, _ = eager
    manifest_for(store, "w", 2, 3)
    jobs, _ = bundle_refs("w", n=3)
    records = pipeline.retrieval_stage([pipeline.begin(j) for j in jobs], svc.retriever)
    records.append(records[0].model_copy(update={"retrieval": None}))  # one without evidence
    payload = encoding.dump_records(records)
    assert flow.load_records(payload, svc) == records
    bundle = json.loads(payload)
    distinct = {r.retrieval.evidence for r in records if r.retrieval}
    assert len(bundle["evidence"]) == len(distinct) < len(records) - 1
    assert bundle["evidence_of"][-1] is None
    assert len(payload) < 0.6 * len(encoding.RECORDS.dump_json(records))  # 3 samples share blocks
    # A JSON list of whole records is not a bundle: nothing of it runs.
    assert flow.load_records(encoding.RECORDS.dump_json(records).decode(), svc) == []


def test_a_failed_hand_off_to_the_next_stage_leaves_the_message_for_redelivery(eager, monkeypatch):
    """A failure seen once: kombu's OperationalError on the publish was taken for a bug, an error
    row was attempted and the message acknowledged; now the message is requeued."""
    from celery.exceptions import Reject
    from kombu.exceptions import OperationalError

    from qfarm.worker import celery as tasks

    svc, store, gateway = eager
    _, ref = a_ref()

    def broker_down(stage, records):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks, "send_stage", broker_down)
    with pytest.raises(Reject) as caught:
        tasks.retrieve.run([ref])
    assert caught.value.requeue is True
    assert list(store.read_rows("r", 0)) == []  # no error row for a job that did not fail


def test_an_error_row_that_cannot_be_stored_leaves_the_message_for_redelivery(eager, monkeypatch):
    import redis
    from celery.exceptions import Reject

    from qfarm.worker import celery as tasks

    svc, store, _ = eager
    svc._retriever = BrokenRetriever()  # a bug, so the task writes error rows

    def refused(*args, **kwargs):
        raise redis.exceptions.ConnectionError("Connection refused")

    monkeypatch.setattr(svc.store, "write_row", refused)
    monkeypatch.setattr(svc.store, "write_rows", refused)
    _, ref = a_ref()
    with pytest.raises(Reject) as caught:
        tasks.retrieve.run([ref])
    assert caught.value.requeue is True


class SurrogateForOne(Canned):
    """A model whose reply to one question carries a lone surrogate (invalid in UTF-8)."""

    def generate(self, prompt, sampling, *, job_id):
        gen = super().generate(prompt, sampling, job_id=job_id)
        if "Napoleon" in prompt:
            return gen.model_copy(update={"text": gen.text + " \ud800 and \udfff"})
        return gen


def test_a_lone_surrogate_in_one_reply_fails_nothing(eager, capsys):
    """A failure seen once: a reply with "\\ud800" made all 8 jobs of its bundle
    `internal: PydanticSerializationError`, and eager mode printed a traceback."""
    from qfarm.worker import celery as tasks

    svc, store, _ = eager
    svc._gateway = SurrogateForOne()
    manifest_for(store, "s", 2, 4)
    jobs, refs = bundle_refs("s", n=4)
    tasks.retrieve.apply_async(args=[refs])
    rows = [json.loads(r) for r in store.read_rows("s", 0)]
    assert sorted(r["job_id"] for r in rows) == sorted(j.job_id for j in jobs)
    assert [r["error"] for r in rows] == [None] * 8
    assert "Traceback" not in capsys.readouterr().err


def test_a_record_that_cannot_be_sent_is_that_jobs_error_row_only(eager):
    from qfarm.worker import encoding, flow, pipeline

    svc, store, gateway = eager
    manifest_for(store, "x", 2, 1)
    jobs, _ = bundle_refs("x", n=1)
    records = pipeline.retrieval_stage([pipeline.begin(j) for j in jobs], svc.retriever)
    sent = []

    def send(stage, bundle):
        encoding.dump_records(bundle)
        if any(r.job.job_id == jobs[1].job_id for r in bundle):
            raise ValueError("cannot serialise this one")
        sent.extend(bundle)

    flow.handle_stage(keys.GENERATE, encoding.dump_records(records), svc, send)
    assert [r.job.job_id for r in sent] == [jobs[0].job_id]
    (row,) = [json.loads(r) for r in store.read_rows("x", 0)]
    assert row["job_id"] == jobs[1].job_id and "cannot serialise" in row["error"]


def test_a_manifest_workers_cannot_read_is_a_run_level_error(eager):
    """A failure seen once: `title_boost=inf` went into the manifest as null; every job then failed
    to load, no row was written and the producer re-sent the jobs forever."""
    from qfarm.common import keys
    from qfarm.worker import celery as tasks

    svc, store, gateway = eager
    manifest_for(store, "m", 2, 1)
    raw = json.loads(store.client.get(keys.manifest_key("m")))
    raw["policy"]["title_boost"] = None  # what pydantic writes for a non-finite float
    store.client.set(keys.manifest_key("m"), json.dumps(raw))
    _, refs = bundle_refs("m", n=1)
    tasks.retrieve.apply_async(args=[refs])
    prog = store.progress("m", 2)
    assert prog.error and "policy.title_boost" in prog.error and "new sweep" in prog.error
    assert prog.done == 0 and gateway.calls == 0


def test_a_question_that_cannot_be_serialised_fails_only_its_own_jobs(eager, caplog):
    """A lone surrogate in a question that got past loading: its bundle-mates became
    error rows and its own jobs none, so the follower re-sent them forever."""
    from qfarm.worker import celery as tasks

    svc, store, _ = eager
    manifest_for(store, "p", 2, 2)
    jobs, refs = bundle_refs("p", texts=("What is jazz?", "Who was \ud800 Napoleon?"), n=2)
    tasks.retrieve.apply_async(args=[refs])
    rows = {r["job_id"]: r for r in map(json.loads, store.read_rows("p", 0))}
    assert sorted(rows) == sorted(j.job_id for j in jobs)
    for job in jobs:
        row = rows[job.job_id]
        if "Napoleon" in job.question.text:
            assert row["question"] == "Who was \ufffd Napoleon?"
            assert "cannot be serialised" in row["error"] and "surrogate" in row["error"], row["error"]
            assert row["error_kind"] == "internal"
        else:
            assert row["error"] is None and row["verdict"]
    assert store.progress("p", 4).failed == 2


def test_a_single_query_that_cannot_be_serialised_is_its_error_row(eager, caplog):
    """The interactive queue: the job fails before any model call, its row says why, and
    no detail is stored for it (the record would not serialise)."""
    from qfarm.common import keys
    from qfarm.worker import celery as tasks

    svc, store, gateway = eager
    manifest_for(store, "i", 1, 1)
    (job,), (ref,) = bundle_refs("i", texts=("Who was \ud800?",), n=1)
    tasks.run_job.apply_async(args=[[ref]])
    (row,) = map(json.loads, store.read_rows("i", 0))
    assert "cannot be serialised" in row["error"] and gateway.calls == 0
    assert row["error_kind"] == "internal"
    assert store.client.get(keys.detail_key("i", job.job_id)) is None
    assert "failed unexpectedly" not in caplog.text


def test_a_row_that_cannot_be_serialised_keeps_the_kind_of_its_first_error():
    """``storable``: a row that failed already (here at the model) keeps that kind, its
    error text first; one that had not failed becomes an internal error."""
    from qfarm.common.models import ErrorKind, Row
    from qfarm.worker.encoding import storable

    bad = {"run_id": "r", "job_id": "j", "question": "Who was \ud800?", "question_id": "q",
           "mode": Mode.QUOTE, "sample_index": 0}
    _, text = storable(Row(**bad, error="llm: down", error_kind=ErrorKind.LLM))
    row = json.loads(text)
    assert row["error_kind"] == "llm"
    assert row["error"].startswith("llm: down; internal: this job cannot be serialised")
    _, text = storable(Row(**bad))
    row = json.loads(text)
    assert row["error_kind"] == "internal"
    assert row["error"].startswith("internal: this job cannot be serialised")
