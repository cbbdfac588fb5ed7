"""A run directory's rows on disk: ``rows.jsonl`` streamed line by line (never loaded
whole), one row read back by its offset, a run found by its path, id or id prefix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from qfarm.common.errors import InputError
from qfarm.common.models import Manifest
from qfarm.common.reporting.runstats import RunStats
from qfarm.producer.rundir import (
    read_manifest,
)

MANIFEST = "manifest.json"
ROWS = "rows.jsonl"


class RowLine(NamedTuple):
    offset: int  # byte offset of the line in the file
    end: int  # byte offset just past it
    lineno: int  # counted from where reading started
    row: dict[str, Any] | None  # None: not a JSON object
    complete: bool  # ends in a newline (a live run may be writing the last one)


def iter_rows(rows_path: Path, start: int = 0) -> Iterator[RowLine]:
    """Every non-blank line of ``rows.jsonl`` from byte ``start``, parsed.

    The one parser of rows files: the summary, the comparison and the viewer's
    index all read through it. A missing file yields nothing.
    """
    try:
        fh = rows_path.open("rb")
    except FileNotFoundError:
        return
    with fh:
        fh.seek(start)
        offset = start
        for lineno, raw in enumerate(fh, start=1):
            at, offset = offset, offset + len(raw)
            if raw.strip():
                yield RowLine(at, offset, lineno, parse_row(raw), raw.endswith(b"\n"))


def parse_row(raw: bytes) -> dict[str, Any] | None:
    """One row's JSON (a rows.jsonl line or a Redis rows-hash value), None if unreadable."""
    try:
        row = json.loads(raw.decode("utf-8", errors="replace"))
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None


def read_row_at(rows_path: Path, offset: int) -> dict[str, Any] | None:
    """The row that starts at byte ``offset`` (from ``iter_rows``), or None if unreadable."""
    with rows_path.open("rb") as fh:
        fh.seek(offset)
        return parse_row(fh.readline())


def read_stats(rows_path: Path) -> RunStats:
    """Stream ``rows.jsonl`` into ``RunStats``; a missing file is a run with no rows yet.

    Unparseable lines (e.g. a half-written last line of a live run) are counted
    and named in the summary, not fatal.
    """
    stats = RunStats()
    for line in iter_rows(rows_path):
        if line.row is None:
            stats.note_unreadable(line.lineno)
        else:
            stats.add(line.row)
    return stats


def read_run(run_dir: Path) -> tuple[Manifest, RunStats]:
    return read_manifest(run_dir), read_stats(run_dir / ROWS)


def resolve_run(ref: str, results_dir: Path) -> Path:
    """A run directory from a path, a run id under ``results_dir``, or a unique id prefix."""
    path = Path(ref)
    if path.is_dir():
        if not (path / MANIFEST).exists():
            raise InputError(f"{path}: not a run directory (no {MANIFEST} in it)")
        return path
    if (results_dir / ref / MANIFEST).exists():
        return results_dir / ref
    runs = (
        sorted(
            (p for p in results_dir.glob("*") if (p / MANIFEST).exists()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        if results_dir.is_dir()
        else []
    )
    matches = [p for p in runs if p.name.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        names = ", ".join(p.name for p in matches[:5])
        raise InputError(f"run id prefix {ref!r} is ambiguous in {results_dir}: {names}")
    recent = ", ".join(p.name for p in runs[:5]) or "none yet"
    raise InputError(
        f"no run {ref!r}: not a directory and not a run id in {results_dir} "
        f"(recent runs: {recent}); give a run directory or set QFARM_RESULTS_DIR"
    )
