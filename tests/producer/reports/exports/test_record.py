"""exports.json, and an export whose extra is not installed: one line naming the extra."""

from __future__ import annotations

import sys

import pytest

from bench.perf.viewer import write_synthetic_run
from qfarm.common.errors import ConfigError
from qfarm.producer.reports.exports import export_lines, read_exports, record_export


def test_exports_accumulate_oldest_first_and_a_bad_file_reads_as_none(tmp_path) -> None:
    assert read_exports(tmp_path) == []
    first = record_export(tmp_path, "parquet", path="/x", files={"rows.parquet": 3})
    second = record_export(tmp_path, "otlp", endpoint="http://c:4318", jobs_traced=3, rows=3)
    assert read_exports(tmp_path) == [first, second]
    assert export_lines([first, second])[0].startswith("traces: 3 of 3 jobs to http://c:4318")
    (tmp_path / "exports.json").write_text("{not json")
    assert read_exports(tmp_path) == []


@pytest.mark.parametrize(("module", "extra", "call"), [
    ("pyarrow", "parquet", lambda run, out: _parquet(run, out)),
    ("mlflow", "mlflow", lambda run, out: _mlflow(run)),
    ("opentelemetry.sdk.trace", "otel", lambda run, out: _traces(run)),
])
def test_a_missing_extra_names_the_extra_to_install(tmp_path, monkeypatch, module, extra, call) -> None:
    write_synthetic_run(tmp_path, "run-a", 3)
    monkeypatch.setitem(sys.modules, module, None)  # import fails as where it is not installed
    with pytest.raises(ConfigError, match=rf"pip install 'qfarm\[{extra}\]'"):
        call(tmp_path / "run-a", tmp_path / "out")
    assert read_exports(tmp_path / "run-a") == []


def _parquet(run, out):
    from qfarm.producer.reports.exports.parquet import export_parquet

    return export_parquet(run, out)


def _mlflow(run):
    from qfarm.producer.reports.exports.mlflow import export_mlflow

    return export_mlflow(run, tracking_uri="sqlite:///unused.db")


def _traces(run):
    from qfarm.producer.reports.exports.traces import export_traces

    return export_traces(run)
