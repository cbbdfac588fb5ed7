"""Run ids and run directories: ``<results>/<run_id>/{manifest.json,status.json,rows.jsonl,
summary.md}``. This module alone reads and writes ``status.json``, as the typed record
``qfarm.common.runstatus.StatusRecord`` (its methods are the changes a run goes through)."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import secrets
import socket
import time
from pathlib import Path, PurePath

from pydantic import ValidationError

from qfarm.common import logs
from qfarm.common.errors import InputError, ServiceError, first_validation_error
from qfarm.common.jobs import ASK_RUN_PREFIX as ASK_RUN_PREFIX  # run ids are this module's subject
from qfarm.common.jobs import is_ask_run
from qfarm.common.logs import job_fields
from qfarm.common.models import Manifest
from qfarm.common.runstatus import ProducerProcess, StatusRecord

log = logging.getLogger(__name__)

# What a run id may be: a directory name under the results directory (nothing that could
# leave it), short enough for every file system (255 bytes is the usual name limit).
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


def is_run_id(text: str) -> bool:
    return RUN_ID.fullmatch(text) is not None


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


RUN_KINDS = ("sweep", "ask")


def run_kind(run_id: str) -> str:
    """``ask`` for a single question's run, else ``sweep``."""
    return RUN_KINDS[1] if is_ask_run(run_id) else RUN_KINDS[0]


# Question sets posted to the HTTP API live under the data directory as
# uploads/<digest>/<name>.jsonl: content-addressed, under the name they were posted with.
UPLOADS_DIR = "uploads"


def question_set_name(question_file: str) -> str:
    """What a list calls a run's question file: the file's name, or for a set posted to the
    HTTP API the name it was posted under (not its digest)."""
    path = PurePath(question_file)
    if path.parent.parent.name == UPLOADS_DIR:
        return path.stem
    return path.name or question_file


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file behind
        raise
    os.replace(tmp, path)


def create_run_dir(results_dir: Path, manifest: Manifest) -> Path:
    """Create the run directory with its manifest; called only after all input is valid."""
    run_dir = results_dir / manifest.run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    write_json_atomic(run_dir / "manifest.json", manifest.model_dump(mode="json"))
    if logs.role() == "cli":  # the command runs this one run: every later line names it
        logs.set_process_fields(run_id=manifest.run_id)
    # A sweep's start, on the log (its end: ``run_sweep``).
    log.info("run %s started: %d questions × %d modes × n=%d = %d jobs, %s, in %s",
             manifest.run_id, manifest.n_questions, len(manifest.modes), manifest.n,
             manifest.n_jobs, "eager" if manifest.eager else "distributed", run_dir,
             extra=job_fields(run_id=manifest.run_id))
    return run_dir


def read_manifest(run_dir: Path) -> Manifest:
    path = run_dir / "manifest.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no manifest; is {run_dir} a qfarm run directory?") from None
    try:
        return Manifest.model_validate_json(text)
    except ValidationError as exc:
        where, msg = first_validation_error(exc, "manifest")
        raise InputError(
            f"{path}: invalid manifest at {where}: {msg}; re-run the sweep or fix the file"
        ) from exc


STATUS = "status.json"


def this_process() -> ProducerProcess:
    """The process running a run, as ``status.json`` records it so a reader can tell when
    that process is gone (``producer_alive``)."""
    return ProducerProcess(os.getpid(), socket.gethostname())


def producer_alive(status: StatusRecord) -> bool | None:
    """Whether the process ``status.json`` names still runs; None when it cannot be told
    (no process recorded, or it ran on another host)."""
    pid, host = status.pid, status.host
    if pid is None or host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process by that pid: alive
    return True


def read_status(run_dir: Path) -> StatusRecord:
    """``status.json`` beside the manifest; an empty record if absent or unreadable."""
    try:
        data = json.loads((run_dir / STATUS).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return StatusRecord()
    return StatusRecord.from_json(data)


def write_status(run_dir: Path, status: StatusRecord) -> None:
    """Write the run's record, changed by one of ``StatusRecord``'s transitions (the
    manifest beside it is written once, at the start, and again only to add the run's
    record and cost at its end)."""
    write_json_atomic(run_dir / STATUS, status.as_json())


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def stopped_by_full_disk(run_dir: Path, run_id: str, exc: OSError, rows: int) -> ServiceError:
    """The run marked interrupted (if status.json still fits: it is small) and the one-line
    error to raise: what was written is kept, and ``--resume`` finishes the run."""
    with contextlib.suppress(OSError):
        write_status(run_dir, read_status(run_dir).interrupted(
            rows=rows, error=f"no space left on device ({exc.strerror})"))
    return ServiceError(
        f"no space left on the device holding {run_dir} ({exc.strerror}): run {run_id} stopped "
        f"as interrupted with its {rows} rows so far kept; free some space, then "
        f"`qfarm sweep --resume {run_id}`"
    )
