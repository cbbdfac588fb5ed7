"""The runs page (``/``): every run on disk and in Redis, with its progress and strict rates
(over the jobs, an error row a failure, and over the answered rows)."""

from __future__ import annotations

from urllib.parse import quote

from qfarm.common.errors import InputError
from qfarm.common.reporting.report import fmt_pct, fmt_time
from qfarm.common.reporting.runstats import Tally
from qfarm.common.runstatus import status_text
from qfarm.producer.rundir import is_ask_run, question_set_name
from qfarm.producer.viewer.html import REDIS_BADGE, NotFound, Response, h
from qfarm.producer.viewer.html import badge as _badge
from qfarm.producer.viewer.html import page as _page
from qfarm.producer.viewer.html import table as _table
from qfarm.producer.viewer.pages.run import overrides_html
from qfarm.producer.viewer.source import LIVE_STATES, RunSource, finished_at

ASKS_SHOWN = 50  # single questions listed (newest first); each is a Redis read


def runs_page(src: RunSource) -> Response:
    ids = [*src.redis_run_ids(), *src.run_ids()]
    # Newest first across both sources (a run only in Redis is no newer for being there); a
    # run that cannot be read sorts last.
    listed = sorted((_run_row(src, r) for r in ids if not is_ask_run(r)),
                    key=lambda t: (t[0] is not None, t[0] or 0.0), reverse=True)
    sweeps = [cells for _, cells in listed]
    asks = sorted((r for r in ids if is_ask_run(r)), reverse=True)
    header = ["run", "question set", "modes × n", "policy overrides", "status", "started",
              "finished", "strict-rate per mode (of jobs; of answered)"]
    if src.redis.note:
        source = f'<p class="note" id="redis-note">{h(src.redis.note)}</p>'
    elif not src.redis.configured:
        source = ('<p class="note" id="redis-note">No Redis configured: only the runs on disk '
                  "are listed.</p>")
    else:
        source = ""
    body = (
        f"<h1>Runs in {h(src.results_dir)}</h1>{source}"
        '<p><input id="filter" placeholder="filter runs" autocomplete="off"></p>'
        + (_table(header, sweeps, cls="runs sortable") if sweeps else "<p>No sweeps yet.</p>")
        + _asks_section(src, asks)
    )
    return _page("runs", body)


def _asks_section(src: RunSource, asks: list[str]) -> str:
    """Single questions (``qfarm ask``, POST /v1/ask), apart from the sweeps they would bury."""
    if not asks:
        return ""
    rows = []
    for run_id in asks[:ASKS_SHOWN]:
        try:
            manifest, status, rr = src.run(run_id)
        except (InputError, NotFound) as exc:
            rows.append([h(run_id), f'<span class="err">{h(exc)}</span>', "", "", "", ""])
            continue
        e = rr.entries[0] if rr.entries else None
        rows.append([
            f'<a href="/runs/{h(quote(run_id))}{"/rows/0" if e else ""}">{h(run_id)}</a>'
            + _badge(manifest),
            h(e.question if e else "—"),
            h(", ".join(manifest.modes)),
            _status(str(status.status or ""), rr.stats.error_rows, rr.stats.rows),
            f'<span class="v-{h(e.verdict or "none")}">{h(e.verdict or "—")}</span>'
            + (f" · {h(e.label)}" if e and e.label else "") if e else "—",
            h(fmt_time(status.started_at or manifest.created_at)),
        ])
    more = (f"<p class=note>The {ASKS_SHOWN} most recent of {len(asks)}.</p>"
            if len(asks) > ASKS_SHOWN else "")
    return (f'<h2 id="asks">Single questions ({len(asks)})</h2>'
            "<p class=note>Runs of one question (<code>qfarm ask</code>, POST /v1/ask), kept "
            "apart from the sweeps.</p>" + more
            + _table(["run", "question", "mode", "status", "verdict", "asked"], rows,
                     cls="asks sortable"))


def strict_rates(t: Tally) -> str:
    """A mode's strict-rate over its jobs (an error row a failure), the rate over the
    answered rows beside it: ``40.0% of 60 jobs (57.1% of 42 answered)``."""
    of_jobs = f"{fmt_pct(t.strict, t.rows, interval=False)} of {t.rows} jobs"
    if not t.errors:
        return of_jobs
    return f"{of_jobs} ({fmt_pct(t.strict, t.valid, interval=False)} of {t.valid} answered)"


def _status(state: str, errored: int, rows: int, live_run: str = "") -> str:
    """The run's status as every surface words it ("completed with errors (N, x %)"), red
    when rows errored; with ``live_run``, polled while the run is live."""
    shown = status_text(state, errored=errored, rows=rows) if state else ""
    live = (f' data-run="{h(live_run)}" data-live="{int(state in LIVE_STATES)}"'
            if live_run else "")
    return (f'<span class="status{" errored" if errored else ""}"{live}>{h(shown or "—")}'
            "</span>")


def _run_row(src: RunSource, run_id: str) -> tuple[float | None, list[str]]:
    """When the run started, and its line of the table."""
    try:
        manifest, status, rr = src.run(run_id)
    except (InputError, NotFound) as exc:
        return None, [h(run_id), f'<span class="err">{h(exc)}</span>'] + [""] * 6
    state = str(status.status or "")
    in_redis = status.source == "redis"
    done = status.rows or 0 if in_redis else rr.stats.rows
    bar = (
        f'<progress max="{manifest.n_jobs}" value="{done}"></progress> '
        f'<span class="count">{done}/{manifest.n_jobs}</span>'
    )
    rates = "<br>".join(
        f"{h(m)}: {strict_rates(ms.tally)}"
        for m in rr.stats.mode_order(manifest.modes)
        # a mode with no row yet (no rows.jsonl after --detach, a run just begun) has no rate
        if (ms := rr.stats.modes.get(m)) is not None
    )
    started = status.started_at or manifest.created_at
    finished = finished_at(state, status, rr.stats.last_finished)
    return started, [
        f'<a href="/runs/{h(quote(run_id))}">{h(run_id)}</a>{_badge(manifest)}'
        + (REDIS_BADGE if in_redis else ""),
        f'<span title="{h(manifest.question_file)}">'
        f"{h(question_set_name(manifest.question_file))}</span>",
        h(f"{', '.join(manifest.modes)} × {manifest.n}"),
        overrides_html(manifest),
        f"{_status(state, rr.stats.error_rows, rr.stats.rows, run_id)} {bar}",
        h(fmt_time(started)),
        h(fmt_time(finished)),
        rates or "—",
    ]
