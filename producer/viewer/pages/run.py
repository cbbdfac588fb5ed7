"""A run's page (``/runs/RUN``): its facts, warnings, verdicts per mode, violation kinds,
labels, gold, endpoints and errors, stage timings and plots."""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import quote

from qfarm.common.reporting.report import (
    DENOMINATORS_NOTE,
    ERROR_RATE,
    GOLD_COLUMNS,
    STRICT_OF_JOBS,
    error_phrase,
    fmt_ms,
    fmt_num,
    fmt_pct,
    fmt_time,
    gold_cells,
    run_warnings,
)
from qfarm.common.reporting.runstats import NO_VERDICT, STAGES, UNKNOWN_KIND
from qfarm.common.runstatus import status_text
from qfarm.common.vocab import Verdict
from qfarm.producer.reports import LATENCY_PLOT, STRICT_PLOT
from qfarm.producer.runs import question_set_name
from qfarm.producer.viewer.html import REDIS_BADGE, Response, h
from qfarm.producer.viewer.html import badge as _badge
from qfarm.producer.viewer.html import count_link as _count_link
from qfarm.producer.viewer.html import meaning as _meaning
from qfarm.producer.viewer.html import page as _page
from qfarm.producer.viewer.html import rows_link as _rows_link
from qfarm.producer.viewer.html import table as _table
from qfarm.producer.viewer.index import RunRows
from qfarm.producer.viewer.source import LIVE_STATES, RunSource, finished_at


def run_page(src: RunSource, run_id: str) -> Response:
    manifest, status, rr = src.run(run_id)
    stats, modes = rr.stats, rr.stats.mode_order(manifest.modes)
    state = str(status.get("status") or "")
    errored = stats.error_rows
    shown = status_text(state, errored=errored, rows=stats.rows) if state else ""
    facts = [
        ("question file", f"{h(question_set_name(manifest.question_file))} "
                          f'<span class="note">{h(manifest.question_file)}</span>'),
        ("modes × n", h(f"{', '.join(manifest.modes)} × {manifest.n} ({manifest.n_jobs} jobs)")),
        ("model", h(f"{manifest.model} (profile {manifest.model_profile_id})")),
        ("retriever", h(f"{manifest.retriever} {manifest.index_version or ''}")),
        ("status", f'<span class="status{" errored" if errored else ""}" data-run="{h(run_id)}" '
                   f'data-live="{int(state in LIVE_STATES)}">{h(shown or "—")}</span> '
                   f'<span class="count">{stats.rows}/{manifest.n_jobs}</span> rows'
                   + (" · " + _rows_link(run_id, error_phrase(errored, stats.rows),
                                         verdict="none") if errored else "")),
        ("started", h(fmt_time(status.get("started_at") or manifest.created_at))),
        ("finished", h(fmt_time(finished_at(state, status, stats.last_finished)))),
        ("answers kept", "yes" if manifest.keep_answers else "no (run with --keep-answers)"),
    ]
    in_redis = status.get("source") == "redis"
    if in_redis:
        facts.append(("read from", "Redis: this run has no directory in "
                      f"{h(src.results_dir)} (yet)"))
    out = [f"<h1>Run {h(run_id)}{_badge(manifest)}{REDIS_BADGE if in_redis else ''}</h1>",
           _table(["", ""], ([h(k), v] for k, v in facts), cls="facts")]
    notes = [line[2:] for line in run_warnings(manifest, stats, state or None)
             if line.startswith("- ")]
    if notes:
        out.append('<div class="warn"><b>Warnings</b><ul>'
                   + "".join(f"<li>{h(n)}</li>" for n in notes) + "</ul></div>")
    out += mode_section(run_id, stats, modes)
    out += kind_section(run_id, rr, modes)
    out += gold_section(stats, modes)
    out += error_section(run_id, stats)
    out += timing_section(stats)
    out += cost_section(manifest, stats, status)
    plots = [p for p in (STRICT_PLOT, LATENCY_PLOT) if (src.results_dir / run_id / p).is_file()]
    out.append("<h2>Plots</h2>" + ("".join(
        f'<img src="/runs/{h(quote(run_id))}/files/{p}" alt="{p}">' for p in plots)
        or (f"<p class=note>No plots yet: <code>qfarm report {h(run_id)}</code> draws them.</p>"
            if not in_redis else
            "<p class=note>No plots: they are drawn into the run's directory, which the "
            "run's follower writes.</p>")))
    return _page(f"run {run_id}", "".join(out))


def mode_section(run_id: str, stats: Any, modes: list[str]) -> list[str]:
    rows = []
    for m in modes:
        t = stats.modes[m].tally if m in stats.modes else None
        if t is None:
            rows.append([h(m)] + ["0"] + ["—"] * 7)
            continue
        rows.append([
            h(m),
            _rows_link(run_id, t.rows, mode=m),
            _rows_link(run_id, t.errors, mode=m, verdict="none") if t.errors else "0",
            h(fmt_pct(t.strict, t.rows, clusters=stats.clusters(m, "strict_of_jobs"))),
            h(fmt_pct(t.errors, t.rows, clusters=stats.clusters(m, "errors"))),
            *(
                f"{_rows_link(run_id, k, mode=m, verdict=v)} · "
                f"{h(fmt_pct(k, t.valid, clusters=stats.clusters(m, key)))}"
                for v, k, key in ((Verdict.STRICT, t.strict, "strict"),
                                  (Verdict.HYBRID, t.hybrid, "hybrid"),
                                  (Verdict.UNGROUNDED, t.ungrounded, "ungrounded"))
            ),
            h(fmt_num(t.ratio.mean, 3)),
        ])
    header = ["mode", "jobs", "errors", STRICT_OF_JOBS, ERROR_RATE,
              f"{Verdict.STRICT} (of answered, 95% CI)", f"{Verdict.HYBRID} (of answered)",
              f"{Verdict.UNGROUNDED} (of answered)", "mean ratio (of answered)"]
    return ["<h2>Verdicts per mode</h2>", _table(header, rows, cls="verdicts"),
            f'<p class="note">{h(DENOMINATORS_NOTE)}</p>']


def kind_section(run_id: str, rr: RunRows, modes: list[str]) -> list[str]:
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


def gold_section(stats: Any, modes: list[str]) -> list[str]:
    rows, warn = [], []
    for m in modes:
        ms = stats.modes.get(m)
        if ms is None:
            continue
        t = ms.tally
        if t.gold_n or t.recall_n or t.article_n:
            rows.append([h(m), *(h(cell) for cell in gold_cells(t, stats, m))])
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


def error_section(run_id: str, stats: Any) -> list[str]:
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
        out.append(_table(["error kind", "rows", "e.g."], (
            [h(kind), _rows_link(run_id, c, **_error_filter(kind)),
             h(stats.error_examples.get(kind, ""))]
            for kind, c in stats.errors.most_common())))
    return out


def _error_filter(kind: str) -> dict[str, str]:
    """The rows filter for one group of the error table (``RunStats.errors``)."""
    if kind == NO_VERDICT:
        return {"verdict": "none"}
    if kind == UNKNOWN_KIND:
        return {"error": "any"}
    return {"error_kind": kind}


def cost_section(manifest: Any, stats: Any, status: dict[str, Any]) -> list[str]:
    """What the run cost: the summary's table (qfarm.common.reporting.cost), so far while it runs."""
    from qfarm.common.reporting.cost import (
        COST_HEADER,
        cost_cells,
        cost_lines,
        cost_notes,
        price_note,
    )
    from qfarm.common.reporting.report import recorded_pause_s, run_wall_s

    end = status.get("finished_at")
    wall = run_wall_s(manifest, stats, float(end) if isinstance(end, int | float) else None,
                      recorded_pause_s(status))
    lines = cost_lines(stats.cost, manifest.cost_rates, wall, stats.mode_order(manifest.modes))
    if not lines[0].rows:
        return []
    title = "What the run cost" + (" (SIMULATED)" if manifest.simulated else "")
    notes = [price_note(manifest.cost_rates), *cost_notes(stats.cost)]
    return [f"<h2>{title}</h2>",
            _table(COST_HEADER, ([h(c) for c in cost_cells(line, manifest.cost_rates.currency)]
                                 for line in lines), cls="cost"),
            "".join(f"<p class=note>{h(n)}</p>" for n in notes)]


def timing_section(stats: Any) -> list[str]:
    rows = [[h(label), h(s.count), *(h(fmt_ms(s.quantile(q))) for q in (0.5, 0.95, 0.99))]
            for key, label in STAGES if (s := stats.stages[key]).count]
    if not rows:
        return []
    return ["<h2>Stage timings (ms)</h2>", _table(["stage", "n", "p50", "p95", "p99"], rows)]
