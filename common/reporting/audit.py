"""The audit line and claim listing ``qfarm ask`` prints (docs/grounding.md, 'Audit line').

``LABEL · via MODE · tails  n_verified/n_claims  latency``, e.g.
``ANCHOR-WARRANTED · via claim_lattice_pointer · title mismatch, broad cap 8  3/4  1.2 s``.

Decisions where the rules left room:

* Tails are joined with ", " and the tails segment is left out when there are
  none. Besides the verifier's tails, ``cache hit`` and ``simulated`` (the
  answer came from the vLLM simulator) are appended, so a simulated result is
  named as such wherever it is shown.
* A job that failed (``record.error``) prints ``ERROR · via MODE · <error>``.
* Latency is ``timings.total_ms``: under one second in whole milliseconds
  (``340 ms``), above it in seconds with one decimal (``1.2 s``); ``-`` when
  unknown.
* ``render_audit_block`` is what ``qfarm ask`` prints above the claims. A
  question reject-broad refused prints the preflight header
  ``BROAD-QUANTIFIER PREFLIGHT REJECTED · scope unbounded`` and, instead of the
  usual audit line, ``UNGROUNDED · via BROAD_QUANTIFIER_REJECTED · ALL ("all")
  · cap was 8  0/0  2 ms (preflight)``: the verdict (the row's label stays
  BROAD-REJECTED), the stage that decided it named where the mode usually is,
  the rung and its words, and the cap it would have had. A broad question that
  was answered in a guarded mode prints ``BROAD-QUANTIFIER PREFLIGHT · ALL
  ("all") · scope bounded · cap 8 enforced`` (or ``not enforced``) above its
  audit line, so the reader sees the rung and cap that shaped the label.
* ``render_claims`` prints one line per claim, ``✓``/``✗``, its ids, its
  text (cut at 160 characters) and its problems; claims the cap did not admit
  are marked ``(not admitted)``. A reject-broad job prints the reject message
  instead, since it has no claims.
"""

from __future__ import annotations

from qfarm.common.grounding.preflight import narrowing_message
from qfarm.common.grounding.verify.verdict import display_label, render_tails
from qfarm.common.models import Claim, JobRecord, Preflight

SEP = " · "
MAX_CLAIM_CHARS = 160


def format_latency(total_ms: float | None) -> str:
    if total_ms is None:
        return "-"
    if total_ms < 1000:
        return f"{round(total_ms)} ms"
    return f"{total_ms / 1000:.1f} s"


def render_audit_line(record: JobRecord) -> str:
    """One line: label, mode, tails, verified/claims, latency."""
    mode = record.job.mode.value
    latency = format_latency(record.timings.total_ms)
    ver = record.verification
    if record.error or ver is None:
        return f"ERROR{SEP}via {mode}{SEP}{record.error or 'not verified'}  {latency}"
    tails = list(ver.tails)
    if record.cache_hit:
        tails.append("cache hit")
    if record.generation is not None and record.generation.simulated:
        tails.append("simulated")
    head = f"{display_label(ver.label, ver.violation_kinds)}{SEP}via {mode}"
    if tails:
        head += SEP + ", ".join(tails)
    return f"{head}  {ver.n_verified}/{ver.n_claims}  {latency}"


PREFLIGHT_HEAD = "BROAD-QUANTIFIER PREFLIGHT"


def _rung(pre: Preflight) -> str:
    q = pre.quantifier
    return f'{q.intensity} ("{q.matched_token}")' if q.matched_token else q.intensity


def _cap(pre: Preflight) -> int | None:
    return pre.claim_cap if pre.claim_cap is not None else pre.claim_cap_profile


def render_audit_block(record: JobRecord) -> list[str]:
    """The preflight line (broad questions in guarded modes) and the audit line."""
    pre = record.preflight
    if pre is not None and pre.rejected and not record.error:
        latency = format_latency(record.timings.total_ms)
        return [
            f"{PREFLIGHT_HEAD} REJECTED{SEP}scope {pre.quantifier.scope_bound_hint}",
            f"UNGROUNDED{SEP}via BROAD_QUANTIFIER_REJECTED{SEP}{_rung(pre)}{SEP}"
            f"cap was {_cap(pre)}  0/0  {latency} (preflight)",
        ]
    lines = []
    if pre is not None and pre.guard_active and pre.quantifier.is_broad and not record.error:
        enforced = "enforced" if pre.cap_enforced else "not enforced"
        parts = [
            PREFLIGHT_HEAD,
            _rung(pre),
            f"scope {pre.quantifier.scope_bound_hint}",
            f"cap {_cap(pre)} {enforced}",
        ]
        if pre.exploratory:
            parts.append("allow-broad: EXPLORATORY")
        ver = record.verification
        if ver is not None and ver.would_fire_kinds:  # the dry run: recorded, not applied
            tails = render_tails(ver.would_fire_kinds, cap=_cap(pre), exploratory=False)
            parts.append("dry run, would fire: " + ", ".join(tails))
        lines.append(SEP.join(parts))
        narrowing = narrowing_message(pre.quantifier)
        if narrowing and not pre.exploratory:
            lines.append(f"  {narrowing}")
    return [*lines, render_audit_line(record)]


def _claim_line(claim: Claim) -> str:
    mark = "✓" if claim.verified else "✗"
    ids = f"[{', '.join(claim.evidence_ids)}]" if claim.evidence_ids else "[-]"
    text = " ".join(claim.text.split())
    if len(text) > MAX_CLAIM_CHARS:
        text = text[: MAX_CLAIM_CHARS - 1] + "…"
    extras = list(claim.problems)
    if claim.match_layer and claim.match_layer != "unmatched":
        extras.insert(0, claim.match_layer)
    if not claim.admitted:
        extras.insert(0, "not admitted")
    suffix = f"  ({', '.join(extras)})" if extras else ""
    return f"  {mark} {ids} {text}{suffix}"


def render_claims(record: JobRecord) -> list[str]:
    """One line per claim (✓/✗, ids, text, problems) for ``qfarm ask``."""
    if record.preflight is not None and record.preflight.rejected:
        return [f"  {record.preflight.reject_message}"]
    if record.verification is None:
        return []
    return [_claim_line(c) for c in record.verification.claims]
