"""The run page says where the run was exported (its exports.json), newest first."""

from __future__ import annotations

from pathlib import Path

from bench.perf.viewer import write_synthetic_run
from qfarm.producer.reports.exports import record_export
from qfarm.producer.viewer.router import Viewer


def test_the_run_page_names_each_export(tmp_path: Path) -> None:
    write_synthetic_run(tmp_path, "run-a", 5)
    viewer = Viewer(tmp_path)
    assert "exported to" not in viewer.handle("/runs/run-a", {}).body.decode()
    record_export(tmp_path / "run-a", "parquet", path="/data/<pq>", files={"rows.parquet": 5})
    record_export(tmp_path / "run-a", "mlflow", tracking_uri="sqlite:///m.db",
                  experiment="bench", mlflow_run_id="abc123")
    html = viewer.handle("/runs/run-a", {}).body.decode()
    assert "exported to" in html
    mlflow, parquet = html.index("MLflow: run abc123 in experiment &#x27;bench&#x27;"), \
        html.index("Parquet: /data/&lt;pq&gt; (rows.parquet)")
    assert mlflow < parquet  # newest first
