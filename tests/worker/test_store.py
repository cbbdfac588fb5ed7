"""The worker's Redis store on bundles: one round trip for the checks, one for the writes."""

from __future__ import annotations

import fakeredis
import pytest

from qfarm.common import keys
from qfarm.common.models import Mode, Row
from qfarm.worker.store import InProcessStore, WorkerStore


@pytest.fixture
def store() -> WorkerStore:
    return WorkerStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()))


@pytest.fixture(params=[WorkerStore, InProcessStore])
def any_store(request: pytest.FixtureRequest) -> WorkerStore:
    """Both stores keep the same write-once guarantee; only how they write differs."""
    return request.param(fakeredis.FakeRedis(server=fakeredis.FakeServer()))


def row(job_id: str, run_id: str = "r", error: str | None = None) -> Row:
    return Row(run_id=run_id, job_id=job_id, question="q?", question_id="q", mode=Mode.QUOTE,
               sample_index=0, error=error)


def test_enter_stage_reports_rows_per_job_and_counts_the_bundle(any_store):
    store = any_store
    store.write_row(row("b"))
    cancelled, has_row = store.enter_stage("r", ["a", "b", "c"], keys.RETRIEVE)
    assert cancelled is False and has_row == [False, True, False]
    store.enter_stage("r", ["d"], keys.RETRIEVE)
    assert int(store.client.get("qfarm:run:r:stage:retrieve")) == 4
    assert store.enter_stage("r", [], keys.RETRIEVE) == (False, [])


def test_enter_stage_sees_the_cancel_flag(store):
    store.client.set("qfarm:run:r:cancelled", "1")
    assert store.enter_stage("r", ["a"], keys.GENERATE)[0] is True


def test_write_rows_writes_each_job_once_even_within_one_bundle(any_store):
    store = any_store
    assert store.write_rows([row("a"), row("b", error="llm: down"), row("a")]) == [True, True, False]
    assert store.write_rows([row("b"), row("c")]) == [False, True]
    assert store.client.hlen("qfarm:run:r:rows") == 3
    assert store.client.lrange("qfarm:run:r:log", 0, -1) == [b"a", b"b", b"c"]
    assert int(store.client.get("qfarm:run:r:failed")) == 1


def test_the_cache_reads_and_writes_many_at_once(store):
    store.put_cached_many([("d1", row("a")), ("d2", row("b"))])
    got = store.get_cached_many(["d1", "missing", "d2"])
    assert [g and g["job_id"] for g in got] == ["a", None, "b"]
    assert store.get_cached_many([]) == []


def test_write_rows_loads_the_script_when_the_server_has_forgotten_it(store):
    # A restarted Redis has no scripts: the bundle's EVALSHAs fail and its rows are written
    # through the registered script instead, still once each.
    store.client.script_flush()
    assert store.write_rows([row("a"), row("b")]) == [True, True]
    store.client.script_flush()
    assert store.write_rows([row("a"), row("c"), row("c")]) == [False, True, False]
    assert store.client.lrange("qfarm:run:r:log", 0, -1) == [b"a", b"b", b"c"]


def test_write_rows_is_one_round_trip(store, monkeypatch):
    store.write_row(row("warm"))  # the registered script loads itself once
    pipeline_cls = type(store.client.pipeline())
    sent: list[str] = []
    execute, immediate = pipeline_cls.execute, pipeline_cls.immediate_execute_command

    def counting_execute(pipe, *args, **kwargs):
        sent.append(f"pipeline of {len(pipe.command_stack)}")
        return execute(pipe, *args, **kwargs)

    def counting_immediate(pipe, *args, **kwargs):
        sent.append(str(args[0]))  # e.g. redis-py's SCRIPT EXISTS before a script pipeline
        return immediate(pipe, *args, **kwargs)

    monkeypatch.setattr(pipeline_cls, "execute", counting_execute)
    monkeypatch.setattr(pipeline_cls, "immediate_execute_command", counting_immediate)
    assert store.write_rows([row("a"), row("b"), row("c")]) == [True, True, True]
    assert sent == ["pipeline of 3"]


def test_the_in_process_store_writes_each_row_once_from_many_threads_without_a_script():
    import threading

    store = InProcessStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()))
    results: list[bool] = []
    lock = threading.Lock()

    def writer(k: int) -> None:
        for i in range(50):
            wrote = store.write_rows([row(f"j{i}"), row(f"j{(i + k) % 50}", error="x")])
            with lock:
                results.extend(wrote)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 50
    assert sorted(store.client.lrange("qfarm:run:r:log", 0, -1)) == sorted(f"j{i}".encode() for i in range(50))
    assert int(store.client.get("qfarm:run:r:stage:verify")) == 4 * 50 * 2
    assert store.client.ttl("qfarm:run:r:rows") > 0
    assert store.write_row(row("j0")) is False and store.write_row(row("new")) is True
    assert store.client.script_exists(store._write_row.sha) == [False]  # no Lua ran
