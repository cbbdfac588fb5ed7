"""Per-run cache of the rows file: byte offsets of every row plus its filterable fields.

A 100k-row file is parsed once (through ``qfarm.producer.reports.iter_rows``, the
same reader as ``qfarm report``); later requests filter the in-memory columns
(``RowColumns``: 52 bytes a row plus each distinct value once) and read only the
rows they show by seeking to their offsets. A live run's
file only grows, so a larger file is read from where the last read stopped;
a file that shrank or was replaced is read again from the start.
"""

from __future__ import annotations

import threading
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from qfarm.common.reporting.runstats import RunStats
from qfarm.producer.reports import ROWS, iter_rows, parse_row, read_row_at
from qfarm.producer.store import ProducerStore


@dataclass(frozen=True, slots=True)
class RowEntry:
    """What the rows table shows and filters on; the full row stays on disk."""

    offset: int
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


# Query parameter -> how an entry matches it. "error" matches "any" (has one) or a substring.
FILTERS = ("mode", "verdict", "label", "kind", "intensity", "endpoint", "error", "error_kind", "q")


class _Distinct:
    """The distinct values of one column, each held once; a row holds its value's code."""

    __slots__ = ("codes", "values")

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.codes: dict[Any, int] = {}

    def code(self, value: Any) -> int:
        found = self.codes.get(value)
        if found is None:
            found = self.codes[value] = len(self.values)
            self.values.append(value)
        return found


# Columns held as a code per row; the question column's values are (question id, text).
_COLUMNS = ("question", "mode", "verdict", "label", "kinds", "intensity", "endpoint", "error",
            "error_kind")
# Filter -> (column, whether a value of that column passes).
_TESTS: dict[str, tuple[str, Callable[[Any, str], bool]]] = {
    "mode": ("mode", lambda v, w: v == w),
    "verdict": ("verdict", lambda v, w: not v if w == "none" else v == w),
    "label": ("label", lambda v, w: v == w),
    "kind": ("kinds", lambda v, w: w in v),
    "intensity": ("intensity", lambda v, w: v == w),
    "endpoint": ("endpoint", lambda v, w: v == w),
    "error": ("error", lambda v, w: bool(v) if w == "any" else w.lower() in v.lower()),
    "error_kind": ("error_kind", lambda v, w: v == w),
    "q": ("question", lambda v, w: w.lower() in v[1].lower()),
}


class RowColumns(Sequence[RowEntry]):
    """The index's entries, column by column: per row a byte offset, a sample index and
    one code per column (52 bytes), each distinct value held once.

    A million rows index in about 52 MB plus their distinct values (questions, error
    texts), where an object per row took about 700 bytes; ``entries[i]`` builds the row's
    ``RowEntry`` when a page shows it.
    """

    def __init__(self) -> None:
        self.offsets = array("q")
        self.samples = array("q")
        self.distinct = {name: _Distinct() for name in _COLUMNS}
        self.codes = {name: array("I") for name in _COLUMNS}

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, i: int) -> RowEntry: ...
    @overload
    def __getitem__(self, i: slice) -> list[RowEntry]: ...
    def __getitem__(self, i: int | slice) -> RowEntry | list[RowEntry]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        value = {name: self.distinct[name].values[self.codes[name][i]] for name in _COLUMNS}
        question_id, question = value.pop("question")
        return RowEntry(offset=self.offsets[i], question_id=question_id, question=question,
                        sample_index=self.samples[i], **value)

    def append(self, offset: int, row: dict[str, Any]) -> RowEntry:
        e = _entry(offset, row)
        self.offsets.append(offset)
        self.samples.append(e.sample_index)
        for name in _COLUMNS:
            value = (e.question_id, e.question) if name == "question" else getattr(e, name)
            self.codes[name].append(self.distinct[name].code(value))
        return e

    def select(self, active: dict[str, str]) -> Sequence[int]:
        """Positions of the rows that pass every filter in ``active`` (values non-empty)."""
        tests = []
        for key, want in active.items():
            if key not in _TESTS:
                continue
            column, test = _TESTS[key]
            allowed = {c for c, v in enumerate(self.distinct[column].values) if test(v, want)}
            tests.append((self.codes[column], allowed))
        if not tests:
            return range(len(self))
        # The column with the fewest allowed codes first: it leaves the fewest to check.
        tests.sort(key=lambda t: len(t[1]))
        codes, allowed = tests[0]
        if not allowed:
            return array("I")
        picked = array("I", (i for i, c in enumerate(codes) if c in allowed))
        for codes, allowed in tests[1:]:
            picked = array("I", (i for i in picked if codes[i] in allowed))
        return picked


def _entry(offset: int, row: dict[str, Any]) -> RowEntry:
    return RowEntry(
        offset=offset,
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


@dataclass
class RunRows:
    """Index and statistics of one run's rows, as far as they have been read.

    This reads a rows file; ``RedisRows`` reads the same rows from Redis. Both add
    each row through ``_add``, so both pages count alike.
    """

    path: Path
    entries: RowColumns = field(default_factory=RowColumns)
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
        self.entries, self.stats = RowColumns(), RunStats()
        self.labels, self.intensities, self.read_to = {}, {}, 0

    def _add(self, offset: int, row: dict[str, Any]) -> None:
        self.stats.add(row)
        e = self.entries.append(offset, row)
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

    def select(self, f: dict[str, str]) -> Sequence[int]:
        """Positions of the entries that match every filter in ``f``."""
        return self.entries.select({k: v for k, v in f.items() if v})

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
        # An entry's offset is its position in the run's log, which names its job.
        ids = next(iter(self.store.read_log(self.run_id, self.entries[position].offset, 1)),
                   ([], 0))[0]
        raw = self.store.rows_for(self.run_id, ids[:1])[0] if ids else None
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
