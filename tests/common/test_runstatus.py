"""A run's shown status comes from its rows and its producer's process, not status.json."""

from __future__ import annotations

import pytest

from common.runstatus import run_status


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
