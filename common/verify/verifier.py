"""``verify_answer``: deterministic verification of one answer (SPEC §7).

Order: reject-broad short-circuit → bracket diagnostics → extraction per mode
→ format collapse and deflection → the claim cap (excess not admitted) →
per-claim checks → row-level broad kinds → verdict, label, tails.

Decisions where the SPEC left room:

* ``claim_lattice_max_claims_per_answer`` caps the two lattice modes only
  (its name says so); quote mode is capped only by an enforced preflight cap.
  The effective cap is the smaller of the two when the preflight cap is
  enforced. Excess claims are listed (``admitted=False``) but not checked and
  not counted in ``n_claims``.
* BROAD_QUANTIFIER_CAP_APPLIED fires when an enforced profile cap below
  ``claim_lattice_max_claims_per_answer`` actually cut claims from this answer
  on a broad question (TOO_MANY_CLAIMS fires with it).
* FORMAT_COLLAPSED in JSON mode means prose instead of JSON: ≥3 meaningful
  lines, no pointer tags and no ``{`` at all. A truncated or broken object is
  SCHEMA_INVALID (UNGROUNDED), not a collapse. The check is skipped when
  ``format_collapse_check_enabled`` is off.
* DEFLECTION_DETECTED: a refusal phrase (``DEFLECTION_PATTERNS``) and no cited
  claim (pointer: no tagged line; JSON: no claim item; quote: no quote of 3+
  tokens). Its untagged lines are then not counted as claims. It can co-occur
  with FORMAT_COLLAPSED.
* BROAD_QUANTIFIER_RUNAWAY in JSON mode compares claim items with items that
  cite an id (when the object parsed); otherwise raw meaningful lines with
  pointer tag groups. It is not reported on a deflection.
* An answer with no claims and no violation kind (e.g. quote-mode prose with
  no quote in it; FORMAT_COLLAPSED is a lattice-mode kind) gets the tail
  ``no claims`` so its audit line still says why it is UNGROUNDED.
* Without a preflight, one is computed with the ``default`` model profile.
* Malformed model output never raises; there is no catch-all: extraction is
  written to accept any string (see the malformed-output tests).
"""

from __future__ import annotations

from collections.abc import Sequence

from common.models import (
    Claim,
    Evidence,
    Mode,
    Preflight,
    Verification,
    ViolationKind,
)
from common.policy import Policy
from common.preflight import rejected_verification, run_preflight
from common.profiles import DEFAULT_PROFILE_ID
from common.verify.checks import CheckContext, check_claim, check_quote
from common.verify.claims import (
    Extraction,
    RawClaim,
    bracket_diagnostics,
    extract_json_claims,
    extract_pointer_claims,
    extract_quotes,
)
from common.verify.quote import LAYERS, MIN_QUOTE_TOKENS
from common.verify.text import content_tokens, normalize, tokens
from common.verify.verdict import decide_label, decide_verdict, render_tails

K = ViolationKind
NO_CLAIMS_TAIL = "no claims"
LATTICE_MODES: frozenset[Mode] = frozenset({Mode.CLAIM_LATTICE_POINTER, Mode.CLAIM_LATTICE})
DEFLECTION_PATTERNS: tuple[str, ...] = (
    "not in the evidence",
    "not in the provided",
    "not mentioned",
    "not provided",
    "not stated",
    "not specified",
    "does not mention",
    "do not mention",
    "doesn't mention",
    "don't mention",
    "does not contain",
    "do not contain",
    "doesn't contain",
    "don't contain",
    "does not say",
    "doesn't say",
    "does not specify",
    "does not provide",
    "do not provide",
    "no information",
    "no evidence",
    "no specific",
    "no relevant",
    "not enough information",
    "insufficient information",
    "cannot answer",
    "can't answer",
    "unable to answer",
    "cannot determine",
    "can't determine",
    "cannot be determined",
    "i don't know",
    "i do not know",
    "i'm sorry",
    "i am sorry",
    "i cannot",
    "i can't",
)


def _extract(mode: Mode, answer: str) -> Extraction:
    if mode is Mode.CLAIM_LATTICE_POINTER:
        return extract_pointer_claims(answer)
    if mode is Mode.CLAIM_LATTICE:
        return extract_json_claims(answer)
    ext = extract_quotes(answer)
    ext.claims = [c for c in ext.claims if len(tokens(c.text)) >= MIN_QUOTE_TOKENS]
    return ext


def _is_collapsed(mode: Mode, answer: str, ext: Extraction, lines: int, policy: Policy) -> bool:
    if not policy.format_collapse_check_enabled or mode not in LATTICE_MODES:
        return False
    if lines < 3 or ext.tag_groups > 0:
        return False
    return mode is Mode.CLAIM_LATTICE_POINTER or "{" not in answer


def _is_deflection(answer: str, claims: Sequence[RawClaim]) -> bool:
    if any(c.tagged for c in claims):
        return False
    text = normalize(answer)
    return any(p in text for p in DEFLECTION_PATTERNS)


def _effective_cap(mode: Mode, policy: Policy, pre: Preflight) -> tuple[int | None, bool]:
    """The cap on admitted claims, and whether the profile cap is the binding one."""
    default = policy.claim_lattice_max_claims_per_answer
    cap = default if mode in LATTICE_MODES else None
    if pre.cap_enforced and pre.claim_cap is not None and (cap is None or pre.claim_cap < cap):
        return pre.claim_cap, pre.claim_cap < default
    return cap, False


def _is_runaway(mode: Mode, ext: Extraction, lines: int) -> bool:
    if mode is Mode.CLAIM_LATTICE and ext.json_shape_ok:
        return len(ext.claims) > 2 * ext.items_with_ids
    return lines > 2 * ext.tag_groups


def _quote_layers(claims: Sequence[Claim]) -> dict[str, int]:
    counts = dict.fromkeys((*LAYERS, "unmatched"), 0)
    for c in claims:
        counts[c.match_layer or "unmatched"] += 1
    return counts


def verify_answer(
    answer: str,
    *,
    question: str,
    mode: Mode,
    evidence: Sequence[Evidence],
    policy: Policy,
    preflight: Preflight | None = None,
) -> Verification:
    """Verify one answer against exactly the evidence blocks the model was shown."""
    text = answer if isinstance(answer, str) else ""
    mode = Mode(mode)
    pre = preflight or run_preflight(question, mode, policy, DEFAULT_PROFILE_ID)
    if pre.rejected:
        return rejected_verification()
    diag = bracket_diagnostics(text)
    lines = diag["raw_meaningful_line_count"]
    ext = _extract(mode, text)
    kinds: set[K] = set()
    if _is_collapsed(mode, text, ext, lines, policy):
        kinds.add(K.FORMAT_COLLAPSED)
    raw_claims = ext.claims
    deflected = _is_deflection(text, raw_claims)
    if deflected:
        kinds.add(K.DEFLECTION_DETECTED)
        raw_claims = []
    unparseable = mode is Mode.CLAIM_LATTICE and not ext.json_shape_ok
    if unparseable and not deflected:
        kinds.add(K.SCHEMA_INVALID)
    if mode is Mode.CLAIM_LATTICE and ext.json_parsed:
        diag["answer_pointer_count"] = len({i for c in ext.claims for i in c.ids})

    cap, profile_cap_binding = _effective_cap(mode, policy, pre)
    admitted_raw = raw_claims if cap is None else raw_claims[:cap]
    excess = [] if cap is None else raw_claims[cap:]
    ctx = CheckContext(
        blocks={ev.id: ev for ev in evidence},
        question_content=frozenset(content_tokens(question)),
        policy=policy,
    )
    if mode is Mode.QUOTE:
        admitted = [check_quote(c, ctx) for c in admitted_raw]
    else:
        json_mode = mode is Mode.CLAIM_LATTICE
        admitted = [check_claim(c, ctx, json_mode=json_mode) for c in admitted_raw]
    for c in admitted:
        kinds.update(K(p) for p in c.problems)
    not_admitted = [
        Claim(
            text=c.text,
            evidence_ids=c.ids,
            warrant=c.warrant,
            admitted=False,
            problems=(K.TOO_MANY_CLAIMS.value,),
        )
        for c in excess
    ]
    if excess:
        kinds.add(K.TOO_MANY_CLAIMS)

    q = pre.quantifier
    if pre.guard_active and q.is_broad:
        if not deflected and _is_runaway(mode, ext, lines):
            kinds.add(K.BROAD_QUANTIFIER_RUNAWAY)
        if excess and profile_cap_binding:
            kinds.add(K.BROAD_QUANTIFIER_CAP_APPLIED)
        if q.scope_bound_hint == "unbounded":
            kinds.add(K.BROAD_QUANTIFIER_SCOPE_UNBOUND)

    frozen_kinds = frozenset(kinds)
    n_claims = len(admitted)
    n_verified = sum(1 for c in admitted if c.verified)
    verdict = decide_verdict(admitted, frozen_kinds, unparseable=unparseable)
    label = decide_label(
        verdict,
        admitted,
        frozen_kinds,
        quote_mode=mode is Mode.QUOTE,
        is_broad=q.is_broad,
        exploratory=pre.exploratory,
    )
    return Verification(
        n_claims=n_claims,
        n_verified=n_verified,
        ratio=n_verified / max(n_claims, 1),
        verdict=verdict,
        label=label,
        violation_kinds=tuple(sorted(frozen_kinds)),
        format_collapsed=K.FORMAT_COLLAPSED in frozen_kinds,
        quote_match_layers=_quote_layers(admitted) if mode is Mode.QUOTE else None,
        claims=(*admitted, *not_admitted),
        tails=render_tails(frozen_kinds, cap=pre.claim_cap, exploratory=pre.exploratory)
        or ((NO_CLAIMS_TAIL,) if n_claims == 0 else ()),
        **diag,
    )
