"""The compare page (``/compare?a=RUN&b=RUN``): two runs side by side, with the verdicts
that changed."""

from __future__ import annotations

from qfarm.common.errors import InputError
from qfarm.common.reporting.compare import compare_runs
from qfarm.producer.reports.compare import check_floor
from qfarm.producer.rundir import is_ask_run, question_set_name
from qfarm.producer.viewer.compare import changed_verdicts, render_comparison
from qfarm.producer.viewer.html import Response, h
from qfarm.producer.viewer.html import badge as _badge
from qfarm.producer.viewer.html import page as _page
from qfarm.producer.viewer.source import RunSource


def compare_page(src: RunSource, a: str, b: str, floor_text: str) -> Response:
    # Sweeps only: single questions (qfarm ask) are runs of one job, nothing to compare.
    ids = [r for r in (*src.redis_run_ids(), *src.run_ids()) if not is_ask_run(r)]
    note = ""
    if not (a or b):
        a, b = src.proposed_pair(ids)
        if a:
            manifest = src.manifest(b)
            name = question_set_name(manifest.question_file) if manifest else "?"
            note = (f'<p class="note" id="proposed">Proposed: the two most recent sweeps over '
                    f"the same question file ({h(name)}).</p>")
        form = _form(ids, a, b or (ids[0] if ids else ""), floor_text)
        return _page("compare", f"<h1>Compare two runs</h1>{note}{form}")
    form = _form(ids, a, b or (ids[0] if ids else ""), floor_text)
    if not (a and b):
        return _page("compare", f"<h1>Compare two runs</h1>{form}")
    try:
        floor = float(floor_text)
    except ValueError:
        raise InputError(f"floor {floor_text!r} is not a number; give points, e.g. 5") from None
    check_floor(floor)
    (man_a, _, rr_a), (man_b, _, rr_b) = src.run(a), src.run(b)
    cmp = compare_runs(man_a, rr_a.stats, man_b, rr_b.stats, floor=floor)
    body = f"<h1>{h(a)}{_badge(man_a)} → {h(b)}{_badge(man_b)}</h1>{form}"
    body += render_comparison(cmp) + changed_verdicts(a, rr_a, b, rr_b)
    return _page(f"compare {a} {b}", body)


def _form(ids: list[str], a: str, b: str, floor_text: str) -> str:
    picker = "".join(
        f'<label>{side} <select name="{side}">'
        + "".join(f'<option value="{h(r)}"{" selected" if r == cur else ""}>{h(r)}</option>'
                  for r in ids)
        + "</select></label>"
        for side, cur in (("a", a), ("b", b))
    )
    return (f'<form class="filters">{picker}<label>floor (points) <input name="floor" '
            f'value="{h(floor_text)}" size=4></label><button>compare</button></form>')
