"""The row write under ``--retry-errors``, on a real Redis: a later attempt replaces only an
error row, once, whatever is delivered twice."""

from __future__ import annotations

import json
import os

import pytest
import redis

from qfarm.common import keys
from qfarm.common.models import Mode, Row
from qfarm.worker.store import WorkerStore

PORT = int(os.environ.get("QFARM_TEST_REDIS_PORT", "6379"))
DB = int(os.environ.get("QFARM_TEST_REDIS_DB", "9"))


@pytest.fixture
def store():
    client = redis.Redis(port=PORT, db=DB)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail(f"no Redis on port {PORT} (QFARM_TEST_REDIS_PORT)")
    client.delete(*[k for k in client.scan_iter("qfarm:run:rt:*")] or ["-"])
    yield WorkerStore(client)
    client.delete(*[k for k in client.scan_iter("qfarm:run:rt:*")] or ["-"])


def row(job_id: str, *, error: str | None = None, retried: list[str] | None = None,
        worker: str = "w") -> Row:
    return Row(run_id="rt", job_id=job_id, question="q?", question_id="q", mode=Mode.QUOTE,
               sample_index=0, error=error, retried_errors=retried or [], worker=worker)


def stored(store: WorkerStore, job_id: str) -> dict:
    return json.loads(store.client.hget(keys.rows_key("rt"), job_id))


def failed(store: WorkerStore) -> int:
    return int(store.client.get(keys.failed_key("rt")) or 0)


def test_a_retry_replaces_an_error_row_once_and_a_redelivery_writes_nothing(store):
    assert store.write_rows([row("a", error="llm: down"), row("b")]) == [True, True]
    assert failed(store) == 1
    # The first run's job delivered again: write-once as ever.
    assert store.write_row(row("a", worker="dup")) is False
    # Attempt 1 replaces the error row; the same attempt delivered twice does not.
    assert store.write_row(row("a", retried=["llm"], worker="retry")) is True
    assert store.write_row(row("a", retried=["llm"], worker="again")) is False
    assert stored(store, "a")["worker"] == "retry" and failed(store) == 0
    # A success is never replaced, not even by a later attempt.
    assert store.write_row(row("b", retried=["llm"], worker="late")) is False
    assert stored(store, "b")["worker"] == "w"
    assert store.client.hlen(keys.rows_key("rt")) == 2
    assert store.client.lrange(keys.log_key("rt"), 0, -1) == [b"a", b"b", b"a"]


def test_an_error_again_stays_an_error_row_and_the_next_attempt_may_replace_it(store):
    store.write_row(row("a", error="llm: down"))
    assert store.write_row(row("a", error="retrieval: gone", retried=["llm"])) is True
    assert failed(store) == 1
    assert store.write_row(row("a", error="llm: down", retried=["llm"], worker="x")) is False
    assert store.write_rows([row("a", retried=["llm", "retrieval"], worker="third"),
                             row("c")]) == [True, True]
    assert stored(store, "a")["retried_errors"] == ["llm", "retrieval"]
    assert failed(store) == 0


def test_the_entry_check_lets_only_a_retry_of_an_error_row_through(store):
    store.write_rows([row("a", error="llm: down"), row("b")])
    _, done = store.enter_stage("rt", ["a", "b", "c", "a"], keys.RETRIEVE, [1, 1, 1, 0])
    assert done == [False, True, False, True]
    store.write_row(row("a", retried=["llm"]))
    assert store.enter_stage("rt", ["a"], keys.RETRIEVE, [1])[1] == [True]
