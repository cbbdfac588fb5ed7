"""A run's shown status comes from its rows and its producer's process, not status.json."""

from __future__ import annotations

import pytest

from qfarm.common.runstatus import run_status


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
