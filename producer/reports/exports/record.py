"""Where a run was exported: ``exports.json`` in its run directory, and the extras' imports.

Each export appends one entry (``kind``, ``at``, and where it went), so the viewer's run
page and ``qfarm export`` can say where a run's rows and metrics can be found. The file is
beside the run's files, not part of its record: exporting never changes what
``qfarm verify`` checks.
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from qfarm.common.errors import ConfigError
from qfarm.common.reporting.report import fmt_time
from qfarm.producer.rundir import write_json_atomic

EXPORTS = "exports.json"


def require_extra(module: str, extra: str) -> ModuleType:
    """Import ``module`` of an optional extra, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"exporting needs {module.split('.')[0]}, which is not installed ({exc}); "
            f"install the extra: pip install 'qfarm[{extra}]'"
        ) from exc


def read_exports(run_dir: Path) -> list[dict[str, Any]]:
    """The run's export entries, oldest first; [] when it was never exported (or the file
    is unreadable: it is informational, never a reason to fail a reader)."""
    try:
        data = json.loads((Path(run_dir) / EXPORTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    entries = data.get("exports") if isinstance(data, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def record_export(run_dir: Path, kind: str, **where: Any) -> dict[str, Any]:
    """Append an export of ``kind`` to the run's ``exports.json``; returns the entry."""
    entry = {"kind": kind, "at": round(time.time(), 3), **where}
    write_json_atomic(Path(run_dir) / EXPORTS, {"exports": [*read_exports(run_dir), entry]})
    return entry


def export_lines(entries: list[dict[str, Any]]) -> list[str]:
    """One line of text per export, newest first, for a reader (the viewer's run page)."""
    lines = []
    for e in reversed(entries):
        at = fmt_time(e["at"]) if isinstance(e.get("at"), int | float) else "?"
        if e.get("kind") == "parquet":
            files = ", ".join(e.get("files") or {})
            lines.append(f"Parquet: {e.get('path')} ({files}), {at}")
        elif e.get("kind") == "mlflow":
            lines.append(f"MLflow: run {e.get('mlflow_run_id')} in experiment "
                         f"{e.get('experiment')!r} at {e.get('tracking_uri')}, {at}")
        elif e.get("kind") == "otlp":
            lines.append(f"traces: {e.get('jobs_traced')} of {e.get('rows')} jobs to "
                         f"{e.get('endpoint')}, {at}")
        else:
            lines.append(f"{e.get('kind')}, {at}")
    return lines
