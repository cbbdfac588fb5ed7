"""Reading runs for the API: run directories, filtered and paged rows, comparisons."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse

from qfarm.common.errors import InputError
from qfarm.common.runstatus import run_state
from qfarm.common.settings import Settings
from qfarm.common.vocab import RunStatus, Verdict
from qfarm.producer.api import iter_rows, parse_row
from qfarm.producer.http.errors import ApiError
from qfarm.producer.http.requests import NDJSON, modes_of
from qfarm.producer.rundir import is_run_id
from qfarm.producer.store import ProducerStore


def check_run_id(run_id: str) -> None:
    # Run ids name directories: nothing that could leave the results directory, nothing
    # too long to be a file name (the file system would refuse it: a 500, not a 404).
    if not is_run_id(run_id):
        shown = run_id if len(run_id) <= 60 else run_id[:60] + "…"
        raise ApiError(404, f"run {shown!r}: not a run id (letters, digits, '.', '_', '-'; "
                            "GET /v1/runs lists runs)")


def run_dir_of(settings: Settings, run_id: str) -> Path:
    check_run_id(run_id)
    run_dir = settings.results_dir / run_id
    if not (run_dir / "manifest.json").exists():
        raise ApiError(404, f"run {run_id}: no run directory here (the server that followed "
                            "it has its files; GET /v1/runs lists runs)")
    return run_dir


def row_filter(mode: str | None, verdict: str | None,
                kind: str | None) -> Callable[[dict[str, Any]], bool]:
    if mode is not None:
        modes_of([mode], "mode")
    allowed_verdicts = (*(v.value for v in Verdict), "none")
    if verdict is not None and verdict not in allowed_verdicts:
        raise ApiError(422, f"verdict: {verdict!r}; choose from {', '.join(allowed_verdicts)} "
                            "(none: rows with an error)", "verdict")

    def match(row: dict[str, Any]) -> bool:
        if mode is not None and row.get("mode") != mode:
            return False
        if verdict is not None:
            got = "none" if row.get("error") or not row.get("verdict") else row.get("verdict")
            if got != verdict:
                return False
        return kind is None or kind in (row.get("violation_kinds") or ())

    return match


def compare_json(settings: Settings, a: str, b: str, floor: float) -> dict[str, Any]:
    from qfarm.common.reporting.compare import headline, render_compare
    from qfarm.producer.api import check_floor, compare_dirs

    try:
        check_floor(floor)
    except InputError as exc:
        raise ApiError(422, str(exc), "floor") from None
    cmp = compare_dirs(run_dir_of(settings, a), run_dir_of(settings, b), floor)
    return {
        "a": a, "b": b, "floor": floor,
        "headline": headline(cmp),
        "warnings": cmp.warnings,
        "deltas": [_jsonable(d) for d in cmp.deltas],
        # the quantifier phase decision, when the runs differ in phase switches only
        "phase": None if cmp.phase is None else {
            **_jsonable(cmp.phase), "switch": cmp.phase.switch,
            "decided_by": _jsonable(cmp.phase.decided_by),
        },
        "markdown": render_compare(cmp),
    }


def page_rows(path: Path, cursor: int, match: Callable[[dict[str, Any]], bool],
               limit: int) -> tuple[list[dict[str, Any]], int, bool]:
    """Up to ``limit`` matching rows from byte ``cursor``; (rows, next offset, reached the end)."""
    rows: list[dict[str, Any]] = []
    offset = cursor
    for line in iter_rows(path, cursor):
        if not line.complete:
            break  # the follower is writing it: the next page starts here
        offset = line.end
        if line.row is not None and match(line.row):
            rows.append(line.row)
            if len(rows) >= limit:
                return rows, offset, False
    return rows, offset, True


def stream_rows(path: Path, cursor: int, match: Callable[[dict[str, Any]], bool]) -> Iterator[bytes]:
    for line in iter_rows(path, cursor):
        if not line.complete:
            break
        if line.row is not None and match(line.row):
            yield (json.dumps(line.row, ensure_ascii=False) + "\n").encode()


def page_redis_rows(store: ProducerStore, run_id: str, start: int,
                    match: Callable[[dict[str, Any]], bool],
                    limit: int) -> tuple[list[dict[str, Any]], int, bool]:
    """Up to ``limit`` matching rows of a Redis-only run from row-log position ``start``;
    (rows, next position, reached the end of the log)."""
    rows: list[dict[str, Any]] = []
    pos = start
    for ids, _ in store.read_log(run_id, start, batch=max(limit, 200)):
        for raw in store.rows_for(run_id, ids):
            pos += 1
            row = parse_row(raw) if raw is not None else None
            if row is not None and match(row):
                rows.append(row)
                if len(rows) >= limit:
                    return rows, pos, False
    return rows, pos, True


def stream_redis_rows(store: ProducerStore, run_id: str, start: int,
                      match: Callable[[dict[str, Any]], bool]) -> Iterator[bytes]:
    for raw in store.read_rows(run_id, start):
        row = parse_row(raw)
        if row is not None and match(row):
            yield (json.dumps(row, ensure_ascii=False) + "\n").encode()


def redis_run_state(store: ProducerStore, run_id: str) -> str:
    """running, complete, cancelled or failed, for a run read from Redis."""
    manifest = store.manifest(run_id)
    total = manifest.n_jobs if manifest else 0
    prog = store.progress(run_id, total)
    return run_state(None, done=prog.done, total=total, cancelled=prog.cancelled,
                     error=prog.error)


def redis_rows_response(store: ProducerStore, run_id: str, start: int,
                        match: Callable[[dict[str, Any]], bool], limit: int,
                        *, stream: bool) -> Response:
    """A page (or the NDJSON stream) of a Redis-only run's rows; cursors are ``r<position>``."""
    if stream:
        return StreamingResponse(stream_redis_rows(store, run_id, start, match),
                                 media_type=NDJSON)
    rows, pos, eof = page_redis_rows(store, run_id, start, match, limit)
    done = eof and redis_run_state(store, run_id) != RunStatus.RUNNING
    return JSONResponse({"rows": rows, "next_cursor": None if done else f"r{pos}",
                         "source": "redis"})


def file_rows_response(run_dir: Path, cursor: str, match: Callable[[dict[str, Any]], bool],
                       limit: int, *, stream: bool, following: bool) -> Response:
    """A page (or the NDJSON stream) of ``rows.jsonl``; cursors are byte offsets."""
    if cursor.startswith("r"):
        raise ApiError(422, "cursor: an r-cursor pages a run read from Redis; this run is read "
                            "from its rows.jsonl, whose cursors are byte offsets", "cursor")
    rows_path = run_dir / "rows.jsonl"
    start = int(cursor)
    size = rows_path.stat().st_size if rows_path.exists() else 0
    if start > size:
        # Never a cursor this API gave out (the file only grows); past the largest file
        # the file system allows, seeking there would fail.
        raise ApiError(422, f"cursor: {start} is past the end of the run's rows.jsonl ({size} "
                            "bytes); pass 0 or a previous page's next_cursor", "cursor")
    if stream:
        return StreamingResponse(stream_rows(rows_path, start, match), media_type=NDJSON)
    rows, offset, eof = page_rows(rows_path, start, match, limit)
    finished = (run_dir / "summary.md").exists() and not following
    nxt = str(offset) if not eof or not finished else None
    return JSONResponse({"rows": rows, "next_cursor": nxt, "source": "file"})


def created_body(run_id: str, state: str, n_jobs: int) -> dict[str, Any]:
    return {"run_id": run_id, "state": state, "jobs": n_jobs, "url": f"/v1/runs/{run_id}"}


def _jsonable(obj: Any) -> Any:
    import dataclasses
    import enum

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:
        return None
    return obj
