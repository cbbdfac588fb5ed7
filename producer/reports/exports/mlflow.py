"""``qfarm export RUN --mlflow``: a run as one MLflow run, where experiment trackers look.

One MLflow run per export of a qfarm run, named by the run id, in an experiment (default
``qfarm``). What it holds:

* params: what decided the rows (model and profile, endpoints, retriever, index version,
  corpus, question file and its digest, modes, n, both policy hashes, every policy field as
  ``policy.KEY``);
* tags: ``qfarm.run_id``, the run's status, ``qfarm.simulated`` (``SIMULATED`` for a run the
  simulator answered) and the run record's digests and versions (``qfarm.record.*``);
* metrics: the numbers summary.md shows (``qfarm.common.reporting.run_metrics``): per mode
  the rates with their 95% interval ends, mean ratio, latency and tokens; per run the error
  rows and the cost table's run line. Runs of the same modes carry the same keys;
* artifacts: summary.md, its plots, manifest.json and status.json, and the rows as an MLflow
  table (``rows.json``; the answer text is left out, as in rows.parquet). A run of more than
  ``MAX_TABLE_ROWS`` rows logs ``rows.jsonl`` as a file instead of a table.

It goes through ``MlflowClient`` (no global tracking state in the caller's process). The
tracking URI is the one given, else MLflow's own default (``MLFLOW_TRACKING_URI``). With a
``sqlite:///PATH`` URI, a new experiment keeps its artifacts in ``mlartifacts/`` beside the
database file, not in the current directory.

The library is the ``mlflow`` extra: mlflow-skinny (the tracking client without the server's
UI and ML libraries), SQLAlchemy and Alembic for the SQLite tracking store, pandas for tables.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from qfarm.common.errors import InputError, QfarmError, ServiceError
from qfarm.common.models import Manifest
from qfarm.common.reporting.run_metrics import run_metrics
from qfarm.common.reporting.runstats import RunStats
from qfarm.common.runstatus import StatusRecord
from qfarm.common.urls import redact_url
from qfarm.producer.reports.exports.record import record_export, require_extra
from qfarm.producer.reports.rows import MANIFEST, ROWS, iter_rows, read_run
from qfarm.producer.reports.summary import LATENCY_PLOT, STRICT_PLOT, SUMMARY, run_cost
from qfarm.producer.rundir import STATUS, read_status

log = logging.getLogger(__name__)

DEFAULT_EXPERIMENT = "qfarm"
MAX_TABLE_ROWS = 100_000
TABLE = "rows.json"
ARTIFACTS = (SUMMARY, STRICT_PLOT, LATENCY_PLOT, MANIFEST, STATUS)


def run_params(manifest: Manifest) -> dict[str, str]:
    """What decided the run's rows, as MLflow params (strings)."""
    params: dict[str, Any] = {
        "model": manifest.model,
        "model_profile_id": manifest.model_profile_id,
        "endpoints": ",".join(manifest.endpoints),
        "llm_server": manifest.llm_server,
        "retriever": manifest.retriever,
        "index_version": manifest.index_version,
        "corpus": manifest.corpus,
        "question_file": manifest.question_file,
        "question_file_digest": manifest.question_file_digest,
        "modes": ",".join(m.value for m in manifest.modes),
        "n": manifest.n,
        "n_jobs": manifest.n_jobs,
        "eager": manifest.eager,
        "verifier_policy_hash": manifest.verifier_policy_hash,
        "governance_policy_hash": manifest.governance_policy_hash,
    }
    for key, value in manifest.policy.model_dump(mode="json").items():
        params[f"policy.{key}"] = value
    return {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True)
            for k, v in params.items() if v is not None}


def run_tags(manifest: Manifest, status: str) -> dict[str, str]:
    """The run's identity, status and record (digests, versions) as MLflow tags."""
    tags = {
        "qfarm.run_id": manifest.run_id,
        "qfarm.status": status,
        "qfarm.simulated": "SIMULATED" if manifest.simulated else "no",
    }
    if manifest.record is not None:
        for key, value in manifest.record.model_dump(mode="json").items():
            if key == "rule_versions":
                tags.update({f"qfarm.record.rule_versions.{k}": str(v) for k, v in value.items()})
            elif key not in ("rows_block_sha256", "endpoints") and value is not None:
                tags[f"qfarm.record.{key}"] = str(value)
    if manifest.simulated:
        tags["mlflow.note.content"] = ("SIMULATED: answered by the vLLM-compatible simulator; "
                                       "its numbers describe the simulator, not the model.")
    return tags


def _experiment_id(client: Any, name: str, tracking_uri: str | None) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return str(experiment.experiment_id)
    location = None
    if tracking_uri and tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri.removeprefix("sqlite:///"))
        location = (db.resolve().parent / "mlartifacts").as_uri()
    return str(client.create_experiment(name, artifact_location=location))


def _table_cell(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else value


def _rows_table(run_dir: Path) -> dict[str, list[Any]]:
    """The rows as columns (a table artifact): nested values as JSON text, no answer text."""
    columns: dict[str, list[Any]] = {}
    n = 0
    for line in iter_rows(run_dir / ROWS):
        if line.row is None:
            continue
        for key in columns.keys() - line.row.keys():
            columns[key].append(None)
        for key, value in line.row.items():
            if key == "answer":
                continue
            columns.setdefault(key, [None] * n).append(_table_cell(value))
        n += 1
    return columns


def export_mlflow(run_dir: Path, *, tracking_uri: str | None = None,
                  experiment: str = DEFAULT_EXPERIMENT) -> dict[str, Any]:
    """Log the run in ``run_dir`` as one MLflow run; record the export in exports.json and
    return that entry (tracking URI redacted, experiment, MLflow run id)."""
    require_extra("mlflow", "mlflow")
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    if not experiment.strip():
        raise InputError("--experiment: give an MLflow experiment name, e.g. --experiment qfarm")
    run_dir = Path(run_dir)
    manifest, stats = read_run(run_dir)
    status = read_status(run_dir)
    metrics = _metrics(manifest, stats, status)
    where = _shown_uri(tracking_uri)
    try:
        client = MlflowClient(tracking_uri)
        experiment_id = _experiment_id(client, experiment, tracking_uri)
        shown = str(status.status_text or status.status or "unknown")
        run = client.create_run(experiment_id, run_name=manifest.run_id,
                                tags=run_tags(manifest, shown))
    except QfarmError:
        raise
    except Exception as exc:  # MLflow raises its own and its stores' errors
        raise ServiceError(f"MLflow at {where}: could not start a run for {manifest.run_id} "
                           f"({type(exc).__name__}: {exc}); check --tracking-uri") from exc
    mlflow_run_id = run.info.run_id
    try:
        now = int(time.time() * 1000)
        client.log_batch(
            mlflow_run_id,
            metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
            params=[Param(k, v) for k, v in run_params(manifest).items()],
            tags=[RunTag("qfarm.rows", str(stats.rows))],
        )
        for name in ARTIFACTS:
            if (run_dir / name).exists():
                client.log_artifact(mlflow_run_id, str(run_dir / name))
        if stats.rows <= MAX_TABLE_ROWS:
            client.log_table(mlflow_run_id, data=_rows_table(run_dir), artifact_file=TABLE)
        else:
            client.log_artifact(mlflow_run_id, str(run_dir / ROWS))
        client.set_terminated(mlflow_run_id, "FINISHED")
    except Exception as exc:
        try:
            client.set_terminated(mlflow_run_id, "FAILED")
        except Exception:  # the store is what failed: the first error is the one to show
            log.debug("could not mark MLflow run %s failed", mlflow_run_id, exc_info=True)
        raise ServiceError(f"MLflow at {where}: logging {manifest.run_id} into run "
                           f"{mlflow_run_id} failed ({type(exc).__name__}: {exc})") from exc
    return record_export(run_dir, "mlflow", tracking_uri=where, experiment=experiment,
                         experiment_id=experiment_id, mlflow_run_id=mlflow_run_id,
                         metrics=len(metrics))


def _shown_uri(tracking_uri: str | None) -> str:
    """The tracking URI for messages and exports.json: a server's password redacted."""
    if not tracking_uri:
        return "MLflow's default tracking URI"
    return redact_url(tracking_uri) if tracking_uri.startswith(("http://", "https://")) else tracking_uri


def _metrics(manifest: Manifest, stats: RunStats, status: StatusRecord) -> dict[str, float]:
    cost = manifest.cost or run_cost(manifest, stats, status.finished_at)
    return run_metrics(stats, stats.mode_order(m.value for m in manifest.modes), cost)
