"""``qfarm export RUN --parquet DIR``: a run's rows (and kept answers) as Parquet files.

The schema is derived from ``qfarm.common.models.Row`` (its fields, in the order rows.jsonl
writes them, the verifier's and the gold check's parts flat as in the JSON) and each field
carries its model's description as metadata, so a column's meaning and type follow the model.
Types are ones pandas, DuckDB and Hugging Face ``datasets`` all take without a converter:
strings (the vocabularies' words), 64-bit integers and floats, booleans, lists, and structs
for the row's nested records (``timings``, ``usage``, ``llm_request``, ``answerability``); the one
free-keyed map (``quote_match_layers``) is a JSON string, since maps are not a type every
reader takes. Every column is nullable: a row written before a field existed reads as null.

Files: ``rows.parquet`` (every row but the answer text) and, when the run kept answers
(``--keep-answers``), ``answers.parquet`` (``run_id``, ``job_id``, ``answer``): the answers
stay apart so the rows can be shared without them. Rows are streamed in batches (the rows
file is never loaded whole).
"""

from __future__ import annotations

import enum
import json
import logging
import types
import typing
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from qfarm.common.errors import InputError
from qfarm.common.models import GoldCheck, Grading, Row
from qfarm.common.versions import ROW_SCHEMA_VERSION
from qfarm.producer.reports.exports.record import record_export, require_extra
from qfarm.producer.reports.rows import ROWS, iter_rows
from qfarm.producer.rundir import read_manifest

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

ROWS_PARQUET = "rows.parquet"
ANSWERS_PARQUET = "answers.parquet"
BATCH_ROWS = 5_000
# Parts of the row that the JSON writes flat (Row._flatten), and the answer text, which goes
# to its own file.
FLAT_PARTS: dict[str, type[BaseModel]] = {"grading": Grading, "gold": GoldCheck}
ANSWER_FIELDS = ("run_id", "job_id", "answer")
JSON_TEXT = "json"  # a column's ``encoding`` metadata when it holds JSON text


def row_columns() -> list[tuple[str, Any, str]]:
    """(name, annotation, description) of each column of rows.jsonl, in its order."""
    out: list[tuple[str, Any, str]] = []
    for name, field in Row.model_fields.items():
        part = FLAT_PARTS.get(name)
        fields = part.model_fields.items() if part else [(name, field)]
        out += [(n, f.annotation, f.description or "") for n, f in fields]
    return out


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _unwrap(annotation: Any) -> Any:
    """``X | None`` -> ``X`` (every column is nullable anyway)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return args[0] if len(args) == 1 else str
    return annotation


def _field(name: str, annotation: Any, description: str) -> pa.Field:
    import pyarrow as pa

    meta = {"description": description}
    tp = _unwrap(annotation)
    origin = typing.get_origin(tp)
    if _is_model(tp):
        children = [_field(n, f.annotation, f.description or "") for n, f in tp.model_fields.items()]
        return pa.field(name, pa.struct(children), metadata=meta)
    if origin in (list, tuple):
        (item, *_) = typing.get_args(tp)
        return pa.field(name, pa.list_(_field("item", item, "").type), metadata=meta)
    if origin is dict:
        return pa.field(name, pa.string(), metadata={**meta, "encoding": JSON_TEXT})
    scalar = _scalar(tp)
    if scalar is None:
        raise TypeError(f"Row field {name}: no Parquet type for {annotation!r}")
    return pa.field(name, scalar, metadata=meta)


def _scalar(tp: Any) -> pa.DataType | None:
    import pyarrow as pa

    if isinstance(tp, type) and issubclass(tp, enum.Enum) or tp is str:
        return pa.string()
    if typing.get_origin(tp) is typing.Literal:
        return pa.string()
    return {bool: pa.bool_(), int: pa.int64(), float: pa.float64()}.get(tp)


def rows_schema(run_id: str | None = None) -> pa.Schema:
    """The Parquet schema of rows.parquet: Row's fields but the answer, with descriptions."""
    pa = require_extra("pyarrow", "parquet")
    fields = [_field(n, a, d) for n, a, d in row_columns() if n != "answer"]
    return pa.schema(fields, metadata=_file_meta("rows", run_id))


def answers_schema(run_id: str | None = None) -> pa.Schema:
    pa = require_extra("pyarrow", "parquet")
    described = {n: (a, d) for n, a, d in row_columns()}
    return pa.schema([_field(n, *described[n]) for n in ANSWER_FIELDS],
                     metadata=_file_meta("answers", run_id))


def _file_meta(kind: str, run_id: str | None) -> dict[str, str]:
    return {"qfarm.table": kind, "qfarm.row_schema_version": str(ROW_SCHEMA_VERSION),
            "qfarm.run_id": run_id or "",
            "description": ("one row per job of a qfarm run (docs/grounding.md, 'The row')"
                            if kind == "rows" else
                            "the answer text of each job whose run kept answers; join on job_id")}


def _cell(value: Any, field: pa.Field) -> Any:
    """A JSON value shaped for ``field``: JSON text where the column holds it."""
    import pyarrow as pa

    if value is None:
        return None
    if (field.metadata or {}).get(b"encoding") == JSON_TEXT.encode():
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    if pa.types.is_struct(field.type) and isinstance(value, dict):
        return {f.name: _cell(value.get(f.name), f) for f in field.type}
    return value


def _record(row: dict[str, Any], schema: pa.Schema) -> dict[str, Any]:
    return {f.name: _cell(row.get(f.name), f) for f in schema}


def _batches(rows: Iterable[dict[str, Any]], schema: pa.Schema) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(_record(row, schema))
        if len(batch) >= BATCH_ROWS:
            yield batch
            batch = []
    if batch:
        yield batch


class _Writer:
    """A Parquet file written batch by batch, opened on its first batch."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path, self.schema, self.rows = path, schema, 0
        self._writer: Any = None

    def write(self, records: list[dict[str, Any]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pa.Table.from_pylist(records, schema=self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            first = self.rows + 1
            raise InputError(
                f"{self.path.name}: a row among rows {first}-{first + len(records) - 1} of the "
                f"rows file does not fit the row schema ({exc}); check the run with `qfarm "
                "verify RUN`") from exc
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.tmp, self.schema, compression="zstd")
        self._writer.write_table(table)
        self.rows += len(records)

    @property
    def tmp(self) -> Path:
        return self.path.with_name(self.path.name + ".tmp")

    def close(self) -> None:
        """Finish the file (an empty run still gets its schema)."""
        import pyarrow.parquet as pq

        if self._writer is None:
            pq.write_table(self.schema.empty_table(), self.tmp, compression="zstd")
        else:
            self._writer.close()
        self.tmp.replace(self.path)


def _write_answers(run_dir: Path, out: _Writer) -> None:
    """The kept answers, in a second pass over the rows: a run without them costs nothing,
    and a run with them gets a file of answers alone (no column of nulls in rows.parquet)."""
    answers = (line.row for line in iter_rows(run_dir / ROWS)
               if line.row is not None and line.row.get("answer") is not None)
    for batch in _batches(answers, out.schema):
        out.write(batch)


def export_parquet(run_dir: Path, out_dir: Path) -> dict[str, Any]:
    """Write ``rows.parquet`` (and ``answers.parquet`` when the run kept any answer) of the
    run in ``run_dir`` into ``out_dir``; record the export in the run's exports.json and
    return that entry (files, row counts, unreadable lines skipped)."""
    require_extra("pyarrow.parquet", "parquet")
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    manifest = read_manifest(run_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--parquet {out_dir}: not a directory; give a directory to write "
                         f"{ROWS_PARQUET} into")
    out_dir.mkdir(parents=True, exist_ok=True)
    rows_out = _Writer(out_dir / ROWS_PARQUET, rows_schema(manifest.run_id))
    answers_out = _Writer(out_dir / ANSWERS_PARQUET, answers_schema(manifest.run_id))
    unreadable: list[int] = []

    def rows() -> Iterator[dict[str, Any]]:
        for line in iter_rows(run_dir / ROWS):
            if line.row is None:
                unreadable.append(line.lineno)
            else:
                yield line.row

    try:
        for batch in _batches(rows(), rows_out.schema):
            rows_out.write(batch)
        if manifest.keep_answers:
            _write_answers(run_dir, answers_out)
        files = {ROWS_PARQUET: rows_out.rows}
        rows_out.close()
        if answers_out.rows:
            answers_out.close()
            files[ANSWERS_PARQUET] = answers_out.rows
        else:  # an earlier export's answers in DIR must not read as this run's
            answers_out.path.unlink(missing_ok=True)
    finally:
        for w in (rows_out, answers_out):
            w.tmp.unlink(missing_ok=True)
    if unreadable:
        log.warning("%s: skipped %d unreadable line(s) of %s (first: line %d)", run_dir,
                    len(unreadable), ROWS, unreadable[0])
    return record_export(run_dir, "parquet", path=str(out_dir.resolve()), files=files,
                         unreadable_lines=len(unreadable))
