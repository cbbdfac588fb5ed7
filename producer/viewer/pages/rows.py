"""A run's rows page (``/runs/RUN/rows``): the rows, filtered, sorted and paged, and their
export (``/runs/RUN/rows.csv``, ``/runs/RUN/rows.jsonl``) with the same query."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from urllib.parse import quote, urlencode

from qfarm.common.reporting.report import fmt_ms
from qfarm.common.vocab import Verdict
from qfarm.producer.viewer.export import csv_rows, jsonl_rows
from qfarm.producer.viewer.html import Response, h
from qfarm.producer.viewer.html import badge as _badge
from qfarm.producer.viewer.html import page as _page
from qfarm.producer.viewer.html import rows_url as _rows_url
from qfarm.producer.viewer.index import (
    FILTERS,
    GOLD_VALUES,
    SORTS,
    RowEntry,
    RunRows,
    sort_positions,
)
from qfarm.producer.viewer.source import RunSource

PAGE_SIZE = 50
# The table's columns: (header, sort key or "" for landing order).
COLUMNS = (("#", ""), ("qid", "question_id"), ("question", "question"), ("mode", "mode"),
           ("i", "sample_index"), ("verdict", "verdict"), ("label", "label"),
           ("violations", "kinds"), ("intensity", "intensity"), ("endpoint", "endpoint"),
           ("latency ms", "latency"), ("tokens", "tokens"), ("gold", "gold"), ("error", "error"))
EXPORTS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson; charset=utf-8"}


def _selection(rr: RunRows, q: Mapping[str, str]) -> tuple[dict[str, str], str, bool, Sequence[int]]:
    """The query's filters, sort column and direction, and the positions they select."""
    f = {k: q.get(k, "").strip() for k in FILTERS}
    sort = q.get("sort", "")
    sort = sort if sort in SORTS else ""
    desc = q.get("desc", "") not in ("", "0")
    return f, sort, desc, sort_positions(rr.entries, rr.select(f), sort, desc)


def export_rows(src: RunSource, run_id: str, fmt: str, q: Mapping[str, str]) -> Response:
    """The rows the same query shows on the page, every page of them, streamed."""
    _, _, rr = src.run(run_id)
    *_, selected = _selection(rr, q)
    body = csv_rows(rr, selected) if fmt == "csv" else jsonl_rows(rr, selected)
    name = f"{run_id}-rows.{fmt}".replace('"', "")
    return Response(200, EXPORTS[fmt], b"", stream=body,
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


def rows_page(src: RunSource, run_id: str, q: Mapping[str, str]) -> Response:
    manifest, _, rr = src.run(run_id)
    f, sort, desc, selected = _selection(rr, q)
    page = max(1, int(q["page"])) if q.get("page", "").isdigit() else 1
    pages = max(1, -(-len(selected) // PAGE_SIZE))
    page = min(page, pages)
    shown = selected[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
    rows = [_cells(run_id, pos, rr.entries[pos]) for pos in shown]
    order = {"sort": sort, "desc": "1" if desc else ""}
    nav = " ".join(
        f'<a href="{h(_rows_url(run_id, **f, **order, page=p))}">{label}</a>'
        for label, p in (("« first", 1), ("‹ prev", page - 1), ("next ›", page + 1),
                         ("last »", pages)) if 1 <= p <= pages and p != page
    )
    query = urlencode({k: v for k, v in {**f, **order}.items() if v})
    base = f"/runs/{quote(run_id)}/rows"
    exports = " · ".join(
        f'<a id="export-{fmt}" href="{h(base)}.{fmt}{h("?" + query if query else "")}" '
        f'download>{fmt.upper()}</a>' for fmt in EXPORTS)
    head = "".join(f"<th>{_sort_link(run_id, f, name, key, sort, desc)}</th>"
                   for name, key in COLUMNS)
    body_rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    body = (
        f'<h1><a href="/runs/{h(quote(run_id))}">{h(run_id)}</a>{_badge(manifest)}: rows</h1>'
        f"{filter_form(rr, f, order)}<p class=pager><span id=matched>{len(selected)}</span> of "
        f"{len(rr.entries)} rows match · page {page} of {pages} {nav} · export these rows: "
        f"{exports}</p>"
        f'<table class="rows"><thead><tr>{head}</tr></thead><tbody>{body_rows}</tbody></table>'
    )
    return _page(f"rows of {run_id}", body)


def _cells(run_id: str, pos: int, e: RowEntry) -> list[str]:
    tokens = e.tokens
    gold = {True: '<span class="v-STRICT">match</span>', False: '<span class="v-none">miss</span>',
            None: "—"}[e.gold]
    return [
        f'<a href="/runs/{h(quote(run_id))}/rows/{pos}">{pos}</a>',
        h(e.question_id), h(e.question), h(e.mode), h(e.sample_index),
        f'<span class="v-{h(e.verdict or "none")}">{h(e.verdict or "—")}</span>',
        h(e.label), h(" ".join(e.kinds)), h(e.intensity), h(e.endpoint),
        h(fmt_ms(e.total_ms)) if e.total_ms is not None else "—",
        (f'<span title="{h(e.prompt_tokens or 0)} prompt + {h(e.completion_tokens or 0)} '
         f'completion">{h(tokens)}</span>') if tokens is not None else "—",
        gold,
        f'<span class="err">{h(e.error)}</span>',
    ]


def _sort_link(run_id: str, f: dict[str, str], name: str, key: str, sort: str,
               desc: bool) -> str:
    """A header that sorts by its column; clicked again, the other way."""
    current = key == sort
    arrow = (" ▼" if desc else " ▲") if current else ""
    flip = "" if current and desc else ("1" if current else "")
    url = _rows_url(run_id, **f, sort=key, desc=flip)
    return f'<a class="sort" data-sort="{h(key)}" href="{h(url)}">{h(name)}{arrow}</a>'


def filter_form(rr: RunRows, f: dict[str, str], order: dict[str, str]) -> str:
    modes = sorted(rr.stats.modes)
    choices = {
        "mode": modes,
        "verdict": [*Verdict, "none"],
        "label": sorted({v for c in rr.labels.values() for v in c if v != "(none)"}),
        "kind": sorted(rr.stats.kinds_seen),
        "intensity": sorted({v for c in rr.intensities.values() for v in c if v != "(none)"}),
        "endpoint": sorted(n for n in rr.stats.endpoints if n not in ("(none)", "(other)")),
        "gold": list(GOLD_VALUES),
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
    fields.append(f'<label>question or answer <input name="q" value="{h(f["q"])}"></label>')
    fields.append(f'<label>question id <input name="qid" value="{h(f["qid"])}" size=10>'
                  "</label>")
    fields.append('<label title="errors, UNGROUNDED verdicts and missed gold answers">'
                  f'<input type="checkbox" name="failures" value="1"'
                  f'{" checked" if f["failures"] else ""}> failures only</label>')
    fields += [f'<input type="hidden" name="{k}" value="{h(v)}">' for k, v in order.items() if v]
    return f'<form class="filters">{"".join(fields)}<button>filter</button></form>'
