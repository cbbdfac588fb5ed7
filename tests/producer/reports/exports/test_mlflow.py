"""A run exported to MLflow (a temporary SQLite tracking store), read back with MlflowClient:
the metrics are the summary's numbers, and two runs carry the same keys."""

from __future__ import annotations

import json
import logging
import math

import pytest

from qfarm.producer.reports.exports import export_after_run, read_exports
from qfarm.producer.reports.exports.mlflow import export_mlflow
from tests.producer.reports.exports.summary_table import percent_cell, summary_mode_table

pytestmark = pytest.mark.slow
# summary.md column -> the metric that holds its number
RATE_COLUMNS = {
    "strict-rate (of jobs; errors fail)": "strict_rate_of_jobs",
    "error rate (of jobs)": "error_rate_of_jobs",
    "strict-rate (of answered)": "strict_rate_of_answered",
    "UNGROUNDED rate (of answered)": "ungrounded_rate_of_answered",
}


@pytest.fixture(scope="module")
def tracking(tmp_path_factory, export_extra):
    export_extra("mlflow")
    export_extra("sqlalchemy")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    return uri, MlflowClient(uri)


def test_the_mlflow_run_holds_the_summarys_numbers(sweep, tracking) -> None:
    uri, client = tracking
    result = sweep(n=2)
    entry = export_mlflow(result.run_dir, tracking_uri=uri, experiment="bench")
    run = client.get_run(entry["mlflow_run_id"])
    assert run.info.run_name == result.run_id
    assert client.get_experiment(run.info.experiment_id).name == "bench"
    metrics = run.data.metrics
    table = summary_mode_table((result.run_dir / "summary.md").read_text())
    assert set(table) == {"quote", "claim_lattice"}
    for mode, cells in table.items():
        assert metrics[f"{mode}/jobs"] == int(cells["jobs"])
        for column, key in RATE_COLUMNS.items():
            rate, low, high = percent_cell(cells[column])
            assert (round(metrics[f"{mode}/{key}"], 1), round(metrics[f"{mode}/{key}_low"], 1),
                    round(metrics[f"{mode}/{key}_high"], 1)) == (rate, low, high), (mode, column)
        assert f"{metrics[f'{mode}/mean_ratio_of_answered']:.3f}" == cells["mean ratio (of answered)"]
    manifest = result.manifest
    params, tags = run.data.params, run.data.tags
    assert params["model"] == manifest.model and params["index_version"] == manifest.index_version
    assert params["verifier_policy_hash"] == manifest.verifier_policy_hash
    assert params["policy.top_k"] == str(manifest.policy.top_k)
    assert tags["qfarm.run_id"] == result.run_id and tags["qfarm.simulated"] == "SIMULATED"
    record = _record(result.run_dir)
    assert tags["qfarm.record.rows_sha256"] == record["rows_sha256"]
    assert tags["qfarm.record.summary_sha256"] == record["summary_sha256"]
    assert metrics["run/prompt_tokens"] == _cost_line(result.run_dir)["prompt_tokens"]
    artifacts = {a.path for a in client.list_artifacts(entry["mlflow_run_id"])}
    assert {"summary.md", "manifest.json", "strict_rate.png", "rows.json"} <= artifacts
    table_path = client.download_artifacts(entry["mlflow_run_id"], "rows.json")
    rows_table = json.loads(open(table_path, encoding="utf-8").read())
    assert len(rows_table["data"]) == manifest.n_jobs
    assert "answer" not in rows_table["columns"]
    assert read_exports(result.run_dir)[-1] == entry


def test_two_exported_runs_carry_the_same_metric_keys(sweep, tracking) -> None:
    uri, client = tracking
    one, two = sweep(limit=2), sweep(limit=3)
    keys = []
    for result in (one, two):
        entry = export_mlflow(result.run_dir, tracking_uri=uri)
        keys.append(set(client.get_run(entry["mlflow_run_id"]).data.metrics))
    assert keys[0] == keys[1]
    assert {"quote/strict_rate_of_jobs", "claim_lattice/error_rate_of_jobs", "run/error_rate",
            "run/completion_tokens"} <= keys[0]


def test_a_failed_export_after_a_run_is_returned_not_raised(sweep, tmp_path, caplog, export_extra) -> None:
    export_extra("mlflow")
    result = sweep(limit=1)
    (tmp_path / "not-a-dir").write_text("")
    bad = f"sqlite:///{tmp_path / 'not-a-dir' / 'mlflow.db'}"
    with caplog.at_level(logging.INFO):
        done, [failed] = export_after_run(result.run_dir, ["mlflow"], tracking_uri=bad)
    assert done == [] and failed in caplog.text
    assert "export to mlflow" in caplog.text and "the run is unaffected" in caplog.text
    assert read_exports(result.run_dir) == []


def _record(run_dir) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())["record"]


def _cost_line(run_dir) -> dict:
    cost = json.loads((run_dir / "manifest.json").read_text())["cost"]
    line = cost["lines"][0]
    assert not math.isnan(line["prompt_tokens"])
    return line
