"""The runs page (``/``): every run on disk and in Redis, with its progress and strict rates."""

from __future__ import annotations

from urllib.parse import quote

from qfarm.common.errors import InputError
from qfarm.common.reporting.report import fmt_pct, fmt_time
from qfarm.producer.viewer.html import REDIS_BADGE, NotFound, Response, h
from qfarm.producer.viewer.html import badge as _badge
from qfarm.producer.viewer.html import page as _page
from qfarm.producer.viewer.html import table as _table
from qfarm.producer.viewer.source import LIVE_STATES, RunSource, finished_at


def runs_page(src: RunSource) -> Response:
    rows = []
    for run_id in [*src.redis_run_ids(), *src.run_ids()]:
        try:
            manifest, status, rr = src.run(run_id)
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
        finished = finished_at(state, status, rr.stats.last_finished)
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
        + (_table(header, rows, cls="runs sortable") if rows else "<p>No runs yet.</p>")
    )
    return _page("runs", body)
