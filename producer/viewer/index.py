"""Per-run cache of the rows file: byte offsets of every row plus its filterable fields.

A 100k-row file is parsed once (through ``qfarm.producer.reports.rows.iter_rows``, the
same reader as ``qfarm report``); later requests filter the in-memory columns
(``RowColumns``: about 53 bytes a row, plus the kept answer's casefolded UTF-8
and each distinct value once) and read only the rows they show by seeking to
their offsets. A live run's file only grows, so a larger file is read from where
the last read stopped; a file that shrank or was replaced is read again from the start.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, overload

from qfarm.common.reporting.runstats import RunStats
from qfarm.common.vocab import Verdict
from qfarm.producer.reports.rows import ROWS, iter_rows, parse_row, read_row_at
from qfarm.producer.store import ProducerStore


@dataclass(frozen=True, slots=True)
class RowEntry:
    """What the rows table shows, sorts and filters on; the full row stays on disk."""

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
    total_ms: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    gold: bool | None  # the answer's claims hold a gold answer; None: the question has none

    @property
    def tokens(self) -> int | None:
        if self.prompt_tokens is None and self.completion_tokens is None:
            return None
        return (self.prompt_tokens or 0) + (self.completion_tokens or 0)

    @property
    def is_failure(self) -> bool:
        """What "failures only" keeps: an error, an UNGROUNDED verdict, or a missed gold answer."""
        return _fails(self.error, self.verdict, self.gold)


def _fails(error: str, verdict: str, gold: bool | None) -> bool:
    return bool(error) or not verdict or verdict == Verdict.UNGROUNDED or gold is False


class Shape(NamedTuple):
    """The few-valued fields of a row, held once per distinct combination: a run has
    hundreds of shapes, not a million, so a row holds one code for all of them."""

    mode: str
    verdict: str
    label: str
    kinds: tuple[str, ...]
    intensity: str
    endpoint: str
    error_kind: str
    gold: bool | None


# Query parameter -> how a row matches it. "error" matches "any" (has one) or a substring;
# "q" is a substring of the question or of the kept answer, both casefolded; "gold" is
# match, miss or none; "failures" (any non-empty value) keeps ``RowEntry.is_failure`` rows.
FILTERS = ("mode", "verdict", "label", "kind", "intensity", "endpoint", "error", "error_kind",
           "gold", "failures", "q", "qid")
GOLD_VALUES = {"match": True, "miss": False, "none": None}
# Filter -> whether a shape passes it.
_SHAPE_TESTS: dict[str, Callable[[Shape, str], bool]] = {
    "mode": lambda s, w: s.mode == w,
    "verdict": lambda s, w: not s.verdict if w == "none" else s.verdict == w,
    "label": lambda s, w: s.label == w,
    "kind": lambda s, w: w in s.kinds,
    "intensity": lambda s, w: s.intensity == w,
    "endpoint": lambda s, w: s.endpoint == w,
    "error_kind": lambda s, w: s.error_kind == w,
    "gold": lambda s, w: w in GOLD_VALUES and s.gold is GOLD_VALUES[w],
}
_NO_COUNT = -(2 ** 63)  # a token count the row does not have


def _fold(text: str) -> bytes:
    # UTF-8 is self-synchronising: a byte substring of two encoded texts is a text substring.
    # NUL ends each answer in ``RowColumns.answers``; one inside an answer (or a query) is
    # searched as U+FFFD, so no match runs from one row's answer into the next.
    return text.casefold().replace("\x00", "\ufffd").encode("utf-8", "surrogatepass")


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

    def passing(self, test: Callable[[Any], bool]) -> set[int]:
        return {c for c, v in enumerate(self.values) if test(v)}


class RowColumns(Sequence[RowEntry]):
    """The index's entries, column by column: per row a byte offset, a sample index, three
    codes (question, shape, error), the latency and two token counts (52 bytes), its kept
    answer casefolded and a NUL in one buffer, each distinct value held once.

    An object per row took 310 to 375 bytes, its question and answer in it; ``entries[i]``
    builds the row's ``RowEntry`` when a page shows it. Filters test each distinct value
    once and then compare codes; the text search is a ``bytes.find`` over the answers.
    """

    def __init__(self) -> None:
        self.offsets = array("q")
        self.samples = array("q")
        self.questions, self.shapes, self.errors = _Distinct(), _Distinct(), _Distinct()
        self.question_codes, self.shape_codes, self.error_codes = array("I"), array("I"), array("I")
        self.total_ms = array("d")  # NaN: none
        self.prompt_tokens, self.completion_tokens = array("q"), array("q")  # _NO_COUNT: none
        self.answers = bytearray()  # every row's kept answer, casefolded, then a NUL

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, i: int) -> RowEntry: ...
    @overload
    def __getitem__(self, i: slice) -> list[RowEntry]: ...
    def __getitem__(self, i: int | slice) -> RowEntry | list[RowEntry]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = range(len(self))[i]  # IndexError past the end, as iteration expects
        question_id, question = self.questions.values[self.question_codes[i]]
        s: Shape = self.shapes.values[self.shape_codes[i]]
        total, prompt, completion = self.total_ms[i], self.prompt_tokens[i], self.completion_tokens[i]
        return RowEntry(
            offset=self.offsets[i], question_id=question_id, question=question, mode=s.mode,
            sample_index=self.samples[i], verdict=s.verdict, label=s.label, kinds=s.kinds,
            intensity=s.intensity, endpoint=s.endpoint,
            error=self.errors.values[self.error_codes[i]], error_kind=s.error_kind,
            total_ms=None if math.isnan(total) else total,
            prompt_tokens=None if prompt == _NO_COUNT else prompt,
            completion_tokens=None if completion == _NO_COUNT else completion, gold=s.gold)

    def append(self, offset: int, row: dict[str, Any]) -> Shape:
        timings, usage = row.get("timings"), row.get("usage")
        timings = timings if isinstance(timings, dict) else {}
        usage = usage if isinstance(usage, dict) else {}
        gold, answer = row.get("gold_in_claims"), row.get("answer")
        shape = Shape(
            mode=str(row.get("mode") or ""), verdict=str(row.get("verdict") or ""),
            label=str(row.get("label") or ""),
            kinds=tuple(str(k) for k in row.get("violation_kinds") or ()),
            intensity=str(row.get("quantifier_intensity") or ""),
            endpoint=str(row.get("endpoint") or ""), error_kind=str(row.get("error_kind") or ""),
            gold=gold if isinstance(gold, bool) else None)
        self.samples.append(int(row.get("sample_index") or 0))
        self.question_codes.append(self.questions.code(
            (str(row.get("question_id") or ""), str(row.get("question") or ""))))
        self.shape_codes.append(self.shapes.code(shape))
        self.error_codes.append(self.errors.code(str(row.get("error") or "")))
        total: Any = timings.get("total_ms")
        self.total_ms.append(float(total) if _is_number(total) else math.nan)
        for column, name in ((self.prompt_tokens, "prompt_tokens"),
                             (self.completion_tokens, "completion_tokens")):
            value: Any = usage.get(name)
            column.append(int(value) if _is_count(value) else _NO_COUNT)
        # One ``+=`` a row keeps the buffer ending in a NUL, and the offset goes last: a
        # request reading while a live run's rows are added sees only whole rows.
        self.answers += (_fold(answer) if isinstance(answer, str) else b"") + b"\x00"
        self.offsets.append(offset)
        return shape

    def select(self, active: dict[str, str]) -> Sequence[int]:
        """Positions, in landing order, of the rows that pass every filter in ``active``
        (values non-empty, "q" casefolded)."""
        shape_tests = [(_SHAPE_TESTS[k], w) for k, w in active.items() if k in _SHAPE_TESTS]
        # Each test: a column of codes and the codes that pass; the fewest first.
        tests: list[tuple[array[int], set[int]]] = []
        if shape_tests:
            tests.append((self.shape_codes, self.shapes.passing(
                lambda s: all(test(s, w) for test, w in shape_tests))))
        if qid := active.get("qid"):  # one question, by its id (the per-question links)
            tests.append((self.question_codes, self.questions.passing(lambda v: v[0] == qid)))
        if want := active.get("error"):
            tests.append((self.error_codes, self.errors.passing(
                lambda v: bool(v) if want == "any" else want.lower() in v.lower())))
        picked: Sequence[int] = range(len(self))
        for codes, allowed in sorted(tests, key=lambda t: len(t[1])):
            picked = [i for i in picked if codes[i] in allowed]
        if active.get("failures"):
            failing = self.shapes.passing(lambda s: _fails("", s.verdict, s.gold))
            erred = self.errors.passing(bool)
            shapes, errors = self.shape_codes, self.error_codes
            picked = [i for i in picked if shapes[i] in failing or errors[i] in erred]
        if q := active.get("q"):
            asked = self.questions.passing(lambda v: q in v[1].casefold())
            in_answer = self._answers_holding(_fold(q))
            questions = self.question_codes
            picked = [i for i in picked if questions[i] in asked or i in in_answer]
        return picked

    def _answers_holding(self, want: bytes) -> set[int]:
        """Positions of the rows whose answer holds ``want`` (no NUL in it): a few C-speed
        ``find``/``count`` calls a hit, none per row."""
        text, hits, row, row_start = self.answers, set(), 0, 0
        at = text.find(want)
        while at >= 0:
            row += text.count(0, row_start, at)
            hits.add(row)
            row_start, row = text.index(0, at + len(want)) + 1, row + 1
            at = text.find(want, row_start)
        return hits


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and _NO_COUNT < value < 2 ** 63


def _by_shape(get: Callable[[Shape], Any]) -> Callable[[RowColumns], Callable[[int], Any]]:
    def key(cols: RowColumns) -> Callable[[int], Any]:
        keys, codes = [get(s) for s in cols.shapes.values], cols.shape_codes
        return lambda p: keys[codes[p]]
    return key


def _by_question(get: Callable[[tuple[str, str]], Any]) -> Callable[[RowColumns], Callable[[int], Any]]:
    def key(cols: RowColumns) -> Callable[[int], Any]:
        keys, codes = [get(v) for v in cols.questions.values], cols.question_codes
        return lambda p: keys[codes[p]]
    return key


def _error_key(cols: RowColumns) -> Callable[[int], Any]:
    values, codes = cols.errors.values, cols.error_codes
    return lambda p: values[codes[p]] or None


def _latency_key(cols: RowColumns) -> Callable[[int], Any]:
    total = cols.total_ms
    return lambda p: None if math.isnan(total[p]) else total[p]


def _tokens_key(cols: RowColumns) -> Callable[[int], Any]:
    prompt, completion = cols.prompt_tokens, cols.completion_tokens

    def tokens(p: int) -> int | None:
        a, b = prompt[p], completion[p]
        if a == _NO_COUNT and b == _NO_COUNT:
            return None
        return (0 if a == _NO_COUNT else a) + (0 if b == _NO_COUNT else b)
    return tokens


# Sort keys of the rows table: query value -> the column's value of a position, given the
# columns (None sorts last either way).
SORTS: dict[str, Callable[[RowColumns], Callable[[int], Any]]] = {
    "question_id": _by_question(lambda v: v[0]),
    "question": _by_question(lambda v: v[1].casefold()),
    "mode": _by_shape(lambda s: s.mode),
    "sample_index": lambda cols: cols.samples.__getitem__,
    "verdict": _by_shape(lambda s: s.verdict or None),
    "label": _by_shape(lambda s: s.label or None),
    "kinds": _by_shape(lambda s: " ".join(s.kinds) or None),
    "intensity": _by_shape(lambda s: s.intensity or None),
    "endpoint": _by_shape(lambda s: s.endpoint or None),
    "latency": _latency_key,
    "tokens": _tokens_key,
    "gold": _by_shape(lambda s: None if s.gold is None else int(s.gold)),
    "error": _error_key,
}


def sort_positions(entries: RowColumns, positions: Sequence[int], key: str,
                   descending: bool) -> Sequence[int]:
    """``positions`` ordered by the column ``key`` (landing order breaks ties, and is the
    order without a key); rows without a value come last in either direction."""
    make = SORTS.get(key)
    if make is None:
        return positions[::-1] if descending else positions
    get = make(entries)
    have = [p for p in positions if get(p) is not None]
    missing = [p for p in positions if get(p) is None]
    have.sort(key=get, reverse=descending)
    return have + missing


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
        return self.entries.select({k: v.casefold() if k == "q" else v for k, v in f.items() if v})

    def row(self, position: int) -> dict[str, Any] | None:
        return read_row_at(self.path, self.entries.offsets[position])

    def raw_rows(self, positions: Sequence[int]) -> Iterator[bytes]:
        """Each row at ``positions`` as its line of the file (no newline), one open file,
        one seek per row: an export of 100k rows never holds more than one."""
        if not positions:  # nothing to read, and a run without rows has no file yet
            return
        offsets = self.entries.offsets  # not ``entries[pos]``: that builds the whole entry
        with self.path.open("rb") as fh:
            for pos in positions:
                fh.seek(offsets[pos])
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
        raw = next(iter(self.raw_rows([position])), None)
        return parse_row(raw) if raw is not None else None

    def raw_rows(self, positions: Sequence[int], batch: int = 500) -> Iterator[bytes]:
        # An entry's offset is its position in the run's log, which names its job: the
        # index holds no job ids.
        assert self.store is not None
        offsets = self.entries.offsets
        for at in range(0, len(positions), batch):
            log_at = [offsets[p] for p in positions[at:at + batch]]
            ids = [i for i in self.store.log_ids_at(self.run_id, log_at) if i is not None]
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
