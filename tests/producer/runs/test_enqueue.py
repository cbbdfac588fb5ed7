"""Enqueueing bundles on a real Redis (no workers): message count, run lookup, purge."""

from __future__ import annotations

import json
import os

import pytest
import redis

from qfarm.common import keys
from qfarm.common.jobs import bundles, expand_jobs
from qfarm.common.models import ALL_MODES, Question
from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.producer.runs.sweep import enqueue_jobs
from qfarm.producer.store import ProducerStore

DB = int(os.environ.get("QFARM_TEST_ENQUEUE_REDIS_DB", "10"))
PORT = int(os.environ.get("QFARM_TEST_REDIS_PORT", "6379"))
URL = f"redis://127.0.0.1:{PORT}/{DB}"


def jobs(run_id: str, n_questions: int = 5, n: int = 2):
    questions = [Question(id=f"q{i}", text=f"What is topic {i}?") for i in range(n_questions)]
    return list(expand_jobs(run_id, questions, list(ALL_MODES), n, Policy(), model="m"))


@pytest.fixture
def client():
    c = redis.Redis.from_url(URL)
    c.flushdb()
    yield c
    c.flushdb()


@pytest.fixture
def app():
    from qfarm.worker.celery import configure_app

    return configure_app(Settings(redis_url=URL))


def test_bundles_are_consecutive_jobs_in_order():
    js = jobs("r")
    chunks = list(bundles(iter(js), 8))
    assert [len(c) for c in chunks] == [8, 8, 8, 6]
    assert [j for c in chunks for j in c] == js
    assert list(bundles(iter([]), 8)) == []


def test_a_bundle_is_one_message_naming_its_jobs(client, app):
    js = jobs("r")
    assert enqueue_jobs(app, js, bundle_size=8) == 30
    assert client.llen("retrieve") == 4
    bodies = []
    for raw in client.lrange("retrieve", 0, -1):
        message = json.loads(raw)
        assert message["headers"]["task"] == "qfarm.retrieve"
        assert message["content-type"] == "application/json"
        bodies.append(message["headers"]["argsrepr"])
    assert any(label.endswith(" +7>") for label in bodies)


def test_status_scans_find_and_purge_a_runs_bundles_only(client, app):
    enqueue_jobs(app, jobs("keep"), bundle_size=8)
    enqueue_jobs(app, jobs("drop"), bundle_size=8)
    store = ProducerStore(client)
    assert store.pending_message_count("drop") == 4
    assert store.purge_run_messages("drop") == 4
    assert store.pending_message_count("drop") == 0
    assert store.pending_message_count("keep") == 4 and client.llen("retrieve") == 4


def test_task_args_decodes_real_messages_of_each_stage(client, app):
    """Messages as kombu's Redis transport stores them: first-stage refs, a forwarded
    bundle (records as one JSON string), and one a worker holds unacknowledged."""
    from qfarm.common import keys
    from qfarm.common.models import JobRecord
    from qfarm.producer.store import message_run_id, task_args
    from qfarm.worker.celery import send_stage

    js = jobs("fwd", n_questions=1, n=1)
    enqueue_jobs(app, js[:2], bundle_size=2)
    send_stage(keys.GENERATE, [JobRecord(job=j) for j in js[2:]])
    (first,) = client.lrange(keys.RETRIEVE.queue, 0, -1)
    (forwarded,) = client.lrange(keys.GENERATE.queue, 0, -1)
    assert [(ref["qid"], ref["mode"]) for ref in task_args(first)[0]] == [
        (j.question.id, j.mode.value) for j in js[:2]]
    assert [r["job"]["job_id"] for r in json.loads(task_args(forwarded)[0])["records"]] == [
        j.job_id for j in js[2:]]
    assert message_run_id(first) == message_run_id(forwarded) == "fwd"
    # A string that is not a bundle object names no run.
    records = "[" + JobRecord(job=js[2]).model_dump_json() + "]"
    assert message_run_id({"body": json.dumps([[records], {}, {}])}) is None
    # A message read but not acknowledged lives on in kombu's unacked hash only.
    with app.connection_for_read() as conn:
        held = conn.SimpleQueue(keys.GENERATE.queue, no_ack=False).get(timeout=5)
        assert client.llen(keys.GENERATE.queue) == 0 and client.hlen(keys.UNACKED_KEY) == 1
        assert ProducerStore(client).pending_message_count("fwd") == 2
        held.requeue()
    assert message_run_id(b'{"body": "not base64 json"}') is None
    assert message_run_id(b"[]") is None


def test_cancels_add_up_and_purged_jobs_are_counted_as_cancelled(client, app, tmp_path):
    from qfarm.producer.rundir import create_run_dir, read_status
    from qfarm.producer.runs.control import cancel_run
    from qfarm.producer.runs.sweep import make_manifest

    js = jobs("drop")  # 5 questions x 3 modes x n=2 = 30 jobs, 4 bundles of 8
    store = ProducerStore(client)
    m = make_manifest(
        run_id="drop", question_file="<test>", question_file_digest="d", n_questions=5,
        modes=list(ALL_MODES), n=2, policy=Policy(), model="m", endpoints=[],
        simulated=True, retriever="embedded", index_version=None, corpus=None, eager=False,
    )  # fmt: skip
    store.put_manifest(m)
    run_dir = create_run_dir(tmp_path, m)
    enqueue_jobs(app, js[:16], bundle_size=8)
    client.hset(keys.rows_key("drop"), js[0].job_id, "{}")  # already has a row: not cancelled
    first = cancel_run(store, "drop", tmp_path)
    assert (first.purged, first.purged_total, first.cancels) == (2, 2, 1)
    assert first.cancelled_jobs == 15 == client.scard(keys.cancelled_jobs_key("drop"))
    cancelled_at = read_status(run_dir).cancelled_at
    # Jobs enqueued after the first cancel (a resume, say), then a second cancel: it adds.
    enqueue_jobs(app, js[16:], bundle_size=8)
    second = cancel_run(store, "drop", tmp_path)
    assert (second.purged, second.purged_total, second.cancels) == (2, 4, 2)
    assert second.cancelled_jobs == 29
    status = read_status(run_dir)
    assert status.purged_messages == 4 and status.cancels == 2
    assert status.cancelled_jobs == 29
    assert cancelled_at is not None and status.last_cancelled_at is not None
    assert status.cancelled_at == cancelled_at < status.last_cancelled_at
    # A third cancel with nothing queued keeps every count.
    third = cancel_run(store, "drop", tmp_path)
    assert (third.purged, third.purged_total, third.cancelled_jobs) == (0, 4, 29)
    assert read_status(run_dir).purged_messages == 4
