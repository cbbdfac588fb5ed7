"""Rows as JSON, and what becomes of one that cannot be serialised.

A Python str can hold what no UTF-8 encoder accepts (a lone surrogate such as
``"\\ud800"``, from a question that got past loading), and pydantic then refuses to
serialise the whole row. Each row is therefore serialised on its own before a bundle's
write (``qfarm.worker.flow.write_rows``): one that cannot be becomes its own job's error row,
its text made valid, and its bundle-mates' rows go as they are.
"""

from __future__ import annotations

import logging

from pydantic_core import PydanticSerializationError

from qfarm.common.models import Row
from qfarm.common.text import replace_lone_surrogates, replace_lone_surrogates_in
from qfarm.common.vocab import ErrorKind, error_text

log = logging.getLogger("qfarm.worker")

CANNOT_SERIALISE = error_text(ErrorKind.INTERNAL, "this job cannot be serialised")


def unserialisable_error(exc: Exception) -> str:
    """The error of a job whose record or row cannot be serialised."""
    return (f"{CANNOT_SERIALISE} ({replace_lone_surrogates(str(exc))}); its row is stored with "
            "each lone surrogate, which UTF-8 cannot encode, replaced by U+FFFD")


def storable(row: Row) -> tuple[Row, str]:
    """``row`` and its JSON. A row that cannot be serialised (a lone surrogate in its
    question, say, that got past loading) becomes its own job's error row with its text
    made valid: it fails that job alone, and the job still gets its one row."""
    try:
        return row, row.model_dump_json()
    except PydanticSerializationError as exc:
        # One line per failed job: a job that failed for this reason already said so.
        said = bool(row.error and row.error.startswith(CANNOT_SERIALISE))
        log.log(logging.DEBUG if said else logging.WARNING,
                "job %s: its row cannot be serialised (%s); writing it as an error row",
                row.job_id, replace_lone_surrogates(str(exc)))
        fixed = _valid_error_row(row, exc)
        return fixed, fixed.model_dump_json()


def _valid_error_row(row: Row, exc: Exception) -> Row:
    error = row.error if row.error and row.error.startswith(CANNOT_SERIALISE) else None
    if error is None:
        error = "; ".join(e for e in (row.error, unserialisable_error(exc)) if e)
    # A job that had failed already keeps that failure's kind (its error comes first).
    kind = (row.error_kind if row.error else None) or ErrorKind.INTERNAL
    try:
        clean = Row.model_validate(replace_lone_surrogates_in(row.model_dump(mode="json")))
        # A failed job is not graded, whatever its verifier found.
        clean = clean.model_copy(update={"grading": None, "gold": None, "error": error,
                                         "error_kind": kind})
        clean.model_dump_json()  # what else might not serialise: the bare row below then
        return clean
    except (ValueError, TypeError):
        return Row(
            run_id=row.run_id, job_id=row.job_id, question=replace_lone_surrogates(row.question),
            question_id=replace_lone_surrogates(row.question_id), mode=row.mode,
            sample_index=row.sample_index, error=replace_lone_surrogates_in(error), error_kind=kind,
            worker=row.worker, started_at=row.started_at, finished_at=row.finished_at,
        )
