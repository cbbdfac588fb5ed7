"""rows.parquet and answers.parquet: the rows file's rows, typed and described from the Row
model, opened by pandas and DuckDB with the summary's numbers."""

from __future__ import annotations

import json

import pytest

from qfarm.common.errors import InputError
from qfarm.common.models import Grading, Row
from qfarm.producer.reports.exports import read_exports
from qfarm.producer.reports.exports.parquet import (
    ANSWERS_PARQUET,
    ROWS_PARQUET,
    export_parquet,
    row_columns,
    rows_schema,
)
from tests.producer.reports.exports.summary_table import percent_cell, summary_mode_table

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kept(sweep):
    """A run that kept its answers, n=2 (samples repeat: clustered intervals)."""
    return sweep(n=2, keep_answers=True)


def test_every_column_is_a_row_field_with_its_models_description(export_extra) -> None:
    export_extra("pyarrow")
    schema = rows_schema("r1")
    full = Row(run_id="r", job_id="j", question="q", question_id="q1", mode="quote",
               sample_index=0, retried_errors=["llm"], response_cache_hit=True,
               model_ms_saved=1.0).model_dump(mode="json")  # every optional field written
    assert schema.names == [k for k in full if k != "answer"]
    for field in schema:
        assert field.metadata[b"description"].strip(), f"{field.name} has no description"
    described = {name: text for name, _, text in row_columns()}
    assert described["ratio"] == Grading.model_fields["ratio"].description  # the model's words
    timings = schema.field("timings")
    assert [f.name for f in timings.type] == list(Row.model_fields["timings"].annotation.model_fields)
    assert timings.type.field("llm_ms").metadata[b"description"]
    assert schema.metadata[b"qfarm.run_id"] == b"r1"


def test_rows_round_trip_through_pandas_and_duckdb(kept, export_extra, tmp_path) -> None:
    pd = export_extra("pandas")
    duckdb = export_extra("duckdb")
    entry = export_parquet(kept.run_dir, tmp_path / "pq")
    lines = [json.loads(x) for x in kept.rows_path.read_text().splitlines() if x.strip()]
    frame = pd.read_parquet(tmp_path / "pq" / ROWS_PARQUET)
    assert len(frame) == len(lines) == kept.manifest.n_jobs
    assert "answer" not in frame.columns
    assert sorted(frame["job_id"]) == sorted(r["job_id"] for r in lines)
    path = str(tmp_path / "pq" / ROWS_PARQUET)
    strict = dict(duckdb.sql(
        f"select mode, 100.0 * count(*) filter (where verdict = 'STRICT') / count(*) "
        f"from read_parquet('{path}') group by mode").fetchall())
    table = summary_mode_table((kept.run_dir / "summary.md").read_text())
    for mode, cells in table.items():
        shown, _, _ = percent_cell(cells["strict-rate (of jobs; errors fail)"])
        assert round(strict[mode], 1) == shown
    # Nested records are structs DuckDB reads with dots; the tokens add up as in the rows.
    [(tokens,)] = duckdb.sql(f"select sum(usage.prompt_tokens) from read_parquet('{path}')").fetchall()
    assert tokens == sum(r["usage"]["prompt_tokens"] or 0 for r in lines)
    answers = pd.read_parquet(tmp_path / "pq" / ANSWERS_PARQUET)
    assert dict(zip(answers["job_id"], answers["answer"], strict=True)) == {
        r["job_id"]: r["answer"] for r in lines}
    assert entry["files"] == {ROWS_PARQUET: len(lines), ANSWERS_PARQUET: len(lines)}
    assert read_exports(kept.run_dir)[-1] == entry


def test_a_run_without_kept_answers_writes_no_answers_file(sweep, export_extra, tmp_path) -> None:
    export_extra("pyarrow")
    result = sweep(limit=2)
    (tmp_path / "pq").mkdir()
    (tmp_path / "pq" / ANSWERS_PARQUET).write_bytes(b"an earlier export's")
    entry = export_parquet(result.run_dir, tmp_path / "pq")
    assert entry["files"] == {ROWS_PARQUET: result.manifest.n_jobs}
    assert not (tmp_path / "pq" / ANSWERS_PARQUET).exists()


def test_a_row_that_does_not_fit_the_schema_is_named(sweep, export_extra, tmp_path) -> None:
    export_extra("pyarrow")
    result = sweep(limit=1)
    rows = result.rows_path.read_text().splitlines()
    bad = json.loads(rows[0]) | {"n_claims": "many"}
    result.rows_path.write_text("\n".join([json.dumps(bad), *rows[1:]]) + "\n")
    with pytest.raises(InputError, match="does not fit the row schema"):
        export_parquet(result.run_dir, tmp_path / "pq")
    assert not list((tmp_path / "pq").glob("*.tmp"))
