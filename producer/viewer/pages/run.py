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
    policy_overrides,
    run_warnings,
    selected_questions,
)
from qfarm.common.reporting.runstats import NO_VERDICT, STAGES, UNKNOWN_KIND
from qfarm.common.runstatus import StatusRecord, status_text
from qfarm.common.vocab import Verdict
from qfarm.producer.reports.exports import export_lines, read_exports
from qfarm.producer.reports.summary import LATENCY_PLOT, STRICT_PLOT
from qfarm.producer.rundir import question_set_name
from qfarm.producer.viewer.html import REDIS_BADGE, Response, h, inline, json_value, rows_url
from qfarm.producer.viewer.html import badge as _badge
from qfarm.producer.viewer.html import count_link as _count_link
from qfarm.producer.viewer.html import meaning as _meaning
from qfarm.producer.viewer.html import page as _page
from qfarm.producer.viewer.html import rows_link as _rows_link
from qfarm.producer.viewer.html import table as _table
from qfarm.producer.viewer.index import RunRows
from qfarm.producer.viewer.source import LIVE_STATES, RunSource, finished_at
from qfarm.producer.viewer.svg import OUTCOME_COLORS as OUTCOMES
from qfarm.producer.viewer.svg import Segment, grouped_bars, heatmap, verdict_bars


def run_page(src: RunSource, run_id: str) -> Response:
    manifest, status, rr = src.run(run_id)
    stats, modes = rr.stats, rr.stats.mode_order(manifest.modes)
    state = str(status.status or "")
    errored = stats.error_rows
    shown = status_text(state, errored=errored, rows=stats.rows) if state else ""
    facts = [
        ("question file", f"{h(question_set_name(manifest.question_file))} "
                          f'<span class="note">{h(manifest.question_file)}</span>'),
        ("modes × n", h(f"{', '.join(manifest.modes)} × {manifest.n} ({manifest.n_jobs} jobs)")),
        ("model", h(f"{manifest.model} (profile {manifest.model_profile_id})")),
        ("retriever", h(f"{manifest.retriever} {manifest.index_version or ''}")),
        ("policy overrides", overrides_html(manifest)),
        ("status", f'<span class="status{" errored" if errored else ""}" data-run="{h(run_id)}" '
                   f'data-live="{int(state in LIVE_STATES)}">{h(shown or "—")}</span> '
                   f'<span class="count">{stats.rows}/{manifest.n_jobs}</span> rows'
                   + (" · " + _rows_link(run_id, error_phrase(errored, stats.rows),
                                         verdict="none") if errored else "")),
        ("started", h(fmt_time(status.started_at or manifest.created_at))),
        ("finished", h(fmt_time(finished_at(state, status, stats.last_finished)))),
        ("answers kept", "yes" if manifest.keep_answers else "no (run with --keep-answers)"),
    ]
    exports = export_lines(read_exports(src.results_dir / run_id))
    if exports:  # where else this run can be read (qfarm export; exports.json)
        facts.append(("exported to", "<br>".join(h(line) for line in exports)))
    in_redis = status.source == "redis"
    if in_redis:
        facts.append(("read from", "Redis: this run has no directory in "
                      f"{h(src.results_dir)} (yet)"))
    out = [f"<h1>Run {h(run_id)}{_badge(manifest)}{REDIS_BADGE if in_redis else ''}</h1>",
           _table(["", ""], ([h(k), v] for k, v in facts), cls="facts")]
    notes = [line[2:] for line in run_warnings(manifest, stats, state or None)
             if line.startswith("- ")]
    if notes:
        out.append('<div class="warn"><b>Warnings</b><ul>'
                   + "".join(f"<li>{inline(n)}</li>" for n in notes) + "</ul></div>")
    out += mode_section(run_id, stats, modes)
    out += kind_section(run_id, rr, modes)
    out += dry_run_section(manifest, stats, modes)
    out += question_section(run_id, stats, modes)
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
    bars = [(m, [Segment(name, count) for name, count in _outcomes(stats, m)]) for m in modes]
    plot = verdict_bars("verdict-plot", bars, "Verdicts per mode: every row of each mode, "
                        "by outcome (STRICT, HYBRID, UNGROUNDED, error)")
    return ["<h2>Verdicts per mode</h2>", _table(header, rows, cls="verdicts"),
            f'<p class="note">{h(DENOMINATORS_NOTE)}</p>', f'<figure>{plot}</figure>']


def _outcomes(stats: Any, mode: str) -> list[tuple[str, int]]:
    """A mode's rows by outcome: its verdicts, and its error rows (no verdict)."""
    ms = stats.modes.get(mode)
    t = ms.tally if ms is not None else None
    if t is None:
        return []
    return list(zip(OUTCOMES, (t.strict, t.hybrid, t.ungrounded, t.errors), strict=True))


def overrides_html(manifest: Any) -> str:
    """The policy fields the run set away from the defaults, as ``--policy`` spells them:
    what tells a caps-only run from a reminder-only one."""
    overrides = policy_overrides(manifest.policy)
    if not overrides:
        return '<span class="note">none (defaults)</span>'
    return " ".join(f'<code class="override">{h(k)}={h(json_value(v))}</code>'
                    for k, v in overrides.items())


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
        valid = [rr.stats.modes[m].tally.valid if m in rr.stats.modes else 0 for m in modes]
        groups = [(k, [(rr.stats.modes[m].kinds.get(k, 0) if m in rr.stats.modes else 0, n)
                       for m, n in zip(modes, valid, strict=True)]) for k in kinds]
        plot = grouped_bars("kinds-plot", modes, groups, "Violation kinds: the share of each "
                            "mode's answered rows carrying each kind")
        out += ["<h2>Violation kinds</h2>", _table(["kind", *modes], rows, cls="kinds"),
                f"<figure>{plot}</figure>"]
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


def cost_section(manifest: Any, stats: Any, status: StatusRecord) -> list[str]:
    """What the run cost: the summary's table (qfarm.common.reporting.cost), so far while it runs."""
    from qfarm.common.reporting.cost import (
        COST_HEADER,
        cost_cells,
        cost_lines,
        cost_notes,
        price_note,
    )
    from qfarm.common.reporting.report import run_wall_s

    wall = run_wall_s(manifest, stats, status.finished_at, status.time_paused())
    lines = cost_lines(stats.cost, manifest.cost_rates, wall, stats.mode_order(manifest.modes))
    if not lines[0].rows:
        return []
    title = "What the run cost" + (" (SIMULATED)" if manifest.simulated else "")
    notes = [price_note(manifest.cost_rates), *cost_notes(stats.cost)]
    return [f"<h2>{title}</h2>",
            _table(COST_HEADER, ([h(c) for c in cost_cells(line, manifest.cost_rates.currency)]
                                 for line in lines), cls="cost"),
            "".join(f"<p class=note>{inline(n)}</p>" for n in notes)]


def timing_section(stats: Any) -> list[str]:
    rows = [[h(label), h(s.count), *(h(fmt_ms(s.quantile(q))) for q in (0.5, 0.95, 0.99))]
            for key, label in STAGES if (s := stats.stages[key]).count]
    if not rows:
        return []
    return ["<h2>Stage timings (ms)</h2>", _table(["stage", "n", "p50", "p95", "p99"], rows)]


def dry_run_section(manifest: Any, stats: Any, modes: list[str]) -> list[str]:
    """Guard on, caps off: the broad-quantifier kinds the guard would have fired, and the
    STRICT rows applying caps would demote (the summary's "Quantifier guard dry run")."""
    policy = manifest.policy
    if not policy.quantifier_guard_enabled or policy.quantifier_guard_apply_caps:
        return []
    out = ["<h2>Quantifier guard dry run</h2>",
           "<p class=note>Caps are off, so the guard only observes: these are the kinds it "
           "would have fired (each row's <code>would_fire_kinds</code>); no verdict, label or "
           "rate above counts them. \"STRICT it would demote\" is the STRICT rows carrying a "
           "kind that soft-demotes once caps are applied: the strict-rate "
           "<code>--apply-quantifier-caps</code> would cost on these same answers.</p>"]
    kinds = sorted(stats.would_fire_seen)
    if not kinds:
        return out + ["<p>No row would have fired a broad-quantifier kind.</p>"]
    rows = []
    for m in modes:
        ms = stats.modes.get(m)
        valid = ms.tally.valid if ms is not None else 0
        cells = [h(f"{ms.would_fire[k]} ({fmt_pct(ms.would_fire[k], valid, interval=False)})")
                 if ms is not None and valid else "—" for k in kinds]
        demote = (h(f"{ms.would_demote_strict} "
                    f"({fmt_pct(ms.would_demote_strict, valid, interval=False)})")
                  if ms is not None and valid else "—")
        guarded = "yes" if m in policy.quantifier_guard_modes else "no"
        rows.append([h(m), guarded, *cells, demote])
    return out + [_table(["mode", "guarded", *kinds, "STRICT it would demote"], rows,
                         cls="dry-run")]


def question_section(run_id: str, stats: Any, modes: list[str]) -> list[str]:
    """Each question's outcomes per mode: a heatmap, and the summary's table beside it;
    a cell opens that question's rows in that mode."""
    selected, note = selected_questions(stats)
    if not selected:
        return []
    names = list(OUTCOMES)

    def counts(q: Any, m: str) -> dict[str, int] | None:
        t = q.cells.get(m)
        return None if t is None else dict(zip(names, (t.strict, t.hybrid, t.ungrounded,
                                                       t.errors), strict=True))

    plot = heatmap("question-heatmap", modes,
                   [(f"{q.order + 1}. {q.text}", [counts(q, m) for m in modes])
                    for _, q in selected],
                   "Outcomes per question and mode: each cell's most frequent outcome",
                   [[rows_url(run_id, qid=qid, mode=m) for m in modes] for qid, _ in selected])
    rows = [[h(q.order + 1), _rows_link(run_id, q.text, qid=qid), h(qid),
             *(_rows_link(run_id, _cell(q.cells[m]), qid=qid, mode=m) if m in q.cells else "—"
               for m in modes)] for qid, q in selected]
    return ["<h2>Per question</h2>", f"<p class=note>{h(note)}</p>" if note else "",
            f'<figure class="heatmap">{plot}</figure>',
            "<details><summary>The numbers (cells: STRICT/HYBRID/UNGROUNDED/errors)</summary>"
            + _table(["#", "question", "id", *modes], rows, cls="questions") + "</details>"]


def _cell(t: Any) -> str:
    return "—" if t is None else f"{t.strict}/{t.hybrid}/{t.ungrounded}/{t.errors}"
