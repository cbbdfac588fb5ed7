"""One row's page (``/runs/RUN/rows/N``): the row, re-read against the index's passages."""

from __future__ import annotations

from qfarm.producer.viewer.html import NotFound, Response
from qfarm.producer.viewer.html import page as _page
from qfarm.producer.viewer.reread import reread_row
from qfarm.producer.viewer.row import render_row
from qfarm.producer.viewer.source import RunSource


def row_page(src: RunSource, run_id: str, pos: int) -> Response:
    manifest, _, rr = src.run(run_id)
    if pos >= len(rr.entries):
        raise NotFound(f"{run_id} has {len(rr.entries)} rows; no row {pos}")
    row = rr.row(pos)
    if row is None:
        raise NotFound(f"row {pos} of {run_id} is no longer readable")
    reread = reread_row(row, manifest, src.passages(), str(src.index_path or "(none given)"))
    return _page(f"row {pos} of {run_id}", render_row(run_id, pos, row, manifest, reread))
