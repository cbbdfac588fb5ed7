"""A run's shown status comes from its rows and its producer's process, not status.json."""

from __future__ import annotations

import pytest

from qfarm.common.errors import RunStateError
from qfarm.common.runstatus import ProducerProcess, RetryEntry, StatusRecord, run_status


@pytest.mark.parametrize(
    ("recorded", "rows", "eager", "alive", "expected"),
    [
        ("complete", 8, True, None, "complete"),
        ("complete", 0, True, None, "incomplete"),  # rows.jsonl lost, emptied or garbled
        ("complete", 7, False, None, "incomplete"),  # its last line cut short
        ("running", 3, True, True, "running"),
        ("running", 3, True, False, "interrupted"),  # the eager process was killed
        ("running", 8, True, False, "complete"),  # killed after its last row
        ("running", 3, True, None, "running"),  # another host's process: cannot tell
        ("running", 3, False, False, "running"),  # workers go on without the producer
        ("enqueueing", 0, True, False, "enqueue interrupted"),
        ("enqueueing", 3, False, False, "enqueue interrupted"),  # died while sending
        ("enqueueing", 3, False, True, "enqueueing"),
        ("cancelled", 3, False, None, "cancelled"),
        ("failed", 8, False, None, "failed"),
        ("interrupted", 3, True, None, "interrupted"),
        ("incomplete", 7, True, None, "incomplete"),
        (None, 3, True, None, "incomplete"),
        (None, 8, True, None, "complete"),
    ],
)
def test_run_status(recorded, rows, eager, alive, expected):
    assert run_status(recorded, rows=rows, n_jobs=8, eager=eager, producer_alive=alive) == expected


@pytest.mark.parametrize(
    ("recorded", "done", "cancelled", "error", "from_rows", "alive", "expected"),
    [
        # Read from Redis: the run error, status.json's settled word, the cancel flag, the rows.
        (None, 3, False, None, False, None, "running"),
        (None, 8, False, None, False, None, "complete"),
        (None, 8, True, None, False, None, "cancelled"),
        (None, 3, True, "boom", False, None, "failed"),
        ("incomplete", 3, False, None, False, None, "incomplete"),  # the producer settled it
        ("running", 3, False, None, False, False, "running"),  # workers go on
        ("enqueueing", 3, False, None, False, None, "enqueueing"),
        # Read from the run directory alone: the rows and the producer's process decide.
        ("running", 3, False, None, True, False, "interrupted"),
        ("complete", 5, False, None, True, None, "incomplete"),
        ("running", 3, True, None, True, False, "cancelled"),
        ("running", 3, False, "boom", True, False, "failed"),
    ],
)
def test_run_state(recorded, done, cancelled, error, from_rows, alive, expected):
    from qfarm.common.runstatus import run_state

    got = run_state(recorded, done=done, total=8, cancelled=cancelled, error=error,
                    from_rows=from_rows, eager=True, producer_alive=alive)
    assert got == expected


# --------------------------------------------------------------------------- the record

HERE = ProducerProcess(4242, "host-a")


def eager_run() -> StatusRecord:
    return StatusRecord().started(10.0, HERE, enqueueing=False)


def test_a_distributed_run_enqueues_then_runs_then_finishes():
    rec = StatusRecord().started(10.0, HERE, enqueueing=True)
    assert (rec.status, rec.started_at, rec.pid, rec.host) == ("enqueueing", 10.0, 4242, "host-a")
    rec = rec.jobs_sent(8)
    assert (rec.status, rec.enqueued) == ("running", 8)
    done = rec.finished(20.0, rows=8, n_jobs=8)
    assert (done.status, done.finished_at, done.rows) == ("complete", 20.0, 8)


@pytest.mark.parametrize(("rows", "cancelled", "interrupted", "expected"), [
    (8, True, True, "complete"),  # every job has a row, whatever stopped it
    (5, True, False, "cancelled"),
    (5, False, True, "interrupted"),
    (5, False, False, "incomplete"),
])
def test_how_a_run_ends_is_derived_from_its_rows(rows, cancelled, interrupted, expected):
    rec = eager_run().finished(20.0, rows=rows, n_jobs=8, cancelled=cancelled,
                               interrupted=interrupted)
    assert rec.status == expected


def test_a_finished_run_cannot_go_back_to_running():
    done = eager_run().finished(20.0, rows=8, n_jobs=8)
    with pytest.raises(RunStateError, match="cannot start again"):
        done.started(30.0, HERE, enqueueing=False)
    with pytest.raises(RunStateError, match="cannot finish enqueueing"):
        done.jobs_sent(8)
    with pytest.raises(RunStateError, match="cannot stop enqueueing"):
        done.enqueue_interrupted()
    with pytest.raises(RunStateError, match="is complete: every job has a row"):
        done.resumed(30.0, HERE, jobs=0, producer_alive=None, run_id="r")


def test_an_interrupted_run_can_be_resumed_and_a_live_one_cannot():
    stopped = eager_run().finished(20.0, rows=3, n_jobs=8, interrupted=True)
    again = stopped.resumed(30.0, ProducerProcess(7, "host-b"), jobs=5, producer_alive=False,
                            run_id="r")
    assert (again.status, again.resumed_at, again.resumed_jobs, again.pid, again.host) == \
        ("running", 30.0, 5, 7, "host-b")
    assert again.started_at == 10.0  # the run's start stays
    with pytest.raises(RunStateError, match=r"run r is still running \(process 7\)"):
        again.resumed(40.0, HERE, jobs=5, producer_alive=True, run_id="r")
    # Its process killed (kill -9): the record still says running, and it resumes.
    assert again.resumed(40.0, HERE, jobs=5, producer_alive=False, run_id="r").pid == 4242
    # A complete run whose rows.jsonl lost rows since is resumed for those.
    lost = eager_run().finished(20.0, rows=8, n_jobs=8)
    assert lost.resumed(30.0, HERE, jobs=2, producer_alive=None, run_id="r").status == "running"


def test_a_retry_is_listed_and_a_cancel_keeps_its_first_time():
    rec = eager_run().finished(20.0, rows=8, n_jobs=8).retry_started(30.0, jobs=2)
    assert rec.retrying == 2
    entry = RetryEntry(started_at=30.0, finished_at=31.0, jobs=2, replaced=2, error_rows_after=0)
    rec = rec.finished(31.0, rows=8, n_jobs=8, retry=entry).finished(32.0, rows=8, n_jobs=8,
                                                                     retry=entry)
    assert (rec.retries, rec.retrying) == ((entry, entry), None)
    first = StatusRecord(status="running").cancel_recorded(5.0, cancels=1, purged_messages=2,
                                                           cancelled_jobs=3)
    second = first.cancel_recorded(6.0, cancels=2, purged_messages=4, cancelled_jobs=9)
    assert (second.cancelled_at, second.last_cancelled_at, second.purged_messages) == (5.0, 6.0, 4)
    assert second.status == "running"  # the follower records the end


def test_completed_with_errors_is_counted_into_the_record():
    rec = eager_run().finished(20.0, rows=30, n_jobs=30).rows_counted("complete", errored=2,
                                                                      rows=30)
    assert (rec.errored_rows, rec.error_rate) == (2, round(2 / 30, 6))
    assert rec.status == "complete" and rec.status_text == "completed with errors (2, 6.7 %)"


def test_the_file_keeps_its_field_names_and_a_bad_field_is_dropped_alone():
    rec = StatusRecord().started(10.0, HERE, enqueueing=True).jobs_sent(8).judged_by(0.05)
    assert rec.as_json() == {"status": "running", "started_at": 10.0, "pid": 4242,
                             "host": "host-a", "enqueued": 8, "max_error_rate": 0.05}
    assert StatusRecord.from_json(rec.as_json()) == rec
    read = StatusRecord.from_json({"status": "no such word", "pid": True, "rows": "many",
                                   "max_error_rate": 7, "started_at": 10.0, "other": 1})
    assert read == StatusRecord(started_at=10.0)
    assert StatusRecord.from_json(["not", "an", "object"]) == StatusRecord()
    # What a reader sets for a run Redis holds is never written.
    seen = rec.seen_in_redis("cancelled", rows=3)
    assert (seen.status, seen.source, seen.rows_in_redis) == ("cancelled", "redis", 3)
    assert "source" not in seen.as_json() and "rows_in_redis" not in seen.as_json()


def test_a_resume_adds_the_time_the_run_stood_still_to_its_pause():
    stopped = eager_run().finished(20.0, rows=3, n_jobs=8, interrupted=True)
    # Its newest row ended after the recorded end: the pause runs from the later of the two.
    again = stopped.resumed(100.0, HERE, jobs=5, producer_alive=False, run_id="r",
                            last_row_at=25.0)
    assert (again.paused_s, again.time_paused()) == (75.0, 75.0)
    later = again.finished(110.0, rows=3, n_jobs=8, interrupted=True)
    assert later.resend_started(130.0, last_row_at=None).paused_s == 95.0  # the two summed
    assert later.resend_started(130.0, last_row_at=None).status == "interrupted"  # state kept
    # A run that left no trace of when it stopped records no pause.
    assert StatusRecord(status="interrupted").resend_started(50.0, last_row_at=None).as_json() \
        == {"status": "interrupted"}
    assert StatusRecord().time_paused() == 0.0


def test_a_follower_with_no_worker_records_the_queues_it_waited_on():
    rec = StatusRecord().started(10.0, HERE, enqueueing=True).jobs_sent(8)
    stopped = rec.no_worker(["generate"], rows=0)
    assert (stopped.status, stopped.unconsumed_queues, stopped.rows) == \
        ("stopped: no worker", ("generate",), 0)
    assert stopped.as_json()["unconsumed_queues"] == ["generate"]
    assert StatusRecord.from_json(stopped.as_json()) == stopped
    assert "unconsumed_queues" not in rec.as_json()
