"""Following a run on an in-memory Redis (fakeredis): the aggregator writes each job id at most
once, one follower holds the lease, the follower rides out and heals Redis outages."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import fakeredis
import pytest
import redis

from qfarm.common import keys
from qfarm.producer.runs.aggregator import Aggregator
from qfarm.producer.runs.lease import FollowerLease
from qfarm.producer.store import ProducerStore


def land(client, run_id: str, *job_ids: str, error: str | None = None) -> None:
    """What a worker's row write does: HSETNX the row, log its id once."""
    script = client.register_script(keys.WRITE_ROW_LUA)
    for job_id in job_ids:
        row = json.dumps({"run_id": run_id, "job_id": job_id, "error": error})
        script(keys=[keys.rows_key(run_id), keys.log_key(run_id), keys.failed_key(run_id),
                     keys.VERIFY.counter_key(run_id)],
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
    assert set(store.client.hkeys(keys.rows_key("r"))) == {b"a", b"b", b"x"}
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


class Flaky(ProducerStore):
    """A store whose Redis is unreachable for the first ``down`` polls."""

    def __init__(self, client, down: int):
        super().__init__(client)
        self.down = down

    def progress(self, run_id, total):
        if self.down > 0:
            self.down -= 1
            raise redis.exceptions.ConnectionError("Error 111 connecting. Connection refused.")
        return super().progress(run_id, total)


def a_manifest(run_id: str, n_jobs: int):
    from qfarm.common.models import Mode
    from qfarm.common.policy import Policy
    from qfarm.producer.runs.sweep import make_manifest

    return make_manifest(
        run_id=run_id, question_file="-", question_file_digest="-", n_questions=n_jobs,
        modes=[Mode.QUOTE], n=1, policy=Policy(), model="m", endpoints=[], simulated=True,
        retriever="embedded", index_version=None, corpus=None, eager=False,
    )


def test_the_follower_waits_for_redis_and_carries_on(tmp_path):
    from qfarm.producer.runs.sweep import Follower

    store = Flaky(fakeredis.FakeRedis(), down=3)
    manifest = a_manifest("r", 2)
    store.put_manifest(manifest)
    land(store.client, "r", "a", "b")
    said: list[str] = []
    follower = Follower(store, manifest, tmp_path / "rows.jsonl", say=said.append, poll_s=0.01)
    prog = follower.run(timeout_s=30)
    assert prog.done == 2 and ids_in(tmp_path / "rows.jsonl") == ["a", "b"]
    assert [s.split(": ", 1)[1].split(" (")[0].split(" after")[0] for s in said] == [
        "Redis unreachable", "Redis is back"]


def test_the_follower_gives_up_after_the_reconnect_budget(tmp_path):
    from qfarm.producer.runs.sweep import Follower, RedisGone

    store = Flaky(fakeredis.FakeRedis(), down=10**6)
    manifest = a_manifest("r", 2)
    follower = Follower(store, manifest, tmp_path / "rows.jsonl", say=lambda s: None,
                        poll_s=0.01, reconnect_s=0.05)
    with pytest.raises(RedisGone):
        follower.run(timeout_s=30)


def test_the_follower_heals_a_run_redis_lost(tmp_path):
    from qfarm.producer.runs.sweep import Follower

    store = ProducerStore(fakeredis.FakeRedis())
    manifest = a_manifest("r", 3)
    store.put_manifest(manifest)
    land(store.client, "r", "a", "b")
    Aggregator(store, "r", tmp_path / "rows.jsonl").drain()
    store.client.flushall()  # restarted without persistence
    resent: list[int] = []

    def reconcile() -> int:
        resent.append(1)
        land(store.client, "r", "c")  # the re-sent job lands
        return 1

    follower = Follower(store, manifest, tmp_path / "rows.jsonl", reconcile=reconcile,
                        say=lambda s: None, poll_s=0.01)
    prog = follower.run(timeout_s=30)
    assert prog.done == 3 and resent == [1] and follower.restored == 2
    assert store.manifest("r") == manifest
    assert ids_in(tmp_path / "rows.jsonl") == ["a", "b", "c"]


class CtrlCInAFinalizer:
    """Garbage collection runs ``__del__`` between any two lines: a SIGINT that arrives
    there raises KeyboardInterrupt inside it, and Python prints and drops it."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


def test_a_ctrl_c_that_a_finalizer_swallowed_still_ends_the_follow(tmp_path, monkeypatch):
    from qfarm.producer import interrupts
    from qfarm.producer.runs.sweep import Follower

    store = ProducerStore(fakeredis.FakeRedis())
    manifest = a_manifest("r", 2)
    store.put_manifest(manifest)
    land(store.client, "r", "a")  # the other job never lands: the follow would not end
    dropped: list[type] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))
    previous = signal.getsignal(signal.SIGINT)
    interrupts.install()
    try:
        obj = CtrlCInAFinalizer()
        del obj  # the KeyboardInterrupt is raised in __del__ and dropped
        assert dropped == [KeyboardInterrupt]
        follower = Follower(store, manifest, tmp_path / "rows.jsonl", say=lambda s: None,
                            poll_s=0.01)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            follower.run(timeout_s=5)
        assert time.monotonic() - t0 < 1
        interrupts.check()  # raised once, not again
    finally:
        signal.signal(signal.SIGINT, previous)
        interrupts.handled()


def test_the_follower_names_the_queues_without_a_worker_and_stops_after_the_bound(tmp_path):
    from qfarm.producer.runs.sweep import Follower, NoWorkers

    store = ProducerStore(fakeredis.FakeRedis())
    manifest = a_manifest("r", 2)
    store.put_manifest(manifest)
    said: list[str] = []
    follower = Follower(store, manifest, tmp_path / "rows.jsonl", say=said.append, poll_s=0.01,
                        unconsumed=lambda: ["generate", "verify"], wait_for_workers_s=0.2,
                        consumer_check_s=0.01, worker_hint=lambda qs: "celery ... -Q " + ",".join(qs))
    with pytest.raises(NoWorkers) as caught:
        follower.run(timeout_s=30)
    assert caught.value.queues == ["generate", "verify"]
    assert "no worker consumed the queues generate, verify for" in str(caught.value)
    warnings = [s for s in said if "warning" in s]
    assert len(warnings) == 1  # said once, not at every check
    assert "no worker consumes the queues generate, verify" in warnings[0]
    assert "celery ... -Q generate,verify" in warnings[0] and "--wait-for-workers" in warnings[0]


def test_the_follower_goes_on_once_a_worker_consumes_the_queues(tmp_path):
    from qfarm.producer.runs.sweep import Follower

    store = ProducerStore(fakeredis.FakeRedis())
    manifest = a_manifest("r", 2)
    store.put_manifest(manifest)
    checks: list[int] = []

    def unconsumed() -> list[str]:
        checks.append(1)
        if len(checks) < 3:
            return ["retrieve"]
        land(store.client, "r", "a", "b")  # a worker started: the jobs land
        return []

    said: list[str] = []
    follower = Follower(store, manifest, tmp_path / "rows.jsonl", say=said.append, poll_s=0.01,
                        unconsumed=unconsumed, wait_for_workers_s=0, consumer_check_s=0.01)
    prog = follower.run(timeout_s=30)
    assert prog.done == 2 and ids_in(tmp_path / "rows.jsonl") == ["a", "b"]
    assert any("no worker consumes the queue retrieve" in s and "waits for one" in s for s in said)
    assert any("every queue of the run has a worker now" in s for s in said)


# --------------------------------------------------------------------------- one follower


@pytest.fixture
def followed(monkeypatch):
    """How the one ``Follower`` followed each run id: ``step`` alone (an eager run's runner
    calls it between jobs), or ``run`` repeating ``step`` (a run on the farm)."""
    from collections import defaultdict

    from qfarm.producer.runs.sweep import Follower

    seen: dict[str, set[str]] = defaultdict(set)
    step, run = Follower.step, Follower.run

    def spy_step(self, *args, **kwargs):
        seen[self.run_id].add("step")
        return step(self, *args, **kwargs)

    def spy_run(self, *args, **kwargs):
        seen[self.run_id].add("run")
        return run(self, *args, **kwargs)

    monkeypatch.setattr(Follower, "step", spy_step)
    monkeypatch.setattr(Follower, "run", spy_run)
    return seen


QUESTIONS_OF_A_RUN = ["What is jazz?", "What is Paris?", "What is iron?", "What is tea?"]


def test_every_way_a_run_lives_is_followed_by_the_one_follower(followed, eager_endpoints,
                                                                 tmp_path):
    """The eager sweep (concurrent and ``--serial``), its ``--resume`` and its
    ``--retry-errors`` are followed by ``sweep.Follower`` (its runner calling ``step``); a
    distributed sweep, ``--attach`` and a distributed ``--resume`` end in ``follow_to_end``,
    and a distributed ``--retry-errors`` in ``follow_retry``: ``Follower.run`` both, which
    repeats ``step`` (its recovery and hand-over: the tests above; a cancelled run is
    ended by it too)."""
    import inspect

    from qfarm.common.vocab import RunStatus
    from qfarm.ops.sim.launch import start_simulator
    from qfarm.producer import SweepSpec, run_sweep
    from qfarm.producer.api import resume_eager, retry_errors
    from qfarm.producer.rundir import create_run_dir
    from qfarm.producer.runs import distributed, follow, retry

    settings, endpoints, urls, sim = eager_endpoints
    question_file = tmp_path / "questions.txt"  # a resume reads the questions again
    question_file.write_text("\n".join(QUESTIONS_OF_A_RUN) + "\n")
    spec = SweepSpec(questions=question_file, modes=["quote"])

    sweep = run_sweep(spec, eager=True, settings=settings, endpoints=endpoints)
    assert sweep.status == RunStatus.COMPLETE and followed[sweep.run_id] == {"step"}
    serial = run_sweep(spec, eager=True, serial=True, settings=settings, endpoints=endpoints)
    assert serial.status == RunStatus.COMPLETE and followed[serial.run_id] == {"step"}

    def stop_after_two(prog) -> None:  # a Ctrl-C once two rows are in
        if prog.done >= 2:
            raise KeyboardInterrupt

    cut = run_sweep(spec, eager=True, serial=True, settings=settings, endpoints=endpoints,
                    on_progress=stop_after_two)
    assert cut.status == RunStatus.INTERRUPTED
    followed.clear()
    resumed = resume_eager(cut.run_id, settings=settings, endpoints=endpoints)
    assert resumed.status == RunStatus.COMPLETE and followed[cut.run_id] == {"step"}

    def kill_after_two(prog) -> None:  # the endpoint dies: the rest are error rows
        if prog.done >= 2 and sim.proc.poll() is None:
            sim.stop()

    broken = run_sweep(spec, eager=True, serial=True, settings=settings, endpoints=endpoints,
                       on_progress=kill_after_two)
    assert any(row.error for row in broken.rows())
    fresh = start_simulator(ttft_ms=0, tpot_ms=0)
    try:
        urls[:] = [fresh.url]
        followed.clear()
        retried = retry_errors(broken.run_id, settings=settings, endpoints=endpoints)
    finally:
        fresh.stop()
    assert not any(row.error for row in retried.rows()) and followed[broken.run_id] == {"step"}

    # On the farm: the follow of a distributed sweep, of --attach and of --resume.
    store = ProducerStore(fakeredis.FakeRedis())
    manifest = a_manifest("farm-run", 2)
    store.put_manifest(manifest)
    run_dir = create_run_dir(tmp_path / "farm", manifest)
    land(store.client, "farm-run", "j1", "j2")  # its two rows, already written by workers
    ended = follow.follow_to_end(store, run_dir, manifest, settings, None, lambda line: None,
                                 reconcile=None)
    assert ended.status == RunStatus.COMPLETE and followed["farm-run"] == {"run", "step"}
    assert "follow_to_end(" in inspect.getsource(distributed.run_distributed)
    assert "follow_to_end(" in inspect.getsource(follow.follow_run)  # --attach, --resume
    assert "follower.run(" in inspect.getsource(retry.follow_retry)  # and its own test

