"""The viewer's router: ``Viewer.handle`` maps a request path and query to one page
(``qfarm.producer.viewer.pages``) and turns a missing run, bad input or a lost Redis into an
error page.

Every value from a manifest or a row is escaped (row text is model output).
Runs are read through ``qfarm.producer.reports`` and ``qfarm.producer.viewer.index``, the
same reader as ``qfarm report``; numbers are rendered with ``qfarm.common.reporting.report``'s
formatters and compared with ``qfarm.common.reporting.compare``.

A run is read from its directory when it has one, else from Redis (a run in
progress whose follower has written nothing yet, or one followed on another
host). Redis is optional (``qfarm.producer.viewer.live``): without it the pages show
the results directory and one line saying Redis is not there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from qfarm.common.errors import InputError
from qfarm.producer.reports.compare import DELTA_PLOT
from qfarm.producer.reports.summary import LATENCY_PLOT, STRICT_PLOT
from qfarm.producer.store import ProducerStore
from qfarm.producer.viewer.html import NotFound, Response, h
from qfarm.producer.viewer.html import page as _page
from qfarm.producer.viewer.pages import compare, progress, row, rows, run, runs
from qfarm.producer.viewer.reread import PassageSource
from qfarm.producer.viewer.source import RunSource
from qfarm.worker.broker import REDIS_DOWN

PLOTS = (STRICT_PLOT, LATENCY_PLOT, DELTA_PLOT)
log = logging.getLogger("qfarm.viewer")
STATIC = {"viewer.css": "text/css; charset=utf-8", "viewer.js": "text/javascript; charset=utf-8"}


class Viewer:
    """The viewer over the runs a ``RunSource`` reads (the arguments are that source's);
    ``handle`` serves one request."""

    def __init__(
        self,
        results_dir: Path,
        store: ProducerStore | None = None,
        *,
        redis_url: str | None = None,
        index_path: Path | None = None,
        passages: PassageSource | None = None,
    ) -> None:
        self.source = RunSource(results_dir, store, redis_url=redis_url, index_path=index_path,
                                passages=passages)

    @property
    def results_dir(self) -> Path:
        return self.source.results_dir

    @property
    def index_path(self) -> Path | None:
        return self.source.index_path

    def handle(self, path: str, query: Mapping[str, str]) -> Response:
        parts = [p for p in path.split("/") if p]
        try:
            return self._route(parts, query)
        except NotFound as exc:
            return _page("not found", f"<h1>Not found</h1><p>{h(exc)}</p>", status=404)
        except InputError as exc:
            return _page("bad request", f"<h1>Bad request</h1><p>{h(exc)}</p>", status=400)
        except REDIS_DOWN as exc:  # Redis went away while a page of a Redis-only run was read
            self.source.redis.failed(exc)
            note = h(self.source.redis.note)
            return _page("Redis unavailable", f"<h1>Redis unavailable</h1><p>{note}"
                         '</p><p><a href="/">runs on disk</a></p>', status=503)
        except Exception:  # a bug on one page: a 500 page and a traceback in the log, never
            # a dropped connection (``qfarm view``'s server would close it without a reply)
            log.exception("viewer: %s failed", path)
            return _page("error", "<h1>Internal error</h1><p>This page failed; the server's "
                         "log has the traceback.</p>", status=500)

    def _route(self, parts: list[str], q: Mapping[str, str]) -> Response:
        match parts:
            case []:
                return runs.runs_page(self.source)
            case ["static", name] if name in STATIC:
                data = resources.files("qfarm.producer.viewer").joinpath("static", name).read_bytes()
                return Response(200, STATIC[name], data)
            case ["api", "progress"]:
                return progress.progress(self.source, q.get("run", ""))
            case ["compare"]:
                return compare.compare_page(self.source, q.get("a", ""), q.get("b", ""),
                                            q.get("floor", "5"))
            case ["runs", run_id]:
                return run.run_page(self.source, run_id)
            case ["runs", run_id, "rows"]:
                return rows.rows_page(self.source, run_id, q)
            case ["runs", run_id, name] if name.startswith("rows.") and name[5:] in rows.EXPORTS:
                return rows.export_rows(self.source, run_id, name[5:], q)
            case ["runs", run_id, "rows", pos] if pos.isdigit():
                return row.row_page(self.source, run_id, int(pos))
            case ["runs", run_id, "files", name] if name in PLOTS:
                path = self.source.run_dir(run_id) / name
                if not path.is_file():
                    raise NotFound(f"{run_id} has no {name}; run `qfarm report {run_id}`")
                return Response(200, "image/png", path.read_bytes())
        raise NotFound("/" + "/".join(parts))
