"""Enqueueing bundles on a real Redis (no workers): message count, run lookup, purge."""

from __future__ import annotations

import json
import os

import pytest
import redis

from common.jobs import expand_jobs
from common.models import ALL_MODES, Question
from common.policy import Policy
from common.settings import Settings
from producer.store import ProducerStore
from producer.sweep import bundles, enqueue_jobs

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
    from worker.celery_app import configure_app

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


def test_a_forwarded_bundle_is_found_by_its_run_too():
    """Between stages a bundle travels as one JSON string of records."""
    import base64

    from common.models import JobRecord
    from producer.store import _message_run_id
    from worker.flow import dump_records

    records = [JobRecord(job=j) for j in jobs("fwd", n_questions=1, n=1)]
    body = json.dumps([[dump_records(records)], {}, {}]).encode()
    raw = json.dumps({"body": base64.b64encode(body).decode(),
                      "properties": {"body_encoding": "base64"}}).encode()
    assert _message_run_id(raw) == "fwd"
    assert _message_run_id(b'{"body": "not base64 json"}') is None
