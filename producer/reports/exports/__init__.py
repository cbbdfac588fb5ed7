"""Exports of a finished run to where its users already look: Parquet files (pandas, DuckDB,
Hugging Face ``datasets``), MLflow, and OpenTelemetry traces (one per job). Each is an
optional extra (``qfarm[parquet]``, ``qfarm[mlflow]``, ``qfarm[otel]``), imported only when
an export runs, and reads the run directory after the run: nothing here is on a run's path.
Every export is recorded in the run's ``exports.json`` (``read_exports``), which the
viewer's run page shows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from qfarm.producer.reports.exports.record import EXPORTS, export_lines, read_exports, record_export

log = logging.getLogger(__name__)

# The exports ``qfarm sweep --export`` can run after a run's summary is written.
AFTER_RUN = ("mlflow", "otlp")

__all__ = ["AFTER_RUN", "EXPORTS", "export_after_run", "export_lines", "read_exports",
           "record_export"]


def export_after_run(run_dir: Path, targets: Iterable[str], *,
                     tracking_uri: str | None = None, experiment: str | None = None,
                     otlp_endpoint: str | None = None, sample_ratio: float | None = None,
                     ) -> tuple[list[dict[str, Any]], list[str]]:
    """Run each export of ``targets`` on a run that has ended (``qfarm sweep --export``).

    A failed export is logged and skipped: the run and its exit code stand as they are, and
    ``qfarm export RUN`` can do it again later. Returns the entries recorded and a line per
    export that failed (what failed and how to try again).
    """
    done, failed = [], []
    for target in targets:
        try:
            if target == "mlflow":
                from qfarm.producer.reports.exports.mlflow import DEFAULT_EXPERIMENT, export_mlflow

                done.append(export_mlflow(run_dir, tracking_uri=tracking_uri,
                                          experiment=experiment or DEFAULT_EXPERIMENT))
            elif target == "otlp":
                from qfarm.producer.reports.exports.traces import export_traces

                done.append(export_traces(run_dir, endpoint=otlp_endpoint,
                                          sample_ratio=sample_ratio))
            else:
                raise ValueError(f"unknown export {target!r}; choose from {', '.join(AFTER_RUN)}")
        except Exception as exc:  # an export must never fail the run it describes
            line = (f"export to {target} of {Path(run_dir).name} failed, the run is unaffected: "
                    f"{exc}; run `qfarm export {Path(run_dir)} --{target}` to try again")
            log.info("%s", line)  # the caller says it (the CLI prints it even with --quiet)
            failed.append(line)
    return done, failed
