"""The aggregator's memory: its set of job ids is exact across merges at 8 bytes an id, and
an eager run's aggregator empties the rows it has written out of the run's private store."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import fakeredis

from qfarm.common import keys
from qfarm.producer.runs.aggregator import Aggregator, JobIdSet
from qfarm.producer.store import ProducerStore


def test_membership_and_duplicates_across_merges() -> None:
    ids = JobIdSet()
    ids.MERGE_AT = 64  # type: ignore[misc]  # many merges on few ids
    names = [f"{i:020x}" for i in range(1_000)]
    assert all(ids.add(n) for n in names)
    assert not any(ids.add(n) for n in names[::7])
    assert len(ids) == 1_000
    assert all(n in ids for n in names)
    assert f"{5_000:020x}" not in ids and 3 not in ids


def held_bytes(count: int) -> tuple[int, int]:
    """(bytes held, peak bytes) after adding ``count`` ids."""
    tracemalloc.start()
    try:
        ids = JobIdSet()
        ids.MERGE_AT = 1024  # type: ignore[misc]
        for i in range(count):
            ids.add(f"{i:020x}")
        return tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()


def test_memory_is_about_eight_bytes_an_id() -> None:
    (small, small_peak), (large, large_peak) = held_bytes(10_000), held_bytes(60_000)
    per_id = (large - small) / 50_000
    # The newest ids (fewer than MERGE_AT) sit in a set at about 60 bytes each: bounded.
    assert per_id < 16, per_id
    # A merge holds the array and its one new copy (a union of the two took five copies:
    # 35 MB at a million ids instead of 20).
    assert (large_peak - small_peak) / 50_000 < 24, (large_peak - small_peak) / 50_000


def test_an_eager_aggregator_forgets_the_rows_it_wrote(tmp_path: Path) -> None:
    """The eager run's store is its own memory: rows leave it once in rows.jsonl, their ids
    stay (progress counts them, a second write of the job is still refused)."""
    store = ProducerStore(fakeredis.FakeRedis())
    path = tmp_path / "rows.jsonl"
    agg = Aggregator(store, "r", path, forget_drained=True)
    land(store.client, "r", "a", "b")
    assert agg.drain() == 2
    land(store.client, "r", "c", "a")  # "a" again: refused, as before
    assert agg.drain() == 1
    assert ids_in(path) == ["a", "b", "c"] and agg.written == 3
    rows = store.client.hgetall(keys.rows_key("r"))
    assert rows == {b"a": b"", b"b": b"", b"c": b""}
    assert store.progress("r", 3).done == 3
    assert Aggregator(store, "r", tmp_path / "again.jsonl").drain() == 0  # nothing to copy


def land(client: fakeredis.FakeRedis, run_id: str, *job_ids: str) -> None:
    """What a worker's row write does: HSETNX the row, log its id once."""
    script = client.register_script(keys.WRITE_ROW_LUA)
    for job_id in job_ids:
        row = json.dumps({"run_id": run_id, "job_id": job_id, "error": None})
        script(keys=[keys.rows_key(run_id), keys.log_key(run_id), keys.failed_key(run_id),
                     keys.VERIFY.counter_key(run_id)], args=[job_id, row, "0", 0])


def ids_in(path: Path) -> list[str]:
    return [json.loads(line)["job_id"] for line in path.read_text().splitlines()]
