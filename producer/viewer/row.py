"""The row page: preflight, the answer claim by claim, the evidence with matched spans, timings.

The claims, their results and the spans come from ``reread_row`` (the verifier
run again on the kept answer and the passages read back from the index); the
page says whether that reproduces the row, and when it does not, the row's own
figures stand and the recomputed ones are labelled as such. Passage text and
answers are untrusted: every piece is escaped, highlights included.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from qfarm.common.grounding.verify.spans import Span, claim_spans
from qfarm.common.grounding.verify.verdict import display_label
from qfarm.common.models import Claim, Evidence, Label, Manifest, Mode, ViolationKind
from qfarm.common.reporting.report import fmt_ms
from qfarm.common.reporting.runstats import STAGES
from qfarm.producer.viewer.html import badge, h, meaning, table
from qfarm.producer.viewer.reread import Reread

POINTER = re.compile(r"\[(E\d+)\]")
MATCH = "hl"  # class of a span a claim matched (anchor, quote, warrant)
SHARED = "shared"  # class of a claim's content words found in its cited block (no anchor)
CANDIDATE = "cand"  # class of a sidecar candidate span


@dataclass(frozen=True)
class Mark:
    start: int
    end: int
    cls: str
    title: str
    anchor: str = ""  # an element id, for links from the claims table


def highlight(text: str, marks: Sequence[Mark]) -> str:
    """``text`` escaped, each marked range wrapped in ``<mark>``; overlapping marks are cut at
    their boundaries, so a piece covered by two marks carries both classes."""
    cuts = sorted({0, len(text), *(m.start for m in marks), *(m.end for m in marks)})
    out, anchored = [], set()
    for a, b in zip(cuts, cuts[1:], strict=False):
        over = [m for m in marks if m.start <= a and b <= m.end and m.start < m.end]
        piece = h(text[a:b])
        if not over:
            out.append(piece)
            continue
        classes = " ".join(sorted({m.cls for m in over}))
        title = "; ".join(dict.fromkeys(m.title for m in over))
        ids = [m.anchor for m in over if m.anchor and m.anchor not in anchored and m.start == a]
        anchored.update(ids)
        id_attr = f' id="{h(ids[0])}"' if ids else ""
        out.append(f'<mark class="{classes}"{id_attr} title="{h(title)}">{piece}</mark>')
    return "".join(out)


def _highlight_pointers(answer: str, cited: set[str]) -> str:
    """The answer with each [E#] pointer marked and linked to its evidence block."""
    out, last = [], 0
    for m in POINTER.finditer(answer):
        out.append(h(answer[last:m.start()]))
        eid = m.group(1)
        cited.add(eid)
        out.append(f'<a class="cite" href="#ev-{h(eid)}"><mark>{h(m.group(0))}</mark></a>')
        last = m.end()
    out.append(h(answer[last:]))
    return "".join(out)


def _label(row: Mapping[str, Any]) -> str:
    """The label as the audit line prints it (a trimmed POINTER-LINKED row names the cap)."""
    label = row.get("label")
    if not label:
        return "—"
    known = {k.value for k in ViolationKind}
    kinds = [k for k in row.get("violation_kinds") or () if k in known]
    return display_label(label, kinds) if label in {lb.value for lb in Label} else str(label)


def _facts(row: Mapping[str, Any]) -> str:
    verdict = row.get("verdict") or "—"
    return table(["", ""], ([h(k), h(v)] for k, v in (
        ("question id · job id", f"{row.get('question_id')} · {row.get('job_id')}"),
        ("mode · sample", f"{row.get('mode')} · {row.get('sample_index')}"),
        ("verdict · label", f"{verdict} · {_label(row)}"),
        ("claims verified", f"{row.get('n_verified')}/{row.get('n_claims')} "
                            f"(ratio {_ratio(row.get('ratio'))})"),
        ("endpoint", row.get("endpoint") or "—"),
        ("tokens", _tokens(row.get("usage"))),
        ("attempts", row.get("attempts")),
        ("cache hit", _yes_no(row.get("cache_hit"))),
        # Only a run with --cache says where its reply came from.
        *([("reply from the response cache", _yes_no(row["response_cache_hit"]))]
          if row.get("response_cache_hit") is not None else []),
        ("model", row.get("model")),
        ("retriever · index", f"{row.get('retriever') or '—'} · {row.get('index_version') or '—'}"),
        ("worker", row.get("worker")),
    )), cls="facts")


def _tokens(usage: object) -> str:
    u = usage if isinstance(usage, Mapping) else {}
    prompt, completion = u.get("prompt_tokens"), u.get("completion_tokens")
    if prompt is None and completion is None:
        return "— (the endpoint reported none)"
    total = (prompt or 0) + (completion or 0)
    return f"{total} ({prompt if prompt is not None else '—'} prompt + " \
           f"{completion if completion is not None else '—'} completion)"


def _yes_no(value: object, yes: str = "yes", no: str = "no") -> str:
    return "—" if value is None else (yes if value else no)


def _gold(row: Mapping[str, Any], answers: Sequence[str] | None, note: str) -> str:
    """The question's gold answers and what the run found: did the answer's claims hold one,
    did the evidence."""
    flags = (row.get("gold_in_claims"), row.get("gold_in_evidence"),
             row.get("article_in_evidence"))
    if not answers and all(f is None for f in flags):
        return ""
    matched = row.get("gold_in_claims")
    verdict = ('<span class="v-STRICT" id="gold-match">the answer matched a gold answer</span>'
               if matched else
               '<span class="v-none" id="gold-match">the answer matched no gold answer</span>'
               if matched is False else '<span id="gold-match">not checked</span>')
    listed = ("<ul class=gold>" + "".join(f"<li>{h(a)}</li>" for a in answers) + "</ul>"
              if answers else f'<p class="note">{h(note or "no gold answers listed")}</p>')
    rank = row.get("gold_evidence_rank")
    facts = [("gold answer in the evidence",
              _yes_no(row.get("gold_in_evidence"), f"yes (passage {rank})" if rank else "yes")),
             ("article in the evidence", _yes_no(row.get("article_in_evidence"),
                                                 f"yes (passage {row.get('article_rank')})"
                                                 if row.get("article_rank") else "yes"))]
    return (f"<h2>Gold</h2><p>{verdict}</p>{listed}"
            + table(["", ""], ([h(k), h(v)] for k, v in facts), cls="facts"))


def _preflight(row: Mapping[str, Any]) -> str:
    return "<h2>Preflight</h2>" + table(["", ""], ([h(k), h(v)] for k, v in (
        ("intensity (rung)", row.get("quantifier_intensity")),
        ("matched token", row.get("quantifier_matched_token") or "—"),
        ("explicit count", row.get("quantifier_explicit_count") or "—"),
        ("scope", row.get("scope_bound_hint")),
        ("claim cap", row.get("claim_cap_applied") if row.get("claim_cap_applied") is not None
         else "none"),
        ("cap enforced", "yes" if row.get("claim_cap_enforced") else "no (reported only)"),
        ("would fire (dry run)", ", ".join(row.get("would_fire_kinds") or ()) or "—"),
    )), cls="facts")


def _reproduction(rr: Reread) -> str:
    out = "".join(f'<p class="note">{h(n)}</p>' for n in rr.notes)
    ver = rr.verification
    if ver is None:
        return out
    if rr.reproduced:
        return out + (
            '<p class="ok" id="reproduced">Verified again from the passages in the index under the '
            f"run's policy: reproduces the row ({h(ver.verdict)}, {h(ver.n_verified)}/"
            f"{h(ver.n_claims)} claims verified). The claims and spans below are that "
            "verification's.</p>")
    return out + (
        '<div class="warn" id="not-reproduced"><b>Verifying again does not reproduce this row</b> '
        "(another index, ranking or verifier version, or policy): the row's stored figures above "
        "are the record; the claims and spans below are the recomputation's and may not be what "
        "the run saw.<ul>" + "".join(f"<li>{h(d)}</li>" for d in rr.differences) + "</ul></div>")


def _claim_result(c: Claim) -> str:
    if not c.admitted:
        return '<span class="v-none">not admitted (over the cap)</span>'
    if c.verified:
        how = "anchored" if c.anchored else "not anchored"
        layer = f", {c.match_layer} match" if c.match_layer else ""
        text = f'<span class="v-STRICT">verified</span> ({h(how)}{h(layer)})'
    else:
        text = '<span class="v-UNGROUNDED">not verified</span>'
    if c.problems:
        text += "<br>" + ", ".join(
            f'<span title="{h(_problem_meaning(c, p))}">{h(p)}</span>' for p in c.problems)
        if not c.evidence_ids and ViolationKind.CITATION_MISMATCH in c.problems:
            text += f'<br><span class="note">{h(UNCITED)}</span>'
    return text


# A claim whose pointers all named ids outside the evidence map keeps none: the verifier
# records CITATION_MISMATCH (no cited block holds it), which does not mean it cited a
# block that disagrees.
UNCITED = ("the claim cites no evidence block: its pointers named ids outside the evidence map "
           "and were dropped, so nothing backs it")


def _row_meaning(kind: str, rr: Reread) -> str:
    """A kind's meaning for the row; CITATION_MISMATCH when every claim carrying it (as
    verified again) cites nothing says that instead."""
    claims = [c for c in rr.verification.claims if kind in c.problems] if rr.verification else []
    if kind == ViolationKind.CITATION_MISMATCH and claims and not any(c.evidence_ids
                                                                      for c in claims):
        return UNCITED
    return meaning(kind)


def _problem_meaning(c: Claim, kind: str) -> str:
    if kind == ViolationKind.CITATION_MISMATCH and not c.evidence_ids:
        return UNCITED
    return meaning(kind)


def _claims(ver: Any, spans: dict[int, list[Span]], blocks: Mapping[str, Evidence]) -> str:
    rows = []
    for n, c in enumerate(ver.claims, start=1):
        text = h(c.text) + (f'<br><span class="note">warrant: “{h(c.warrant)}”</span>'
                            if c.warrant else "")
        matched = []
        for k, s in enumerate(spans.get(n, [])):
            if s.how == "shared" and k:
                continue  # one link to the shared words is enough
            what = "shared words" if s.how == "shared" else f"“{blocks[s.evidence_id].text[s.start:s.end]}”"
            matched.append(f'<a href="#c{n}-{k}">{h(s.evidence_id)}: {h(what)}</a> '
                           f'<span class="score">({h(s.how)})</span>')
        rows.append([h(n), text, h(", ".join(c.evidence_ids) or "—"), _claim_result(c),
                     "<br>".join(matched) or "—"])
    if not rows:
        return "<h2>Claims</h2><p>The verifier found no claims in the answer.</p>"
    return "<h2>Claims</h2>" + table(
        ["#", "claim", "cites", "result", "matched evidence span"], rows, cls="claims")


def _marks(rr: Reread, spans: dict[int, list[Span]]) -> dict[str, list[Mark]]:
    marks: dict[str, list[Mark]] = {}
    for n, claim_spans_ in spans.items():
        for k, s in enumerate(claim_spans_):
            cls = SHARED if s.how == "shared" else MATCH
            title = f"claim {n}: {'shared word' if s.how == 'shared' else s.how + ' match'}"
            marks.setdefault(s.evidence_id, []).append(Mark(s.start, s.end, cls, title, f"c{n}-{k}"))
    if rr.answerability is not None:
        for c in rr.answerability.missed_answer_candidate_spans:
            marks.setdefault(c.evidence_id, []).append(
                Mark(c.offset_start, c.offset_end, CANDIDATE, f"sidecar candidate ({c.kind})"))
    return marks


def _sidecar(rr: Reread) -> str:
    a = rr.answerability
    if a is None:
        return ""
    return ("<h2>Answerability sidecar</h2>" + table(["", ""], ([h(k), h(v)] for k, v in (
        ("confidence", a.confidence_class),
        ("denial matched", a.denial_pattern_matched),
        ("question shape", f"{a.extraction_shape} ({a.extraction_cue_matched or 'no cue'}), "
                           f"wants {a.answer_type}"),
        ("candidates", f"{a.candidate_count} in the evidence, highlighted below "
                       f"(first {len(a.missed_answer_candidate_spans)})"),
    )), cls="facts"))


def _evidence(row: Mapping[str, Any], rr: Reread, cited: set[str],
              marks: dict[str, list[Mark]]) -> str:
    if rr.evidence:
        blocks = []
        for ev in rr.evidence:
            is_cited = ev.id in cited
            blocks.append(
                f'<div class="evidence{" cited" if is_cited else ""}" id="ev-{h(ev.id)}">'
                f'<b>{h(ev.id)}</b> <b class="title">{h(ev.title)}</b> '
                f'<span class="score">score {ev.score:.3f} · {h(ev.chunk_id)}</span>'
                f'{" <b>cited by the answer</b>" if is_cited else ""}'
                f'<p class="text">{highlight(ev.text, marks.get(ev.id, []))}</p></div>')
        legend = ('<p class="legend"><mark class="hl">matched by a claim</mark> '
                  '<mark class="shared">claim word, no anchor</mark> '
                  '<mark class="cand">sidecar candidate</mark></p>')
        return "<h2>Evidence</h2>" + legend + "".join(blocks)
    ids = list(row.get("evidence_ids") or [])
    scores = list(row.get("top_scores") or [])
    if not ids:
        return "<h2>Evidence</h2><p>No evidence was retrieved for this row.</p>"
    blocks = []
    for n, eid in enumerate(ids):
        score = f"{scores[n]:.3f}" if n < len(scores) and isinstance(scores[n], int | float) else "—"
        cls = "evidence cited" if eid in cited else "evidence"
        blocks.append(f'<div class="{cls}" id="ev-{h(eid)}"><b>{h(eid)}</b> '
                      f'<span class="score">score {h(score)}</span>'
                      f'{" <b>cited by the answer</b>" if eid in cited else ""}</div>')
    titles = ", ".join(h(t) for t in row.get("top_doc_titles") or []) or "—"
    return (f"<h2>Evidence</h2><p>Top documents, in rank order: {titles}</p>" + "".join(blocks))


def render_row(run_id: str, pos: int, row: Mapping[str, Any], manifest: Manifest,
               rr: Reread, gold: Sequence[str] | None = None, gold_note: str = "") -> str:
    """The row page's body; ``gold`` is the question's gold answers from the run's question
    file (None when unknown: ``gold_note`` says why)."""
    out = [f'<h1><a href="/runs/{h(quote(run_id))}">{h(run_id)}</a>{badge(manifest)} · row {pos}'
           f"</h1><p class=question>{h(row.get('question'))}</p>", _facts(row),
           _gold(row, gold, gold_note)]
    if row.get("error"):
        out.append(f'<h2>Error</h2><pre class="err">{h(row["error"])}</pre>')
    out.append(_preflight(row))
    cited: set[str] = set()
    answer = row.get("answer")
    if answer is None:
        out.append('<h2>Answer</h2><p class="note" id="no-answer">Answers were not kept for '
                   "this run (the default), so its claims cannot be shown or verified again; "
                   "re-run with <code>--keep-answers</code> to see them.</p>")
    else:
        out.append(f'<h2>Answer</h2><pre class="answer">{_highlight_pointers(str(answer), cited)}'
                   "</pre>")
    out.append(_reproduction(rr))
    spans: dict[int, list[Span]] = {}
    if rr.verification is not None:
        blocks = {ev.id: ev for ev in rr.evidence}
        mode = Mode(str(row.get("mode")))  # read back: reproduced under this mode
        spans = {n: claim_spans(c, blocks, mode=mode)
                 for n, c in enumerate(rr.verification.claims, start=1)}
        # JSON answers cite in an "evidence" list, not with [E#] pointers
        cited.update(i for c in rr.verification.claims for i in c.evidence_ids)
        out.append(_claims(rr.verification, spans, blocks))
    kinds = list(row.get("violation_kinds") or [])
    if kinds:
        out.append("<h2>Violation kinds</h2><ul class=kinds>" + "".join(
            f"<li><b>{h(k)}</b>: {h(_row_meaning(k, rr))}</li>" for k in kinds) + "</ul>")
    out.append(_sidecar(rr))
    out.append(_evidence(row, rr, cited, _marks(rr, spans)))
    out.append(_waterfall(row.get("timings") or {}))
    return "".join(out)


def _waterfall(timings: Mapping[str, Any]) -> str:
    total = timings.get("total_ms") or sum(
        float(timings.get(k) or 0) for k, _ in STAGES if k != "total_ms")
    if not total:
        return ""
    bars, start = [], 0.0
    for key, label in STAGES:
        if key == "total_ms" or timings.get(key) is None:
            continue
        ms = float(timings[key])
        left = min(99.5, 100 * start / total)
        width = max(0.5, min(100 - left, 100 * ms / total))
        bars.append(f'<div class="wf"><span class="wl">{h(label)} {h(fmt_ms(ms))} ms</span>'
                    f'<span class="wb" style="margin-left:{left:.1f}%;width:{width:.1f}%">'
                    "</span></div>")
        start += ms
    return f"<h2>Timings (total {h(fmt_ms(total))} ms)</h2>" + "".join(bars)


def _ratio(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)
