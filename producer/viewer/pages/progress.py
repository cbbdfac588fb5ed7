"""The JSON progress probe (``/api/progress?run=RUN``) the live progress bars poll."""

from __future__ import annotations

import json

from qfarm.common.runstatus import status_text
from qfarm.producer.viewer.html import Response
from qfarm.producer.viewer.source import RunSource


def progress(src: RunSource, run_id: str) -> Response:
    """JSON for the live progress bars: rows written of jobs, and the run's state."""
    manifest, status, rr = src.run(run_id)
    rows = status.rows or 0 if status.source == "redis" else rr.stats.rows
    state = str(status.status or "")
    data = {"run": run_id, "rows": rows, "jobs": manifest.n_jobs, "status": state,
            "status_text": status_text(state, errored=rr.stats.error_rows, rows=rr.stats.rows)
            if state else ""}
    return Response(200, "application/json", json.dumps(data).encode())
