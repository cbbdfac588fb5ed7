"""Per-run cache of the rows file: byte offsets of every row plus its filterable fields.

A 100k-row file is parsed once (through ``qfarm.producer.reports.iter_rows``, the
same reader as ``qfarm report``); later requests filter the in-memory columns
and read only the rows they show by seeking to their offsets. A live run's
file only grows, so a larger file is read from where the last read stopped;
a file that shrank or was replaced is read again from the start.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qfarm.common.reporting.runstats import RunStats
from qfarm.producer.reports import ROWS, iter_rows, parse_row, read_row_at
from qfarm.producer.store import ProducerStore


@dataclass(frozen=True, slots=True)
class RowEntry:
    """What the rows table shows and filters on; the full row stays on disk."""

    offset: int
    job_id: str
    question_id: str
    question: str
    mode: str
    sample_index: int
    verdict: str  # "" when the row has none (an error)
    label: str
    kinds: tuple[str, ...]
    intensity: str
    endpoint: str
    error: str
    error_kind: str


def _entry(offset: int, row: dict[str, Any]) -> RowEntry:
    return RowEntry(
        offset=offset,
        job_id=str(row.get("job_id") or ""),
        question_id=str(row.get("question_id") or ""),
        question=str(row.get("question") or ""),
        mode=str(row.get("mode") or ""),
        sample_index=int(row.get("sample_index") or 0),
        verdict=str(row.get("verdict") or ""),
        label=str(row.get("label") or ""),
        kinds=tuple(str(k) for k in row.get("violation_kinds") or ()),
        intensity=str(row.get("quantifier_intensity") or ""),
        endpoint=str(row.get("endpoint") or ""),
        error=str(row.get("error") or ""),
        error_kind=str(row.get("error_kind") or ""),
    )


# Query parameter -> how an entry matches it. "error" matches "any" (has one) or a substring.
FILTERS = ("mode", "verdict", "label", "kind", "intensity", "endpoint", "error", "error_kind", "q")


def matches(e: RowEntry, f: dict[str, str]) -> bool:
    for key, want in f.items():
        if not want:
            continue
        if key == "kind":
            ok = want in e.kinds
        elif key == "q":
            ok = want.lower() in e.question.lower()
        elif key == "error":
            ok = bool(e.error) if want == "any" else want.lower() in e.error.lower()
        elif key == "verdict" and want == "none":
            ok = not e.verdict
        elif key in FILTERS:
            ok = getattr(e, key) == want
        else:
            continue
        if not ok:
            return False
    return True


@dataclass
class RunRows:
    """Index and statistics of one run's rows, as far as they have been read.

    This reads a rows file; ``RedisRows`` reads the same rows from Redis. Both add
    each row through ``_add``, so both pages count alike.
    """

    path: Path
    entries: list[RowEntry] = field(default_factory=list)
    stats: RunStats = field(default_factory=RunStats)
    labels: dict[str, Counter[str]] = field(default_factory=dict)  # mode -> label -> rows
    intensities: dict[str, Counter[str]] = field(default_factory=dict)
    read_to: int = 0  # byte offset just past the last complete line read
    stamp: tuple[int, int] = (-1, -1)  # (mtime_ns, size) when last read
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self) -> RunRows:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            st = None
        stamp = (st.st_mtime_ns, st.st_size) if st else (0, 0)
        with self.lock:
            if stamp == self.stamp:
                return self
            if stamp[1] < self.read_to:
                self._reset()
            self._read_from(self.read_to)
            self.stamp = stamp
        return self

    def _reset(self) -> None:
        self.entries, self.stats = [], RunStats()
        self.labels, self.intensities, self.read_to = {}, {}, 0

    def _add(self, offset: int, row: dict[str, Any]) -> None:
        self.stats.add(row)
        e = _entry(offset, row)
        self.entries.append(e)
        self.labels.setdefault(e.mode, Counter())[e.label or "(none)"] += 1
        self.intensities.setdefault(e.mode, Counter())[e.intensity or "(none)"] += 1

    def _read_from(self, start: int) -> None:
        for line in iter_rows(self.path, start):
            if not line.complete and line.row is None:
                break  # a live run is still writing this line; read it next time
            self.read_to = line.end
            if line.row is None:
                self.stats.note_unreadable(line.lineno)
                continue
            self._add(line.offset, line.row)

    def select(self, f: dict[str, str]) -> list[int]:
        """Positions of the entries that match every filter in ``f``."""
        active = {k: v for k, v in f.items() if v}
        if not active:
            return list(range(len(self.entries)))
        return [i for i, e in enumerate(self.entries) if matches(e, active)]

    def row(self, position: int) -> dict[str, Any] | None:
        return read_row_at(self.path, self.entries[position].offset)


@dataclass
class RedisRows(RunRows):
    """The rows of a run that has them only in Redis (in progress, or followed elsewhere).

    Read in landing order from the run's log (``read_to`` is a log position), each
    row through ``parse_row``; an entry's offset is its log position. A log that
    shrank (Redis lost the run and it is being restored) is read again.
    """

    store: ProducerStore | None = None
    run_id: str = ""

    def refresh(self) -> RunRows:
        assert self.store is not None
        with self.lock:
            length, first = self.store.log_head(self.run_id)
            stamp = (length, hash(first))
            if stamp == self.stamp:
                return self
            if length < self.read_to or (self.stamp[1] != stamp[1] and self.read_to):
                self._reset()
            for ids, n in self.store.read_log(self.run_id, self.read_to):
                for pos, raw in enumerate(self.store.rows_for(self.run_id, ids), start=self.read_to):
                    row = parse_row(raw) if raw is not None else None
                    if row is None:
                        self.stats.note_unreadable(pos + 1)
                    else:
                        self._add(pos, row)
                self.read_to += n
            self.stamp = stamp
        return self

    def row(self, position: int) -> dict[str, Any] | None:
        assert self.store is not None
        raw = self.store.rows_for(self.run_id, [self.entries[position].job_id])[0]
        return parse_row(raw) if raw is not None else None


class RowsCache:
    """One ``RunRows`` per run directory (or Redis run), shared by all requests."""

    def __init__(self) -> None:
        self._runs: dict[Path | str, RunRows] = {}
        self._lock = threading.Lock()

    def get(self, run_dir: Path) -> RunRows:
        with self._lock:
            rr = self._runs.get(run_dir)
            if rr is None:
                rr = self._runs[run_dir] = RunRows(run_dir / ROWS)
        return rr.refresh()

    def get_redis(self, store: ProducerStore, run_id: str) -> RunRows:
        """The rows of ``run_id`` in Redis; raises what the store raises if Redis is down."""
        with self._lock:
            rr = self._runs.get(run_id)
            if not isinstance(rr, RedisRows) or rr.store is not store:
                rr = self._runs[run_id] = RedisRows(Path(run_id), store=store, run_id=run_id)
        return rr.refresh()
