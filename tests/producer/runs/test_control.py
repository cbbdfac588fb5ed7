"""Run operations shared by the CLI and the HTTP API: describe, list, cancel."""

from __future__ import annotations

import time

import fakeredis
import pytest

from qfarm.common import keys
from qfarm.common.errors import InputError
from qfarm.common.models import Mode
from qfarm.common.policy import Policy
from qfarm.common.runstatus import StatusRecord
from qfarm.common.settings import Settings
from qfarm.producer.rundir import create_run_dir, write_status
from qfarm.producer.runs.control import cancel_run, describe_run, list_runs
from qfarm.producer.runs.sweep import make_manifest
from qfarm.producer.store import ProducerStore


def manifest(run_id: str, n_questions: int = 5):
    return make_manifest(
        run_id=run_id, question_file="<test>", question_file_digest="d", n_questions=n_questions,
        modes=[Mode.QUOTE, Mode.CLAIM_LATTICE], n=2, policy=Policy(), model="m", endpoints=[],
        simulated=True, retriever="embedded", index_version=None, corpus=None, eager=False,
    )


@pytest.fixture
def store():
    return ProducerStore(fakeredis.FakeRedis())


def test_a_running_run_is_described_from_redis_with_an_eta(tmp_path, store):
    settings = Settings(results_dir=tmp_path)
    m = manifest("run-a")  # 5 questions x 2 modes x n=2 = 20 jobs
    store.put_manifest(m)
    run_dir = create_run_dir(tmp_path, m)
    write_status(run_dir, StatusRecord(status="running", started_at=time.time() - 10))
    for i in range(5):
        store.client.hset(keys.rows_key("run-a"), f"j{i}", "{}")
    info = describe_run("run-a", settings, store)
    assert info["source"] == "redis" and info["state"] == "running"
    assert info["progress"]["done"] == 5 and info["progress"]["total"] == 20
    assert info["eta_s"] == pytest.approx(30, rel=0.2)  # 5 rows in 10 s, 15 to go


def test_a_finished_run_redis_forgot_is_described_from_its_files(tmp_path, store):
    settings = Settings(results_dir=tmp_path)
    m = manifest("run-b")
    run_dir = create_run_dir(tmp_path, m)
    write_status(run_dir, StatusRecord(status="complete", rows=20))
    (run_dir / "rows.jsonl").write_text("".join(f'{{"job_id": "j{i}"}}\n' for i in range(20)))
    info = describe_run("run-b", settings, store)
    assert info["source"] == "disk" and info["state"] == "complete"
    assert info["progress"]["done"] == 20 and info["eta_s"] is None
    # The rows are counted in rows.jsonl, not copied from status.json: cut short, the run
    # is incomplete whatever status.json says.
    (run_dir / "rows.jsonl").write_text("".join(f'{{"job_id": "j{i}"}}\n' for i in range(7)))
    info = describe_run("run-b", settings, store)
    assert info["state"] == "incomplete" and info["progress"]["done"] == 7
    with pytest.raises(InputError, match="not found"):
        describe_run("run-c", settings, store)


def test_runs_are_listed_newest_first_a_page_at_a_time(tmp_path, store):
    settings = Settings(results_dir=tmp_path)
    for i in range(5):
        m = manifest(f"run-{i}").model_copy(update={"created_at": 1000.0 + i})
        if i % 2:
            store.put_manifest(m)  # only in Redis (a CLI on another host)
        else:
            create_run_dir(tmp_path, m)  # only on disk (Redis forgot)
    page, nxt = list_runs(settings, store, offset=0, limit=2)
    assert [r["run_id"] for r in page] == ["run-4", "run-3"] and nxt == 2
    page, nxt = list_runs(settings, store, offset=4, limit=2)
    assert [r["run_id"] for r in page] == ["run-0"] and nxt is None


def test_single_questions_are_listed_apart_from_sweeps(tmp_path, store):
    settings = Settings(results_dir=tmp_path)
    for i, run_id in enumerate(["run-0", "ask-run-1", "run-2", "ask-run-3"]):
        store.put_manifest(manifest(run_id).model_copy(update={"created_at": 1000.0 + i}))
    listed = lambda kind: [(r["run_id"], r["kind"]) for r in  # noqa: E731
                           list_runs(settings, store, offset=0, limit=10, kind=kind)[0]]
    assert listed("sweep") == [("run-2", "sweep"), ("run-0", "sweep")]
    assert listed("ask") == [("ask-run-3", "ask"), ("ask-run-1", "ask")]
    assert [r for r, _ in listed("all")] == ["ask-run-3", "run-2", "ask-run-1", "run-0"]
    page, nxt = list_runs(settings, store, offset=0, limit=1)  # sweeps by default
    assert [r["run_id"] for r in page] == ["run-2"] and nxt == 1


def test_cancel_sets_the_flag_and_notes_it_beside_the_manifest(tmp_path, store):
    m = manifest("run-x")
    store.put_manifest(m)
    run_dir = create_run_dir(tmp_path, m)
    done = cancel_run(store, "run-x", tmp_path)
    assert done.total == 20 and done.purged == 0
    assert store.client.exists(keys.cancelled_key("run-x"))
    assert "cancelled_at" in (run_dir / "status.json").read_text()
    assert describe_run("run-x", Settings(results_dir=tmp_path), store)["state"] == "cancelled"
    with pytest.raises(InputError, match="not found in Redis"):
        cancel_run(store, "nope", tmp_path)


def test_a_questions_run_expires_with_its_row_and_leaves_no_index_entry(store):
    from qfarm.common import keys
    from qfarm.producer.rundir import ASK_RUN_PREFIX

    old = manifest(ASK_RUN_PREFIX + "old").model_copy(update={"created_at": 1_000.0})
    store.client.zadd(keys.RUNS_KEY, {old.run_id: old.created_at})  # its manifest long gone
    sweep = manifest("20200101-000000-aaaaaa").model_copy(update={"created_at": 1_000.0})
    store.put_manifest(sweep)  # a sweep's run is kept
    asked = manifest(ASK_RUN_PREFIX + "new")
    store.put_manifest(asked, ttl_s=keys.ROW_TTL_S)
    assert 0 < store.client.ttl(keys.manifest_key(asked.run_id)) <= keys.ROW_TTL_S
    assert store.client.ttl(keys.manifest_key(sweep.run_id)) == -1
    listed = {r.decode() for r in store.client.zrange(keys.RUNS_KEY, 0, -1)}
    assert listed == {sweep.run_id, asked.run_id}
