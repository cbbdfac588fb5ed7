"""Verdict, label ladder and audit-line tails from a row's claims and kinds.

The rules: docs/grounding.md, 'Verification' and 'Verdict and label'.

Verdict:
* UNGROUNDED: no admitted claim, none verified, or a kind whose effect is
  UNGROUNDED (``UNGROUNDED_KINDS``, plus SCHEMA_INVALID when the JSON answer
  could not be parsed at all);
* STRICT: at least one claim, ratio 1.0, no soft demote, no claim-level
  violation;
* HYBRID: everything else.

Label, high to low: EVIDENCE-WARRANTED (STRICT and every verified claim
anchored), ANCHOR-WARRANTED (every verified claim anchored; in quote mode
also a fuzzy-matched quote), POINTER-LINKED, UNGROUNDED. A soft demote caps
the label at ANCHOR-WARRANTED; WARRANT_MISSING and BROAD_QUANTIFIER_RUNAWAY
cap it at POINTER-LINKED.

Decisions where the rules left room:

* WARRANT_MISSING and BROAD_QUANTIFIER_RUNAWAY cap the label but do not
  change the verdict (the table names a label cap, not a soft demote): a
  STRICT row can read POINTER-LINKED.
* EXPLORATORY replaces every label except UNGROUNDED, so a failed
  exploratory answer still reads as a failure; its tail says "not
  evidence-warranted".
* A broad question's row is EVIDENCE-WARRANTED only if no admitted claim has
  any problem at all (checked explicitly, on top of the STRICT rule).
* BROAD-CAPPED: when BROAD_QUANTIFIER_CAP_APPLIED fired (a profile cap below
  the default trimmed the answer), the label is BROAD-CAPPED instead of
  EVIDENCE-WARRANTED or ANCHOR-WARRANTED, even when every admitted claim
  verifies: the answer is a bounded sample of a broad set, not a verified
  answer to it. A POINTER-LINKED or UNGROUNDED row keeps its weaker label (its
  tail still says ``broad cap N``).
* Where a label is printed (``display_label``: the audit line, the viewer), a
  POINTER-LINKED row whose list the broad cap trimmed reads
  ``BROAD-CAPPED · POINTER-LINKED``: both facts matter to a reader, and the
  weaker label alone would hide the trim. The row's ``label`` field stays
  POINTER-LINKED, so the label table counts it once, on the weaker rung.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from qfarm.common.models import Claim, Label, Verdict, ViolationKind

K = ViolationKind

UNGROUNDED_KINDS: frozenset[K] = frozenset(
    {K.FORMAT_COLLAPSED, K.DEFLECTION_DETECTED, K.BROAD_QUANTIFIER_REJECTED}
)
SOFT_DEMOTE_KINDS: frozenset[K] = frozenset(
    {
        K.TITLE_MISMATCH,
        K.TOO_MANY_CLAIMS,
        K.TOO_MANY_EVIDENCE_IDS,
        K.POINTER_OVERFLOW_TRIMMED,
        K.LAZY_ANCHOR_DEMOTE,
        K.BROAD_QUANTIFIER_CAP_APPLIED,
        K.BROAD_QUANTIFIER_SCOPE_UNBOUND,
    }
)
CLAIM_LEVEL_HARD_KINDS: frozenset[K] = frozenset(
    {K.NO_EVIDENCE_POINTER, K.SCHEMA_INVALID, K.CITATION_MISMATCH}
)
POINTER_LINKED_CAP_KINDS: frozenset[K] = frozenset({K.WARRANT_MISSING, K.BROAD_QUANTIFIER_RUNAWAY})

# Audit-line tail per kind, in the order tails are printed.
TAILS: dict[K, str] = {
    K.BROAD_QUANTIFIER_REJECTED: "broad rejected",
    K.FORMAT_COLLAPSED: "format collapsed",
    K.DEFLECTION_DETECTED: "deflection",
    K.SCHEMA_INVALID: "schema invalid",
    K.NO_EVIDENCE_POINTER: "untagged lines",
    K.CITATION_MISMATCH: "citation mismatch",
    K.TITLE_MISMATCH: "title mismatch",
    K.TOO_MANY_CLAIMS: "too many claims",
    K.TOO_MANY_EVIDENCE_IDS: "too many ids",
    K.POINTER_OVERFLOW_TRIMMED: "pointer trimmed",
    K.WARRANT_MISSING: "warrant missing",
    K.LAZY_ANCHOR_DEMOTE: "lazy anchor",
    K.BROAD_QUANTIFIER_RUNAWAY: "broad runaway",
    K.BROAD_QUANTIFIER_CAP_APPLIED: "broad cap {cap}",
    K.BROAD_QUANTIFIER_SCOPE_UNBOUND: "broad unbounded",
}
EXPLORATORY_TAIL = "not evidence-warranted"

_LADDER: tuple[Label, ...] = (
    Label.EVIDENCE_WARRANTED,
    Label.ANCHOR_WARRANTED,
    Label.POINTER_LINKED,
    Label.UNGROUNDED,
)


def decide_verdict(
    admitted: Sequence[Claim], kinds: frozenset[K], *, unparseable: bool = False
) -> Verdict:
    n_verified = sum(1 for c in admitted if c.verified)
    if not admitted or n_verified == 0 or kinds & UNGROUNDED_KINDS:
        return Verdict.UNGROUNDED
    if unparseable and K.SCHEMA_INVALID in kinds:
        return Verdict.UNGROUNDED
    problems = {p for c in admitted for p in c.problems}
    if (
        n_verified == len(admitted)
        and not kinds & SOFT_DEMOTE_KINDS
        and not problems & {k.value for k in CLAIM_LEVEL_HARD_KINDS}
    ):
        return Verdict.STRICT
    return Verdict.HYBRID


def _cap(label: Label, ceiling: Label) -> Label:
    return label if _LADDER.index(label) >= _LADDER.index(ceiling) else ceiling


def decide_label(
    verdict: Verdict,
    admitted: Sequence[Claim],
    kinds: frozenset[K],
    *,
    quote_mode: bool,
    is_broad: bool,
    exploratory: bool,
) -> Label:
    if verdict is Verdict.UNGROUNDED:
        return Label.UNGROUNDED
    all_anchored = all(c.anchored for c in admitted if c.verified)
    clean = not any(c.problems for c in admitted)
    if verdict is Verdict.STRICT and all_anchored and (clean or not is_broad):
        label = Label.EVIDENCE_WARRANTED
    elif all_anchored or quote_mode:
        label = Label.ANCHOR_WARRANTED
    else:
        label = Label.POINTER_LINKED
    if kinds & SOFT_DEMOTE_KINDS:
        label = _cap(label, Label.ANCHOR_WARRANTED)
    if kinds & POINTER_LINKED_CAP_KINDS:
        label = _cap(label, Label.POINTER_LINKED)
    if exploratory:
        return Label.EXPLORATORY
    if K.BROAD_QUANTIFIER_CAP_APPLIED in kinds and label is not Label.POINTER_LINKED:
        return Label.BROAD_CAPPED
    return label


def display_label(label: Label | str, kinds: Iterable[K | str]) -> str:
    """The label as printed; a trimmed POINTER-LINKED row names the broad cap too."""
    label = Label(label)
    if label is Label.POINTER_LINKED and K.BROAD_QUANTIFIER_CAP_APPLIED in {K(k) for k in kinds}:
        return f"{Label.BROAD_CAPPED.value} · {label.value}"
    return label.value


def render_tails(kinds: Iterable[K], *, cap: int | None, exploratory: bool) -> tuple[str, ...]:
    present = set(kinds)
    tails = [tail.format(cap=cap) for kind, tail in TAILS.items() if kind in present]
    if exploratory:
        tails.append(EXPLORATORY_TAIL)
    return tuple(tails)
