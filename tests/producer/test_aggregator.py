"""The aggregator writes each job id at most once, whatever Redis hands it (fakeredis)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import fakeredis
import pytest

from common import keys
from producer.aggregator import Aggregator
from producer.lease import FollowerLease
from producer.store import ProducerStore


def land(client, run_id: str, *job_ids: str, error: str | None = None) -> None:
    """What a worker's row write does: HSETNX the row, log its id once."""
    script = client.register_script(keys.WRITE_ROW_LUA)
    for job_id in job_ids:
        row = json.dumps({"run_id": run_id, "job_id": job_id, "error": error})
        script(keys=[keys.run_key(run_id, p) for p in ("rows", "log", "failed", "stage:verify")],
               args=[job_id, row, "1" if error else "0", 0])


@pytest.fixture
def store():
    return ProducerStore(fakeredis.FakeRedis())


def ids_in(path: Path) -> list[str]:
    return [json.loads(line)["job_id"] for line in path.read_text().splitlines()]


def test_a_log_rebuilt_after_a_restart_adds_only_the_missing_ids(store, tmp_path):
    path = tmp_path / "rows.jsonl"
    land(store.client, "r", "a", "b", "c")
    agg = Aggregator(store, "r", path)
    assert agg.drain() == 3
    store.client.flushall()  # Redis restarted without persistence
    land(store.client, "r", "b", "d", "a", "e", "f")  # re-run jobs land again, in another order
    assert agg.drain() == 3
    assert ids_in(path) == ["a", "b", "c", "d", "e", "f"] and agg.written == 6


def test_a_new_aggregator_counts_distinct_ids_and_cuts_a_partial_line(store, tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"job_id": "a"}\n{"job_id": "a"}\n{"job_id": "b"}\n{"job_id": "c", "err')
    agg = Aggregator(store, "r", path)
    assert agg.written == 2 and agg.duplicates_in_file == 1
    land(store.client, "r", "a", "b", "c")
    assert agg.drain() == 1
    assert ids_in(path)[-1] == "c" and path.read_bytes().endswith(b"\n")


def test_two_aggregators_on_one_file_never_write_an_id_twice(store, tmp_path):
    path = tmp_path / "rows.jsonl"
    one, two = Aggregator(store, "r", path), Aggregator(store, "r", path)
    land(store.client, "r", "a", "b")
    assert one.drain() == 2
    land(store.client, "r", "c")
    assert two.drain() == 1  # it re-reads the file the other one grew
    assert one.drain() == 0
    assert ids_in(path) == ["a", "b", "c"]


def test_restore_puts_back_the_rows_redis_lost(store, tmp_path):
    path = tmp_path / "rows.jsonl"
    land(store.client, "r", "a", "b")
    land(store.client, "r", "x", error="llm: down")
    agg = Aggregator(store, "r", path)
    agg.drain()
    store.client.flushall()
    land(store.client, "r", "b")
    assert agg.restore_to_redis() == 2
    assert set(store.client.hkeys(keys.run_key("r", "rows"))) == {b"a", b"b", b"x"}
    assert store.progress("r", 3).failed == 1 and store.progress("r", 3).done == 3
    assert agg.drain() == 0 and ids_in(path) == ["a", "b", "x"]


def test_one_follower_holds_the_lease_until_it_releases_or_it_expires(store):
    first, second = FollowerLease(store.client, "r"), FollowerLease(store.client, "r", ttl_s=0.2)
    assert first.hold() and first.hold()  # renewing is holding
    assert not second.hold()
    assert second.holder() == first.token
    first.release()
    assert second.hold() and not first.hold()
    store.client.pexpire(second.key, 1)
    time.sleep(0.01)
    assert first.hold()
