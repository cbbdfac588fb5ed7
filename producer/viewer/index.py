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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qfarm.common.reporting.runstats import RunStats
from qfarm.producer.reports import ROWS, iter_rows, parse_row, read_row_at
from qfarm.producer.store import ProducerStore


@dataclass(frozen=True, slots=True)
class RowEntry:
    """What the rows table shows, sorts and filters on; the full row stays on disk."""

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
    total_ms: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    gold: bool | None  # the answer's claims hold a gold answer; None: the question has none
    # The question and the kept answer, casefolded, joined by a NUL, for the text search:
    # the one long field the index holds, so a search needs no pass over the file.
    folded: str

    @property
    def tokens(self) -> int | None:
        if self.prompt_tokens is None and self.completion_tokens is None:
            return None
        return (self.prompt_tokens or 0) + (self.completion_tokens or 0)

    @property
    def is_failure(self) -> bool:
        """What "failures only" keeps: an error, an UNGROUNDED verdict, or a missed gold answer."""
        return bool(self.error) or not self.verdict or self.verdict == "UNGROUNDED" \
            or self.gold is False


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _entry(offset: int, row: dict[str, Any]) -> RowEntry:
    timings, usage = row.get("timings"), row.get("usage")
    timings = timings if isinstance(timings, dict) else {}
    usage = usage if isinstance(usage, dict) else {}
    gold = row.get("gold_in_claims")
    answer = row.get("answer")
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
        total_ms=_number(timings.get("total_ms")),
        prompt_tokens=_count(usage.get("prompt_tokens")),
        completion_tokens=_count(usage.get("completion_tokens")),
        gold=gold if isinstance(gold, bool) else None,
        folded=str(row.get("question") or "").casefold() + "\x00"
        + (answer.casefold() if isinstance(answer, str) else ""),
    )


# Query parameter -> how an entry matches it. "error" matches "any" (has one) or a substring;
# "q" is a substring of the question or the kept answer; "gold" is match, miss or none;
# "failures" (any non-empty value) keeps ``RowEntry.is_failure`` rows.
FILTERS = ("mode", "verdict", "label", "kind", "intensity", "endpoint", "error", "error_kind",
           "gold", "failures", "q")
GOLD_VALUES = {"match": True, "miss": False, "none": None}


def matches(e: RowEntry, f: dict[str, str]) -> bool:
    """Whether ``e`` passes every filter of ``f`` (as ``RunRows.select`` gives it: "q" casefolded)."""
    for key, want in f.items():
        if not want:
            continue
        if key == "kind":
            ok = want in e.kinds
        elif key == "q":
            ok = want in e.folded  # ``select`` casefolds the query once
        elif key == "error":
            ok = bool(e.error) if want == "any" else want.lower() in e.error.lower()
        elif key == "verdict" and want == "none":
            ok = not e.verdict
        elif key == "gold":
            ok = want in GOLD_VALUES and e.gold is GOLD_VALUES[want]
        elif key == "failures":
            ok = e.is_failure
        elif key in FILTERS:
            ok = getattr(e, key) == want
        else:
            continue
        if not ok:
            return False
    return True


# Sort keys of the rows table: query value -> the entry's value (None sorts last either way).
SORTS: dict[str, Callable[[RowEntry], Any]] = {
    "question_id": lambda e: e.question_id,
    "question": lambda e: e.question.casefold(),
    "mode": lambda e: e.mode,
    "sample_index": lambda e: e.sample_index,
    "verdict": lambda e: e.verdict or None,
    "label": lambda e: e.label or None,
    "kinds": lambda e: " ".join(e.kinds) or None,
    "intensity": lambda e: e.intensity or None,
    "endpoint": lambda e: e.endpoint or None,
    "latency": lambda e: e.total_ms,
    "tokens": lambda e: e.tokens,
    "gold": lambda e: None if e.gold is None else int(e.gold),
    "error": lambda e: e.error or None,
}


def sort_positions(entries: list[RowEntry], positions: list[int], key: str,
                   descending: bool) -> list[int]:
    """``positions`` ordered by the column ``key`` (landing order breaks ties, and is the
    order without a key); rows without a value come last in either direction."""
    get = SORTS.get(key)
    if get is None:
        return positions[::-1] if descending else positions
    have = [p for p in positions if get(entries[p]) is not None]
    missing = [p for p in positions if get(entries[p]) is None]
    have.sort(key=lambda p: get(entries[p]), reverse=descending)
    return have + missing


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
        active = {k: v.casefold() if k == "q" else v for k, v in f.items() if v}
        if not active:
            return list(range(len(self.entries)))
        return [i for i, e in enumerate(self.entries) if matches(e, active)]

    def row(self, position: int) -> dict[str, Any] | None:
        return read_row_at(self.path, self.entries[position].offset)

    def raw_rows(self, positions: list[int]) -> Iterator[bytes]:
        """Each row at ``positions`` as its line of the file (no newline), one open file,
        one seek per row: an export of 100k rows never holds more than one."""
        if not positions:  # nothing to read, and a run without rows has no file yet
            return
        with self.path.open("rb") as fh:
            for pos in positions:
                fh.seek(self.entries[pos].offset)
                yield fh.readline().rstrip(b"\r\n")


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

    def raw_rows(self, positions: list[int], batch: int = 500) -> Iterator[bytes]:
        assert self.store is not None
        for at in range(0, len(positions), batch):
            ids = [self.entries[p].job_id for p in positions[at:at + batch]]
            for raw in self.store.rows_for(self.run_id, ids):
                if raw is not None:
                    yield raw.rstrip(b"\r\n")


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
