"""The compare page's pieces: the comparison as tables, and the verdicts that changed."""

from __future__ import annotations

from urllib.parse import quote

from qfarm.common.reporting.compare import Comparison
from qfarm.common.reporting.phase import phase_line
from qfarm.producer.viewer.html import h, inline, json_value, table
from qfarm.producer.viewer.index import RunRows
from qfarm.producer.viewer.svg import ForestItem, forest


def _pct_or_ratio(metric_is_rate: bool, x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.1f}%" if metric_is_rate else f"{x:.3f}"


def render_comparison(cmp: Comparison) -> str:
    out = []
    if cmp.warnings:
        out.append('<div class="warn"><b>Warnings</b><ul>'
                   + "".join(f"<li>{inline(w)}</li>" for w in cmp.warnings) + "</ul></div>")
    rows = [
        [h(d.mode), h(d.metric.label), h(_pct_or_ratio(d.metric.is_rate, d.a)),
         h(_pct_or_ratio(d.metric.is_rate, d.b)),
         h("—" if d.delta is None else f"{d.delta:+.1f}"),
         h("—" if d.low is None or d.high is None else f"[{d.low:+.1f}, {d.high:+.1f}]"),
         h(f"{d.n_a}/{d.n_b}"), h(d.method),
         f'<span class="{h(d.effect if d.verdict == "signal" else "noise")}">'
         f"{h(d.verdict)} {h(d.effect if d.verdict == 'signal' else '')}</span>"]
        for d in cmp.deltas
    ]
    items = [ForestItem(f"{d.mode} · {d.metric.label}", d.delta, d.low, d.high,
                        d.effect if d.verdict == "signal" else "")
             for d in cmp.deltas if d.delta is not None and d.low is not None
             and d.high is not None]
    plot = (f"<figure>{forest('forest-plot', items, cmp.floor, deltas_title(cmp))}</figure>"
            if items else "")
    out += [f"<h2>Per mode and metric (floor ±{cmp.floor:g} points)</h2>", plot,
            table(["mode", "metric", "A", "B", "Δ points", "95% interval", "n A/B", "method",
                    "signal / noise"], rows, cls="compare")]
    if cmp.phase is not None:
        decision = [phase_line(cmp.phase)]
        out.append("<h2>Quantifier phase decision</h2><ul>"
                   + "".join(f"<li>{inline(x)}</li>" for x in decision + [cmp.phase.note] if x)
                   + f"</ul><p>Rule: {inline(cmp.phase.rule)}.</p>")
    # policy values in the policy's own spelling (true/false, null), never Python's
    changes = [f"<code>{h(k)}</code>: {h(json_value(va))} → {h(json_value(vb))}"
               for k, (va, vb) in cmp.policy_changes.items()]
    what = changes + [inline(n) for n in cmp.notes] + [f"mixed: {inline(m)}" for m in cmp.mixed]
    if what:
        out.append("<h2>What changed</h2><ul>" + "".join(f"<li>{w}</li>" for w in what)
                   + "</ul>")
    if cmp.kind_shifts:
        out.append("<h2>Violation kinds</h2>" + table(
            ["mode", "kind", "A", "B", "Δ points"],
            ([h(s.mode), h(s.kind), h(f"{s.count_a} ({_pct_or_ratio(True, s.a)})"),
              h(f"{s.count_b} ({_pct_or_ratio(True, s.b)})"),
              h("—" if s.delta is None else f"{s.delta:+.1f}")] for s in cmp.kind_shifts)))
    return "".join(out)


def deltas_title(cmp: Comparison) -> str:
    return (f"{cmp.run_a} → {cmp.run_b}: each delta (B − A, points) with its 95% interval "
            f"against the ±{cmp.floor:g}-point floor; green a better signal, red a worse, grey "
            "noise")


def changed_verdicts(a: str, rr_a: RunRows, b: str, rr_b: RunRows, limit: int = 500) -> str:
    """Rows of the same (question, mode, sample) whose verdict differs between A and B."""
    in_a = {(e.question_id, e.mode, e.sample_index): i for i, e in enumerate(rr_a.entries)}
    rows: list[list[str]] = []
    total = 0
    for j, e in enumerate(rr_b.entries):
        i = in_a.get((e.question_id, e.mode, e.sample_index))
        if i is None or rr_a.entries[i].verdict == e.verdict:
            continue
        total += 1
        if len(rows) < limit:
            va = rr_a.entries[i].verdict or "error"
            rows.append([
                h(e.question_id), h(e.question), h(e.mode), h(e.sample_index),
                f'<a href="/runs/{h(quote(a))}/rows/{i}">{h(va)}</a>',
                f'<a href="/runs/{h(quote(b))}/rows/{j}">{h(e.verdict or "error")}</a>',
            ])
    head = f"<h2>Verdicts that changed ({total})</h2>"
    if not rows:
        return head + "<p>None among the questions both runs share.</p>"
    more = f"<p>First {limit} shown.</p>" if total > limit else ""
    return head + more + table(["qid", "question", "mode", "i", "A", "B"], rows, cls="changed")
