"""Enqueueing bundles on a real Redis (no workers): message count, run lookup, purge."""

from __future__ import annotations

import json
import os

import pytest
import redis

from qfarm.common.jobs import bundles, expand_jobs
from qfarm.common.models import ALL_MODES, Question
from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.producer.store import ProducerStore
from qfarm.producer.sweep import enqueue_jobs

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
    from qfarm.worker.celery_app import configure_app

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
    from qfarm.worker.tasks import send_stage

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
    # A forwarded bundle in the earlier format (a list of whole records) is still recognised.
    records = "[" + JobRecord(job=js[2]).model_dump_json() + "]"
    assert message_run_id({"body": json.dumps([[records], {}, {}])}) == "fwd"
    # A message read but not acknowledged lives on in kombu's unacked hash only.
    with app.connection_for_read() as conn:
        held = conn.SimpleQueue(keys.GENERATE.queue, no_ack=False).get(timeout=5)
        assert client.llen(keys.GENERATE.queue) == 0 and client.hlen(keys.UNACKED_KEY) == 1
        assert ProducerStore(client).pending_message_count("fwd") == 2
        held.requeue()
    assert message_run_id(b'{"body": "not base64 json"}') is None
    assert message_run_id(b"[]") is None
