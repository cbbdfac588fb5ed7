"""Streams rows from Redis to ``rows.jsonl`` as they land; each job id at most once.

The aggregator knows which job ids the file already holds (read once when it
starts, and again whenever another process has grown the file), and appends
only rows of other ids. So whatever Redis hands it twice (a log rebuilt after a
restart that lost it, rows restored from the file by ``--resume``, a second
follower that drained the same rows) the file never names a job twice, and
``written`` is the number of distinct job ids in it.

The ids it knows are 8-byte fingerprints in a sorted array (``JobIdSet``): 8 bytes a
row, 8 MB for a million-row run, where a set of id strings took about 100 bytes a row.

Its cursor into the run's row log lives in memory: a new aggregator scans the
log's ids from the start (ids only; a row is fetched only if the file lacks it).
Appends happen under an exclusive ``flock`` of the file, so two processes on one
host can never interleave lines; across hosts the follower lease
(``qfarm.producer.runs.lease``) leaves one drainer per run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

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


def fingerprint(job_id: str) -> int:
    """63 bits of a job id's digest (a NumPy int64 holds them as they are): two of a million
    ids share one with odds of 5 in 10^8."""
    digest = hashlib.blake2b(job_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class JobIdSet:
    """Job ids seen, as fingerprints: a sorted array of 8-byte integers and a small set of
    the latest ones, merged into the array once it holds ``MERGE_AT``. NumPy is imported
    then (so the command line and small runs never load it), and a merge inserts the new
    fingerprints into a copy of the array: 16 bytes a job at that moment, 8 after."""

    MERGE_AT = 1 << 15

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._sorted: Any = None  # a NumPy int64 array once merged
        self._recent: set[int] = set()
        for job_id in ids:
            self.add(job_id)

    def __len__(self) -> int:
        return (0 if self._sorted is None else len(self._sorted)) + len(self._recent)

    def __contains__(self, job_id: object) -> bool:
        return isinstance(job_id, str) and self._has(fingerprint(job_id))

    def _has(self, fp: int) -> bool:
        if fp in self._recent:
            return True
        known = self._sorted
        if known is None:
            return False
        at = int(known.searchsorted(fp))
        return at < len(known) and int(known[at]) == fp

    def add(self, job_id: str) -> bool:
        """Add ``job_id``; False if it was there already."""
        fp = fingerprint(job_id)
        if self._has(fp):
            return False
        self._recent.add(fp)
        if len(self._recent) >= self.MERGE_AT:
            self._merge()
        return True

    def _merge(self) -> None:
        import numpy as np  # a dependency of matplotlib's

        fresh = np.fromiter(self._recent, dtype=np.int64, count=len(self._recent))
        fresh.sort()
        if self._sorted is None:
            self._sorted = fresh
        else:  # none of them is in the array (``add`` checked): one copy, no union
            self._sorted = np.insert(self._sorted, self._sorted.searchsorted(fresh), fresh)
        self._recent = set()


class Aggregator:
    """``accept``: which (job id, row) to take; a row it refuses is not marked seen, so a later
    row of the same id (a retry's replacement) is still taken. Default: every row."""

    def __init__(self, store: ProducerStore, run_id: str, rows_path: Path,
                 accept: Callable[[str, bytes], bool] | None = None, *,
                 forget_drained: bool = False):
        self.store = store
        # An eager run's store is this process's memory: rows leave it once in the file.
        self.forget_drained = forget_drained
        self.run_id = run_id
        self.rows_path = rows_path
        self.accept = accept
        self.cursor = 0  # position in the run's row log
        self.seen = JobIdSet()
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
        seen = JobIdSet()
        dupes = 0
        for job_id, _ in file_rows(self.rows_path):
            dupes += not seen.add(job_id)
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
                    appended: list[str] = []
                    for job_id, raw in zip(new, self.store.rows_for(self.run_id, new), strict=True):
                        if not raw or (self.accept and not self.accept(job_id, raw)):
                            # None: no row; empty: forgotten, already in the file
                            continue
                        fh.write(raw.rstrip(b"\n") + b"\n")
                        self.seen.add(job_id)
                        appended.append(job_id)
                    n += len(appended)
                    if self.forget_drained:
                        fh.flush()
                        self.store.forget_rows(self.run_id, appended)
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
