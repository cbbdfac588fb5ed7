"""A run's rows page (``/runs/RUN/rows``): the rows, filtered and paged."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

from qfarm.common.vocab import Verdict
from qfarm.producer.viewer.html import Response, h
from qfarm.producer.viewer.html import badge as _badge
from qfarm.producer.viewer.html import page as _page
from qfarm.producer.viewer.html import rows_url as _rows_url
from qfarm.producer.viewer.html import table as _table
from qfarm.producer.viewer.index import FILTERS, RunRows
from qfarm.producer.viewer.source import RunSource

PAGE_SIZE = 50


def rows_page(src: RunSource, run_id: str, q: Mapping[str, str]) -> Response:
    manifest, _, rr = src.run(run_id)
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
    form = filter_form(rr, f)
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


def filter_form(rr: RunRows, f: dict[str, str]) -> str:
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
