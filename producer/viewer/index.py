"""Per-run cache of the rows file: byte offsets of every row plus its filterable fields.

A 100k-row file is parsed once (through ``producer.reports.iter_rows``, the
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

from common.runstats import RunStats
from producer.reports import ROWS, iter_rows, read_row_at


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
    )


# Query parameter -> how an entry matches it. "error" matches "any" (has one) or a substring.
FILTERS = ("mode", "verdict", "label", "kind", "intensity", "endpoint", "error", "q")


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
    """Index and statistics of one rows file, as far as it has been read."""

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

    def _read_from(self, start: int) -> None:
        for line in iter_rows(self.path, start):
            if not line.complete and line.row is None:
                break  # a live run is still writing this line; read it next time
            self.read_to = line.end
            if line.row is None:
                self.stats.note_unreadable(line.lineno)
                continue
            self.stats.add(line.row)
            e = _entry(line.offset, line.row)
            self.entries.append(e)
            self.labels.setdefault(e.mode, Counter())[e.label or "(none)"] += 1
            self.intensities.setdefault(e.mode, Counter())[e.intensity or "(none)"] += 1

    def select(self, f: dict[str, str]) -> list[int]:
        """Positions of the entries that match every filter in ``f``."""
        active = {k: v for k, v in f.items() if v}
        if not active:
            return list(range(len(self.entries)))
        return [i for i, e in enumerate(self.entries) if matches(e, active)]

    def row(self, position: int) -> dict[str, Any] | None:
        return read_row_at(self.path, self.entries[position].offset)


class RowsCache:
    """One ``RunRows`` per run directory, shared by all requests."""

    def __init__(self) -> None:
        self._runs: dict[Path, RunRows] = {}
        self._lock = threading.Lock()

    def get(self, run_dir: Path) -> RunRows:
        with self._lock:
            rr = self._runs.get(run_dir)
            if rr is None:
                rr = self._runs[run_dir] = RunRows(run_dir / ROWS)
        return rr.refresh()
