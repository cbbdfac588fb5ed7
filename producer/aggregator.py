"""Streams rows from Redis to ``rows.jsonl`` as they land; memory stays flat.

The file's line count is the cursor into the run's row log, so a detached or
crashed aggregator resumes exactly where it stopped (a partial last line is
cut off first).
"""

from __future__ import annotations

import os
from pathlib import Path

from producer.store import ProducerStore


def count_complete_lines(path: Path) -> int:
    """Lines in the file, truncating a partial (unterminated) last line."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    count = 0
    last_newline = -1
    with path.open("rb") as fh:
        offset = 0
        while chunk := fh.read(1 << 20):
            count += chunk.count(b"\n")
            pos = chunk.rfind(b"\n")
            if pos >= 0:
                last_newline = offset + pos
            offset += len(chunk)
    if last_newline != size - 1:
        with path.open("r+b") as fh:
            fh.truncate(last_newline + 1)
    return count


class Aggregator:
    def __init__(self, store: ProducerStore, run_id: str, rows_path: Path):
        self.store = store
        self.run_id = run_id
        self.rows_path = rows_path
        self.written = count_complete_lines(rows_path)

    def drain(self) -> int:
        """Append every row that landed since the last call; returns how many."""
        if self.store.log_length(self.run_id) <= self.written:
            return 0
        n = 0
        with self.rows_path.open("ab") as fh:
            for raw in self.store.read_rows(self.run_id, self.written):
                fh.write(raw.rstrip(b"\n") + b"\n")
                n += 1
            fh.flush()
            os.fsync(fh.fileno())
        self.written += n
        return n
