"""HTML pages of the viewer: runs, run, rows, row and compare, plus a JSON progress probe.

Every value from a manifest or a row is escaped (row text is model output).
Runs are read through ``producer.reports`` and ``producer.viewer.index``, the
same reader as ``qfarm report``; numbers are rendered with ``common.reporting.report``'s
formatters and compared with ``common.reporting.compare``.

A run is read from its directory when it has one, else from Redis (a run in
progress whose follower has written nothing yet, or one followed on another
host). Redis is optional (``producer.viewer.live``): without it the pages show
the results directory and one line saying Redis is not there.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

from common.errors import InputError, ManifestError
from common.models import Manifest
from common.reporting.compare import compare_runs
from common.reporting.report import (
    GOLD_COLUMNS,
    fmt_ms,
    fmt_num,
    fmt_pct,
    fmt_time,
    gold_cells,
    run_warnings,
)
from common.reporting.runstats import STAGES
from common.vocab import Verdict
from producer.reports import (
    DELTA_PLOT,
    LATENCY_PLOT,
    MANIFEST,
    STRICT_PLOT,
    check_floor,
    shown_status,
)
from producer.runs import is_run_id, read_manifest, read_run_status
from producer.store import ProducerStore, Progress
from producer.viewer.compare import changed_verdicts, render_comparison
from producer.viewer.html import MEANINGS as MEANINGS  # re-exported: the tests read it here
from producer.viewer.html import NotFound, Response, h
from producer.viewer.html import badge as _badge
from producer.viewer.html import count_link as _count_link
from producer.viewer.html import meaning as _meaning
from producer.viewer.html import page as _page
from producer.viewer.html import rows_link as _rows_link
from producer.viewer.html import rows_url as _rows_url
from producer.viewer.html import table as _table
from producer.viewer.index import FILTERS, RowsCache, RunRows
from producer.viewer.live import REDIS_ERRORS, RedisSource
from producer.viewer.reread import PassageSource, reread_row
from producer.viewer.row import render_row

PAGE_SIZE = 50
LIVE_STATES = ("running", "enqueueing")
PLOTS = (STRICT_PLOT, LATENCY_PLOT, DELTA_PLOT)
STATIC = {"viewer.css": "text/css; charset=utf-8", "viewer.js": "text/javascript; charset=utf-8"}
REDIS_BADGE = ' <span class="badge redis" title="no run directory here yet">in Redis</span>'


def redis_status(p: Progress) -> str:
    """A Redis-only run's state, in the words of ``status.json``."""
    if not p.has_manifest:
        return "lost"
    if p.error:
        return "failed"
    if p.cancelled:
        return "cancelled"
    return "complete" if p.done >= p.total else "running"


def _finished(state: str, status: Mapping[str, Any], last_row_at: float | None) -> float | None:
    """When the run ended; a live run has not (its last row's time is not its end)."""
    if state in LIVE_STATES:
        return None
    return status.get("finished_at") or last_row_at


class Viewer:
    """The viewer over one results directory and, optionally, Redis; ``handle`` serves one request.

    ``store`` is a Redis store the caller already has (``qfarm serve``), ``redis_url``
    one to connect to lazily (``qfarm view``); with neither, Redis is not read.
    ``index_path`` is the embedded index the row page reads passages from, or
    ``passages`` a source of them (tests).
    """

    def __init__(
        self,
        results_dir: Path,
        store: ProducerStore | None = None,
        *,
        redis_url: str | None = None,
        index_path: Path | None = None,
        passages: PassageSource | None = None,
    ) -> None:
        self.results_dir = Path(results_dir)
        self.cache = RowsCache()
        self.redis = RedisSource(store, redis_url)
        self.index_path = index_path
        self._passages = passages
        self._passages_lock = threading.Lock()

    # ----------------------------------------------------------------- dispatch

    def handle(self, path: str, query: Mapping[str, str]) -> Response:
        parts = [p for p in path.split("/") if p]
        try:
            return self._route(parts, query)
        except NotFound as exc:
            return _page("not found", f"<h1>Not found</h1><p>{h(exc)}</p>", status=404)
        except InputError as exc:
            return _page("bad request", f"<h1>Bad request</h1><p>{h(exc)}</p>", status=400)
        except REDIS_ERRORS as exc:  # Redis went away while a page of a Redis-only run was read
            self.redis.failed(exc)
            return _page("Redis unavailable", f"<h1>Redis unavailable</h1><p>{h(self.redis.note)}"
                         '</p><p><a href="/">runs on disk</a></p>', status=503)

    def _route(self, parts: list[str], q: Mapping[str, str]) -> Response:
        match parts:
            case []:
                return self.runs_page()
            case ["static", name] if name in STATIC:
                data = resources.files("producer.viewer").joinpath("static", name).read_bytes()
                return Response(200, STATIC[name], data)
            case ["api", "progress"]:
                return self.progress(q.get("run", ""))
            case ["compare"]:
                return self.compare_page(q.get("a", ""), q.get("b", ""), q.get("floor", "5"))
            case ["runs", run_id]:
                return self.run_page(run_id)
            case ["runs", run_id, "rows"]:
                return self.rows_page(run_id, q)
            case ["runs", run_id, "rows", pos] if pos.isdigit():
                return self.row_page(run_id, int(pos))
            case ["runs", run_id, "files", name] if name in PLOTS:
                path = self._run_dir(run_id) / name
                if not path.is_file():
                    raise NotFound(f"{run_id} has no {name}; run `qfarm report {run_id}`")
                return Response(200, "image/png", path.read_bytes())
        raise NotFound("/" + "/".join(parts))

    # ----------------------------------------------------------------- runs

    def _has_dir(self, run_id: str) -> bool:
        return is_run_id(run_id) and (self.results_dir / run_id / MANIFEST).is_file()

    def _run_dir(self, run_id: str) -> Path:
        if not self._has_dir(run_id):
            raise NotFound(f"no run {run_id!r} in {self.results_dir}")
        return self.results_dir / run_id

    def redis_run_ids(self) -> list[str]:
        """Runs with a manifest in Redis and no directory here, newest id first."""
        store = self.redis.get()
        if store is None:
            return []
        try:
            ids = store.manifest_run_ids()
        except REDIS_ERRORS as exc:
            self.redis.failed(exc)
            return []
        self.redis.ok()
        return sorted((r for r in ids if is_run_id(r) and not self._has_dir(r)), reverse=True)

    def run_ids(self) -> list[str]:
        if not self.results_dir.is_dir():
            return []
        dirs = [p for p in self.results_dir.iterdir() if (p / MANIFEST).is_file()]
        return [p.name for p in sorted(dirs, key=lambda p: p.name, reverse=True)]

    def _run(self, run_id: str) -> tuple[Manifest, dict[str, Any], RunRows]:
        """A run's manifest, status and rows: from its directory, else from Redis."""
        if self._has_dir(run_id):
            run_dir = self.results_dir / run_id
            on_disk, status = read_manifest(run_dir), read_run_status(run_dir)
            rr = self.cache.get(run_dir)
            # The status its rows and its process say, not status.json's word.
            status["status"] = shown_status(on_disk, status, rr.stats.rows)
            return on_disk, status, rr
        store = self.redis.get() if is_run_id(run_id) else None
        if store is None:
            where = " or in Redis" if self.redis.configured else ""
            raise NotFound(f"no run {run_id!r} in {self.results_dir}{where}"
                           + (f" ({self.redis.note})" if self.redis.note else ""))
        try:
            manifest = store.manifest(run_id)
            if manifest is None:
                raise NotFound(f"no run {run_id!r} in {self.results_dir} or in Redis")
            progress = store.progress(run_id, manifest.n_jobs)
            rr = self.cache.get_redis(store, run_id)
        except REDIS_ERRORS as exc:
            self.redis.failed(exc)
            raise NotFound(f"run {run_id!r} has no directory here and {self.redis.note}") from None
        except ManifestError as exc:
            raise InputError(str(exc)) from None
        self.redis.ok()
        status = {"status": redis_status(progress), "source": "redis",
                  "started_at": manifest.created_at, "rows": progress.done}
        return manifest, status, rr

    def progress(self, run_id: str) -> Response:
        """JSON for the live progress bars: rows written of jobs, and the run's state."""
        manifest, status, rr = self._run(run_id)
        rows = int(status["rows"]) if status.get("source") == "redis" else rr.stats.rows
        data = {"run": run_id, "rows": rows, "jobs": manifest.n_jobs,
                "status": status.get("status") or ""}
        return Response(200, "application/json", json.dumps(data).encode())

    def passages(self) -> PassageSource | None:
        """The embedded index, opened read-only on first use; None when there is none."""
        with self._passages_lock:
            if self._passages is None and self.index_path is not None:
                from worker.retrieval.embedded import EmbeddedRetriever, read_meta

                if read_meta(self.index_path) is not None:
                    self._passages = EmbeddedRetriever(self.index_path)
            return self._passages

    def runs_page(self) -> Response:
        rows = []
        for run_id in [*self.redis_run_ids(), *self.run_ids()]:
            try:
                manifest, status, rr = self._run(run_id)
            except (InputError, NotFound) as exc:
                rows.append([h(run_id), f'<span class="err">{h(exc)}</span>'] + [""] * 5)
                continue
            state = str(status.get("status") or "")
            in_redis = status.get("source") == "redis"
            done = int(status["rows"]) if in_redis else rr.stats.rows
            bar = (
                f'<progress max="{manifest.n_jobs}" value="{done}"></progress> '
                f'<span class="count">{done}/{manifest.n_jobs}</span>'
            )
            rates = "<br>".join(
                f"{h(m)}: {fmt_pct(ms.tally.strict, ms.tally.valid, interval=False)}"
                for m, ms in ((m, rr.stats.modes[m]) for m in rr.stats.mode_order(manifest.modes))
            )
            started = status.get("started_at") or manifest.created_at
            finished = _finished(state, status, rr.stats.last_finished)
            rows.append([
                f'<a href="/runs/{h(quote(run_id))}">{h(run_id)}</a>{_badge(manifest)}'
                + (REDIS_BADGE if in_redis else ""),
                h(manifest.question_file),
                h(f"{', '.join(manifest.modes)} × {manifest.n}"),
                f'<span class="status" data-run="{h(run_id)}" data-live="{int(state in LIVE_STATES)}">'
                f"{h(state or '—')}</span> {bar}",
                h(fmt_time(started)),
                h(fmt_time(finished)),
                rates or "—",
            ])
        header = ["run", "question file", "modes × n", "status", "started", "finished",
                  "strict-rate per mode"]
        if self.redis.note:
            source = f'<p class="note" id="redis-note">{h(self.redis.note)}</p>'
        elif not self.redis.configured:
            source = ('<p class="note" id="redis-note">No Redis configured: only the runs on disk '
                      "are listed.</p>")
        else:
            source = ""
        body = (
            f"<h1>Runs in {h(self.results_dir)}</h1>{source}"
            '<p><input id="filter" placeholder="filter runs" autocomplete="off"></p>'
            + (_table(header, rows, cls="runs sortable") if rows else "<p>No runs yet.</p>")
        )
        return _page("runs", body)

    # ----------------------------------------------------------------- run

    def run_page(self, run_id: str) -> Response:
        manifest, status, rr = self._run(run_id)
        stats, modes = rr.stats, rr.stats.mode_order(manifest.modes)
        state = str(status.get("status") or "")
        facts = [
            ("question file", h(manifest.question_file)),
            ("modes × n", h(f"{', '.join(manifest.modes)} × {manifest.n} ({manifest.n_jobs} jobs)")),
            ("model", h(f"{manifest.model} (profile {manifest.model_profile_id})")),
            ("retriever", h(f"{manifest.retriever} {manifest.index_version or ''}")),
            ("status", f'<span class="status" data-run="{h(run_id)}" data-live='
                       f'"{int(state in LIVE_STATES)}">{h(state or "—")}</span> '
                       f'<span class="count">{stats.rows}/{manifest.n_jobs}</span> rows'),
            ("started", h(fmt_time(status.get("started_at") or manifest.created_at))),
            ("finished", h(fmt_time(_finished(state, status, stats.last_finished)))),
            ("answers kept", "yes" if manifest.keep_answers else "no (run with --keep-answers)"),
        ]
        in_redis = status.get("source") == "redis"
        if in_redis:
            facts.append(("read from", "Redis: this run has no directory in "
                          f"{h(self.results_dir)} (yet)"))
        out = [f"<h1>Run {h(run_id)}{_badge(manifest)}{REDIS_BADGE if in_redis else ''}</h1>",
               _table(["", ""], ([h(k), v] for k, v in facts), cls="facts")]
        notes = [line[2:] for line in run_warnings(manifest, stats, state or None)
                 if line.startswith("- ")]
        if notes:
            out.append('<div class="warn"><b>Warnings</b><ul>'
                       + "".join(f"<li>{h(n)}</li>" for n in notes) + "</ul></div>")
        out += self._mode_section(run_id, stats, modes)
        out += self._kind_section(run_id, rr, modes)
        out += self._gold_section(stats, modes)
        out += self._error_section(run_id, stats)
        out += self._timing_section(stats)
        plots = [p for p in (STRICT_PLOT, LATENCY_PLOT) if (self.results_dir / run_id / p).is_file()]
        out.append("<h2>Plots</h2>" + ("".join(
            f'<img src="/runs/{h(quote(run_id))}/files/{p}" alt="{p}">' for p in plots)
            or (f"<p class=note>No plots yet: <code>qfarm report {h(run_id)}</code> draws them.</p>"
                if not in_redis else
                "<p class=note>No plots: they are drawn into the run's directory, which the "
                "run's follower writes.</p>")))
        return _page(f"run {run_id}", "".join(out))

    def _mode_section(self, run_id: str, stats: Any, modes: list[str]) -> list[str]:
        rows = []
        for m in modes:
            t = stats.modes[m].tally if m in stats.modes else None
            if t is None:
                rows.append([h(m)] + ["0"] + ["—"] * 5)
                continue
            rows.append([
                h(m),
                _rows_link(run_id, t.rows, mode=m),
                _rows_link(run_id, t.errors, mode=m, verdict="none") if t.errors else "0",
                *(
                    f"{_rows_link(run_id, k, mode=m, verdict=v)} · {h(fmt_pct(k, t.valid))}"
                    for v, k in ((Verdict.STRICT, t.strict), (Verdict.HYBRID, t.hybrid),
                                 (Verdict.UNGROUNDED, t.ungrounded))
                ),
                h(fmt_num(t.ratio.mean, 3)),
            ])
        header = ["mode", "rows", "errors", f"{Verdict.STRICT} (95% Wilson)", Verdict.HYBRID,
                  Verdict.UNGROUNDED, "mean ratio"]
        return ["<h2>Verdicts per mode</h2>", _table(header, rows)]

    def _kind_section(self, run_id: str, rr: RunRows, modes: list[str]) -> list[str]:
        out = []
        kinds = list(rr.stats.kinds_seen)
        if kinds:
            rows = [
                [f'<span title="{h(_meaning(k))}">{h(k)}</span>']
                + [_rows_link(run_id, f"{k} {c}", mode=m, kind=k)
                   if (c := rr.stats.modes[m].kinds.get(k, 0) if m in rr.stats.modes else 0)
                   else "0" for m in modes]
                for k in kinds
            ]
            out += ["<h2>Violation kinds</h2>", _table(["kind", *modes], rows, cls="kinds")]
        for title, counters, key in (("Labels", rr.labels, "label"),
                                     ("Quantifier intensity", rr.intensities, "intensity")):
            values = sorted({v for c in counters.values() for v in c})
            rows = [
                [h(v)] + [_count_link(run_id, counters.get(m, Counter())[v], mode=m, **{key: v})
                          for m in modes]
                for v in values
            ]
            if rows:
                out += [f"<h2>{title}</h2>", _table([key, *modes], rows)]
        return out

    def _gold_section(self, stats: Any, modes: list[str]) -> list[str]:
        rows, warn = [], []
        for m in modes:
            ms = stats.modes.get(m)
            if ms is None:
                continue
            t = ms.tally
            if t.gold_n or t.recall_n or t.article_n:
                rows.append([h(m), *(h(cell) for cell in gold_cells(t))])
            for confidence, count in ms.answerability.items():
                warn.append(f"{m}: answerability fired on {count} rows ({confidence} confidence)")
        out = []
        if rows:
            out += ["<h2>Gold</h2>",
                    _table(["mode", *GOLD_COLUMNS], rows)]
        if warn:
            out += ["<h2>Answerability warnings</h2><ul>"
                    + "".join(f"<li>{h(w)}</li>" for w in warn) + "</ul>"]
        return out

    def _error_section(self, run_id: str, stats: Any) -> list[str]:
        rows = [
            [h(name), _rows_link(run_id, e.jobs, endpoint=name if name != "(none)" else ""),
             _rows_link(run_id, e.errors, endpoint=name if name != "(none)" else "", error="any")
             if e.errors else "0", h(e.retried), h(e.extra_attempts),
             h(fmt_ms(e.llm.quantile(0.5))), h(fmt_ms(e.llm.quantile(0.95)))]
            for name, e in sorted(stats.endpoints.items())
        ]
        out = ["<h2>Endpoints and errors</h2>",
               _table(["endpoint", "jobs", "errors", "retried", "extra attempts",
                       "LLM p50 ms", "LLM p95 ms"], rows)]
        if stats.errors:
            out.append(_table(["error", "rows"], (
                [h(text), _rows_link(run_id, c, error=text if text != "(no verdict)" else "any")]
                for text, c in stats.errors.most_common())))
        return out

    def _timing_section(self, stats: Any) -> list[str]:
        rows = [[h(label), h(s.count), *(h(fmt_ms(s.quantile(q))) for q in (0.5, 0.95, 0.99))]
                for key, label in STAGES if (s := stats.stages[key]).count]
        if not rows:
            return []
        return ["<h2>Stage timings (ms)</h2>", _table(["stage", "n", "p50", "p95", "p99"], rows)]

    # ----------------------------------------------------------------- rows

    def rows_page(self, run_id: str, q: Mapping[str, str]) -> Response:
        manifest, _, rr = self._run(run_id)
        f = {k: q.get(k, "").strip() for k in FILTERS}
        selected = rr.select(f)
        page = max(1, int(q["page"])) if q.get("page", "").isdigit() else 1
        pages = max(1, -(-len(selected) // PAGE_SIZE))
        page = min(page, pages)
        shown = selected[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
        rows = []
        for pos in shown:
            e = rr.entries[pos]
            rows.append([
                f'<a href="/runs/{h(quote(run_id))}/rows/{pos}">{pos}</a>',
                h(e.question_id), h(e.question), h(e.mode), h(e.sample_index),
                f'<span class="v-{h(e.verdict or "none")}">{h(e.verdict or "—")}</span>',
                h(e.label), h(" ".join(e.kinds)), h(e.intensity), h(e.endpoint),
                f'<span class="err">{h(e.error)}</span>',
            ])
        form = self._filter_form(rr, f)
        nav = " ".join(
            f'<a href="{h(_rows_url(run_id, **f, page=p))}">{label}</a>'
            for label, p in (("« first", 1), ("‹ prev", page - 1), ("next ›", page + 1),
                             ("last »", pages)) if 1 <= p <= pages and p != page
        )
        body = (
            f'<h1><a href="/runs/{h(quote(run_id))}">{h(run_id)}</a>{_badge(manifest)}: rows</h1>'
            f"{form}<p class=pager><span id=matched>{len(selected)}</span> of {len(rr.entries)} "
            f"rows match · page {page} of {pages} {nav}</p>"
            + _table(["#", "qid", "question", "mode", "i", "verdict", "label", "violations",
                      "intensity", "endpoint", "error"], rows, cls="rows")
        )
        return _page(f"rows of {run_id}", body)

    def _filter_form(self, rr: RunRows, f: dict[str, str]) -> str:
        modes = sorted(rr.stats.modes)
        choices = {
            "mode": modes,
            "verdict": [*Verdict, "none"],
            "label": sorted({v for c in rr.labels.values() for v in c if v != "(none)"}),
            "kind": sorted(rr.stats.kinds_seen),
            "intensity": sorted({v for c in rr.intensities.values() for v in c if v != "(none)"}),
            "endpoint": sorted(n for n in rr.stats.endpoints if n not in ("(none)", "(other)")),
        }
        fields = []
        for key, values in choices.items():
            if f[key] and f[key] not in values:
                values = [*values, f[key]]
            opts = "".join(
                f'<option value="{h(v)}"{" selected" if v == f[key] else ""}>{h(v)}</option>'
                for v in values)
            fields.append(f'<label>{key} <select name="{key}"><option value="">any</option>'
                          f"{opts}</select></label>")
        fields.append(f'<label>error <input name="error" value="{h(f["error"])}" '
                      'placeholder="any, or text"></label>')
        fields.append(f'<label>question <input name="q" value="{h(f["q"])}"></label>')
        return f'<form class="filters">{"".join(fields)}<button>filter</button></form>'

    # ----------------------------------------------------------------- row

    def row_page(self, run_id: str, pos: int) -> Response:
        manifest, _, rr = self._run(run_id)
        if pos >= len(rr.entries):
            raise NotFound(f"{run_id} has {len(rr.entries)} rows; no row {pos}")
        row = rr.row(pos)
        if row is None:
            raise NotFound(f"row {pos} of {run_id} is no longer readable")
        reread = reread_row(row, manifest, self.passages(), str(self.index_path or "(none given)"))
        return _page(f"row {pos} of {run_id}", render_row(run_id, pos, row, manifest, reread))

    # ----------------------------------------------------------------- compare

    def compare_page(self, a: str, b: str, floor_text: str) -> Response:
        ids = [*self.redis_run_ids(), *self.run_ids()]
        picker = "".join(
            f'<label>{side} <select name="{side}">'
            + "".join(f'<option value="{h(r)}"{" selected" if r == cur else ""}>{h(r)}</option>'
                      for r in ids)
            + "</select></label>"
            for side, cur in (("a", a), ("b", b or (ids[0] if ids else "")))
        )
        form = (f'<form class="filters">{picker}<label>floor (points) <input name="floor" '
                f'value="{h(floor_text)}" size=4></label><button>compare</button></form>')
        if not (a and b):
            return _page("compare", f"<h1>Compare two runs</h1>{form}")
        try:
            floor = float(floor_text)
        except ValueError:
            raise InputError(f"floor {floor_text!r} is not a number; give points, e.g. 5") from None
        check_floor(floor)
        (man_a, _, rr_a), (man_b, _, rr_b) = self._run(a), self._run(b)
        cmp = compare_runs(man_a, rr_a.stats, man_b, rr_b.stats, floor=floor)
        body = f"<h1>{h(a)}{_badge(man_a)} → {h(b)}{_badge(man_b)}</h1>{form}"
        body += render_comparison(cmp) + changed_verdicts(a, rr_a, b, rr_b)
        return _page(f"compare {a} {b}", body)
