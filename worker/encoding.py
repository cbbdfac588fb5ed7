"""What a job's data becomes on the wire: a bundle's records between stages, and rows.

A bundle of records travels from one stage to the next as one JSON string
(``dump_records``, read back by ``parse_records``; ``payload_items`` gives its items one
by one when a record in it is unusable).

A Python str can hold what no UTF-8 encoder accepts (a lone surrogate such as
``"\\ud800"``, from a question that got past loading), and pydantic then refuses to
serialise the whole row. Each row is therefore serialised on its own before a bundle's
write (``qfarm.worker.flow.write_rows``): one that cannot be becomes its own job's error row,
its text made valid, and its bundle-mates' rows go as they are.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from pydantic import BaseModel, TypeAdapter
from pydantic_core import PydanticSerializationError

from qfarm.common.models import Evidence, JobRecord, Row
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


# Records travel between stages as one JSON string (``dump_records``): pydantic's Rust
# (de)serializer handles the nested evidence and claims, instead of kombu's JSON with a
# Python hook per object, which cost a fifth of the generate worker's CPU.
#
# The string is an object: ``records`` with their evidence left out, ``evidence`` the
# bundle's distinct evidence lists, and ``evidence_of`` which list each record had (null:
# none). The n samples of a question x mode carry the same blocks, two thirds of a record's
# bytes, and every byte of a message is paid for several times over (pydantic, kombu's
# JSON and base64, Redis, the prefork pool's pipe).
RECORDS = TypeAdapter(list[JobRecord])
EVIDENCE_LISTS = TypeAdapter(list[tuple[Evidence, ...]])


class _Bundle(BaseModel):
    records: list[JobRecord]
    evidence: list[tuple[Evidence, ...]]
    evidence_of: list[int | None]


def dump_records(records: Sequence[JobRecord]) -> str:
    lists: dict[tuple[Evidence, ...], int] = {}
    evidence_of: list[int | None] = []
    slim: list[JobRecord] = []
    for record in records:
        ret = record.retrieval
        if ret is None or not ret.evidence:
            evidence_of.append(None)
            slim.append(record)
            continue
        evidence_of.append(lists.setdefault(ret.evidence, len(lists)))
        slim.append(record.model_copy(update={"retrieval": ret.model_copy(update={"evidence": ()})}))
    return "".join((
        '{"evidence":', EVIDENCE_LISTS.dump_json(list(lists)).decode(),
        ',"evidence_of":', json.dumps(evidence_of),
        ',"records":', RECORDS.dump_json(slim).decode(), "}",
    ))


def parse_records(payload: str) -> list[JobRecord]:
    """The records ``dump_records`` wrote; ValueError or IndexError if any is unusable."""
    bundle = _Bundle.model_validate_json(payload)
    return [
        _with_evidence(record, bundle.evidence[i] if i is not None else None)
        for record, i in zip(bundle.records, bundle.evidence_of, strict=True)
    ]


def _with_evidence(record: JobRecord, evidence: tuple[Evidence, ...] | None) -> JobRecord:
    if evidence is None or record.retrieval is None:
        return record
    return record.model_copy(
        update={"retrieval": record.retrieval.model_copy(update={"evidence": evidence})}
    )


def payload_items(payload: str | list[dict]) -> list[dict]:
    """The per-job items of a message payload: a first stage's refs, or a later stage's
    records (one JSON string, their evidence put back)."""
    if not isinstance(payload, str):
        return payload
    try:
        items = json.loads(payload)
    except ValueError:
        log.error("unreadable bundle payload dropped: %.200s", payload)
        return []
    if not isinstance(items, dict):
        log.error("bundle payload not written by dump_records dropped: %.200s", payload)
        return []
    return _items_with_evidence(items)


def _items_with_evidence(bundle: dict) -> list[dict]:
    """The records of a bundle object as dicts, each with its evidence list back in place
    (an item that cannot take it is left as it is: it fails as that job's row)."""
    records, lists, refs = bundle.get("records"), bundle.get("evidence"), bundle.get("evidence_of")
    if not isinstance(records, list):
        return []
    for i, item in enumerate(records):
        try:
            ref = refs[i]  # type: ignore[index]
            if ref is not None:
                item["retrieval"]["evidence"] = lists[ref]  # type: ignore[index]
        except (TypeError, KeyError, IndexError):
            continue
    return records
