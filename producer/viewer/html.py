"""Pieces every viewer page shares: the response, the page frame, escaping, tables, links."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from html import escape
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

from qfarm.common.models import Manifest, ViolationKind
from qfarm.common.text import replace_control_chars

# One line per violation kind: what the verifier saw (docs/grounding.md has the rules).
MEANINGS: dict[ViolationKind, str] = {
    ViolationKind.NO_EVIDENCE_POINTER: "a claim line carries no [E#] pointer to the evidence",
    ViolationKind.FORMAT_COLLAPSED: "the answer lost the required format (one blob, no claim lines)",
    ViolationKind.SCHEMA_INVALID: "structured output did not match the JSON schema",
    ViolationKind.CITATION_MISMATCH: "a claim cites evidence that does not contain it",
    ViolationKind.TITLE_MISMATCH: "a claim names a passage title other than the cited one",
    ViolationKind.TOO_MANY_CLAIMS: "more claims than the cap for this question allows",
    ViolationKind.TOO_MANY_EVIDENCE_IDS: "a claim cites more evidence ids than allowed",
    ViolationKind.POINTER_OVERFLOW_TRIMMED: "extra pointers beyond the limit were dropped",
    ViolationKind.WARRANT_MISSING: "a claim lacks the warrant its mode requires",
    ViolationKind.LAZY_ANCHOR_DEMOTE: "the warrant only repeats the claim; demoted to an anchor",
    ViolationKind.DEFLECTION_DETECTED: "the answer deflects instead of answering",
    ViolationKind.BROAD_QUANTIFIER_RUNAWAY: "a broad question drew an unbounded list of claims",
    ViolationKind.BROAD_QUANTIFIER_CAP_APPLIED: "claims beyond the broad-question cap were not admitted",
    ViolationKind.BROAD_QUANTIFIER_SCOPE_UNBOUND: "a broad question has no bounded scope",
    ViolationKind.BROAD_QUANTIFIER_REJECTED: "the broad question was rejected before retrieval",
}


# Beside a run read from Redis: it has no directory in the results directory (yet).
REDIS_BADGE = ' <span class="badge redis" title="no run directory here yet">in Redis</span>'


@dataclass(frozen=True)
class Response:
    """A page, or with ``stream`` a body sent piece by piece as it is produced (an export:
    ``body`` is then empty and no length is known in advance)."""

    status: int
    content_type: str
    body: bytes
    stream: Iterable[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)


class NotFound(Exception):
    pass


def h(value: object) -> str:
    """Text for a page: escaped, control characters replaced by U+FFFD."""
    return escape(replace_control_chars("" if value is None else str(value)), quote=True)


def inline(text: object) -> str:
    """Summary text (markdown) for a page: escaped, with its code spans as ``<code>`` and its
    ``**bold**`` as ``<b>``, so no backtick or asterisk of the markup shows. An unpaired
    backtick stays a character, as markdown shows it."""
    parts = str("" if text is None else text).split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: one is unclosed, no code spans
        return _bold(h(str(text)))
    return "".join(f"<code>{h(p)}</code>" if i % 2 else _bold(h(p)) for i, p in enumerate(parts))


def _bold(escaped: str) -> str:
    parts = escaped.split("**")
    if len(parts) % 2 == 0:
        return escaped
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def json_value(value: object) -> str:
    """A policy value as the policy file and ``--policy`` spell it (true, null, "tail")."""
    return json.dumps(value, ensure_ascii=False)


def page(title: str, body: str, *, status: int = 200, standalone: bool = False) -> Response:
    """A whole page. ``standalone``: its style inline and no script, for a page served
    before the browser may fetch anything else (the login page: /static needs a token too)."""
    assets = (f"<style>{_css()}</style>" if standalone else
              '<link rel=stylesheet href="/static/viewer.css">'
              '<script defer src="/static/viewer.js"></script>')
    html = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{h(title)} · qfarm</title>{assets}"
        '</head><body><nav><a href="/">runs</a> · <a href="/compare">compare</a></nav>'
        f"<main>{body}</main></body></html>"
    )
    return Response(status, "text/html; charset=utf-8", html.encode())


@cache
def _css() -> str:
    return resources.files("qfarm.producer.viewer").joinpath("static", "viewer.css").read_text()


def table(header: Iterable[str], rows: Iterable[Iterable[str]], *, cls: str = "") -> str:
    """Cells are HTML already (callers escape); header cells are escaped here."""
    head = "".join(f"<th>{h(c)}</th>" for c in header)
    if not any(header):
        head = ""  # a two-column facts table needs no header row
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    return f'<table class="{cls}">{thead}<tbody>{body}</tbody></table>'


def rows_link(run_id: str, text: object, **filters: str) -> str:
    return f'<a href="{h(rows_url(run_id, **filters))}">{h(text)}</a>'


def rows_url(run_id: str, **params: Any) -> str:
    query = urlencode({k: v for k, v in params.items() if v not in ("", None)})
    return f"/runs/{quote(run_id)}/rows" + (f"?{query}" if query else "")


def count_link(run_id: str, count: int, **filters: str) -> str:
    """A count linked to its rows; zero, and rows lacking the value ("(none)"), stay plain."""
    if not count or "(none)" in filters.values():
        return h(count)
    return rows_link(run_id, count, **filters)


def badge(manifest: Manifest) -> str:
    """SIMULATED for a simulator's run; GRAMMAR for one whose answers were decoded under
    their mode's grammar (the policy's structured_output)."""
    out = ' <span class="badge sim">SIMULATED</span>' if manifest.simulated else ""
    if manifest.policy.structured_output:
        out += (' <span class="badge grammar" title="structured_output: each answer was decoded '
                "under its mode's grammar\">GRAMMAR</span>")
    return out



def meaning(kind: str) -> str:
    try:
        return MEANINGS[ViolationKind(kind)]
    except ValueError:
        return "(a kind this viewer does not know)"
