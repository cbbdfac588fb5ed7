"""Streams rows from Redis to ``rows.jsonl`` as they land; each job id at most once.

The aggregator knows which job ids the file already holds (read once when it
starts, and again whenever another process has grown the file), and appends
only rows of other ids. So whatever Redis hands it twice (a log rebuilt after a
restart that lost it, rows restored from the file by ``--resume``, a second
follower that drained the same rows) the file never names a job twice, and
``written`` is the number of distinct job ids in it.

Its cursor into the run's row log lives in memory: a new aggregator scans the
log's ids from the start (ids only; a row is fetched only if the file lacks it).
Appends happen under an exclusive ``flock`` of the file, so two processes on one
host can never interleave lines; across hosts the follower lease
(``qfarm.producer.lease``) leaves one drainer per run.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from qfarm.producer.store import ProducerStore

_JOB_ID = re.compile(rb'"job_id"\s*:\s*"([^"\\]+)"')


def _line_job_id(line: bytes) -> str | None:
    match = _JOB_ID.search(line)
    if match:
        return match.group(1).decode()
    try:
        row = json.loads(line)
    except ValueError:
        return None
    job_id = row.get("job_id") if isinstance(row, dict) else None
    return job_id if isinstance(job_id, str) else None


def file_rows(path: Path) -> Iterator[tuple[str, bytes]]:
    """(job id, line) for each complete line of a rows file that names a job id."""
    if not path.exists():
        return
    with path.open("rb") as fh:
        for line in fh:
            if line.endswith(b"\n") and (job_id := _line_job_id(line)) is not None:
                yield job_id, line


def cut_partial_line(path: Path) -> int:
    """Truncate a partial (unterminated) last line, left by a crash mid-write; returns the size."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("r+b") as fh:
        pos = size
        while pos > 0:
            step = min(1 << 16, pos)
            fh.seek(pos - step)
            chunk = fh.read(step)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                end = pos - step + nl + 1
                break
            pos -= step
        else:
            end = 0
        if end != size:
            fh.truncate(end)
    return end


class Aggregator:
    def __init__(self, store: ProducerStore, run_id: str, rows_path: Path):
        self.store = store
        self.run_id = run_id
        self.rows_path = rows_path
        self.cursor = 0  # position in the run's row log
        self.seen: set[str] = set()
        self.duplicates_in_file = 0  # lines naming an id seen before (files from older versions)
        self._size = -1
        self._head: bytes | None = None  # the log's first job id when last read
        self._sync_with_file()

    @property
    def written(self) -> int:
        """Distinct job ids in rows.jsonl."""
        return len(self.seen)

    def _sync_with_file(self) -> None:
        """Re-read the file's job ids if it is not as this process left it."""
        size = cut_partial_line(self.rows_path)
        if size == self._size:
            return
        seen: set[str] = set()
        dupes = 0
        for job_id, _ in file_rows(self.rows_path):
            dupes += job_id in seen
            seen.add(job_id)
        self.seen, self.duplicates_in_file, self._size = seen, dupes, size

    def drain(self) -> int:
        """Append every row that landed since the last call and is not in the file yet;
        returns how many lines were appended."""
        length, head = self.store.log_head(self.run_id)
        if head != self._head or length < self.cursor:
            self.cursor = 0  # the log was lost and is being rebuilt (Redis restart)
            self._head = head
        if length <= self.cursor:
            return 0
        n = 0
        with self.rows_path.open("ab") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                self._sync_with_file()
                for ids, read in self.store.read_log(self.run_id, self.cursor):
                    new = [j for j in dict.fromkeys(ids) if j not in self.seen]
                    for job_id, raw in zip(new, self.store.rows_for(self.run_id, new), strict=True):
                        if raw is None:
                            continue
                        fh.write(raw.rstrip(b"\n") + b"\n")
                        self.seen.add(job_id)
                        n += 1
                    self.cursor += read
                fh.flush()
                os.fsync(fh.fileno())
                self._size = fh.tell()
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        return n

    def rescan(self) -> int:
        """Drain the whole log again from its start (after Redis lost and rebuilt it)."""
        self.cursor = 0
        return self.drain()

    def restore_to_redis(self) -> int:
        """Write back into Redis the file's rows that Redis lost (a restart without
        persistence); returns how many. The write is set-if-absent, as every row write."""
        self._sync_with_file()
        return self.store.restore_rows(self.run_id, file_rows(self.rows_path))
