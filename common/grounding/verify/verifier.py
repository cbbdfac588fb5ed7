"""``verify_answer``: deterministic verification of one answer.

The rules: docs/grounding.md, 'Verification'.

Order: reject-broad short-circuit → bracket diagnostics → extraction per mode
→ format collapse and deflection → the claim cap (excess not admitted) →
per-claim checks → row-level broad kinds → verdict, label, tails.

Decisions where the rules left room:

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
  with FORMAT_COLLAPSED. A refusal phrase after "but" that follows a statement
  in the same sentence (three or more content words before the "but", no
  refusal phrase among them) is a hedge, not a refusal: a real model wrote
  "... was first published in 1687, but it does not specify how the publication
  was actually produced", an answer with a caveat. "I'm sorry, but I cannot
  answer" and "Sorry, but the evidence does not say" stay deflections.
* Dry run: while caps are not applied (``quantifier_guard_apply_caps`` off,
  the default) the guard only observes. RUNAWAY, CAP_APPLIED and
  SCOPE_UNBOUND go to ``would_fire_kinds``, never to ``violation_kinds``, so
  the verdict, label, kinds and tails equal a guard-off run's on the same
  answer: a mis-classification shows up as a wrong intensity in the row, never
  as a moved verdict. CAP_APPLIED would fire when the guard's cap, had it been
  enforced, is below the default and would have cut this answer's claims.
  With caps applied the kinds fire and demote, and ``would_fire_kinds`` is
  empty (they are in ``violation_kinds``).
* BROAD_QUANTIFIER_RUNAWAY in JSON mode compares claim items with items that
  cite an id (when the object parsed); otherwise raw meaningful lines with
  pointer tag groups. It is not reported on a deflection.
* Quote mode: a line's prose beside its quotes (over 20 characters outside
  the quotes and tags, with a content word) is a NO_EVIDENCE_POINTER claim when
  the answer has at least one quote of 3+ tokens, as an untagged line is in
  pointer mode: "The title of Madonna is "Umm Kulthum" ... She is also known as
  the "Queen of Pop"" verifies one quote and asserts a falsehood around it, so
  it is not STRICT. Such claims count in ``n_claims`` but not in
  ``quote_match_layers``.
* An answer with no claims and no violation kind (e.g. quote-mode prose with
  no quote in it; FORMAT_COLLAPSED is a lattice-mode kind) gets the tail
  ``no claims`` so its audit line still says why it is UNGROUNDED.
* ``answer_brackets`` is 0 outside the two lattice modes: it counts the
  ``[...]`` groups a claim-mode answer writes, the first thing a collapsing
  model stops producing; in quote mode brackets are optional ids and the count
  would mean something else. The other bracket diagnostics are kept in every
  mode (how many ids a quote answer cites is still worth knowing).
* Without a preflight, one is computed with the ``default`` model profile.
* Malformed model output never raises; there is no catch-all: extraction is
  written to accept any string (see the malformed-output tests).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from qfarm.common.grounding.preflight import rejected_verification, run_preflight
from qfarm.common.grounding.verify.checks import CheckContext, check_claim, check_quote
from qfarm.common.grounding.verify.claims import (
    Extraction,
    RawClaim,
    bracket_diagnostics,
    extract_json_claims,
    extract_pointer_claims,
    extract_quotes,
)
from qfarm.common.grounding.verify.quote import LAYERS, MIN_QUOTE_TOKENS
from qfarm.common.grounding.verify.text import content_tokens, normalize, tokens
from qfarm.common.grounding.verify.verdict import decide_label, decide_verdict, render_tails
from qfarm.common.models import (
    Claim,
    Evidence,
    Mode,
    Preflight,
    Verification,
    ViolationKind,
)
from qfarm.common.policy import Policy
from qfarm.common.profiles import DEFAULT_PROFILE_ID
from qfarm.common.vocab import LATTICE_MODES

K = ViolationKind
NO_CLAIMS_TAIL = "no claims"
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
    quotes = [c for c in ext.claims if c.tagged and len(tokens(c.text)) >= MIN_QUOTE_TOKENS]
    # Prose beside a quote is a statement no quote backs (the quote-mode form of an untagged
    # line); an answer with no quote at all stays a "no claims" row.
    prose = [c for c in ext.claims if not c.tagged and content_tokens(c.text)] if quotes else []
    ext.claims = [c for c in ext.claims if c in quotes or c in prose]
    return ext


def _is_collapsed(mode: Mode, answer: str, ext: Extraction, lines: int, policy: Policy) -> bool:
    if not policy.format_collapse_check_enabled or mode not in LATTICE_MODES:
        return False
    if lines < 3 or ext.tag_groups > 0:
        return False
    return mode is Mode.CLAIM_LATTICE_POINTER or "{" not in answer


_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+")
_BUT_RE = re.compile(r"(?:^|[\s,;])but\s")
HEDGE_MIN_CONTENT_TOKENS = 3


def _is_hedge(sentence: str, at: int) -> bool:
    """A denial at ``at`` that follows "but" after a statement of the same sentence."""
    buts = [m.start() for m in _BUT_RE.finditer(sentence, 0, at)]
    if not buts:
        return False
    before = sentence[: buts[-1]]
    return not any(p in before for p in DEFLECTION_PATTERNS) and (
        len(content_tokens(before)) >= HEDGE_MIN_CONTENT_TOKENS
    )


def _is_deflection(answer: str, claims: Sequence[RawClaim]) -> bool:
    if any(c.tagged for c in claims):
        return False
    for sentence in _SENTENCE_END_RE.split(normalize(answer)):
        for p in DEFLECTION_PATTERNS:
            at = sentence.find(p)
            while at >= 0:
                if not _is_hedge(sentence, at):
                    return True
                at = sentence.find(p, at + 1)
    return False


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
        if c.match_layer is not None or K.NO_EVIDENCE_POINTER.value not in c.problems:
            counts[c.match_layer or "unmatched"] += 1
    return counts


@dataclass
class _Reading:
    """What the answer's text says before any claim is checked against the evidence."""

    extraction: Extraction
    diagnostics: dict[str, int]
    claims: list[RawClaim]  # the claims to check; empty on a deflection
    kinds: set[K]
    deflected: bool
    unparseable: bool

    @property
    def meaningful_lines(self) -> int:
        return self.diagnostics["raw_meaningful_line_count"]


def _read_answer(text: str, mode: Mode, policy: Policy) -> _Reading:
    """Bracket diagnostics, extraction, and the answer-level kinds: collapse, deflection, schema."""
    diag = bracket_diagnostics(text)
    ext = _extract(mode, text)
    kinds: set[K] = set()
    if _is_collapsed(mode, text, ext, diag["raw_meaningful_line_count"], policy):
        kinds.add(K.FORMAT_COLLAPSED)
    deflected = _is_deflection(text, ext.claims)
    if deflected:
        kinds.add(K.DEFLECTION_DETECTED)
    unparseable = mode is Mode.CLAIM_LATTICE and not ext.json_shape_ok
    if unparseable and not deflected:
        kinds.add(K.SCHEMA_INVALID)
    if mode is Mode.CLAIM_LATTICE and ext.json_parsed:
        diag["answer_pointer_count"] = len({i for c in ext.claims for i in c.ids})
    if mode not in LATTICE_MODES:  # a collapse precursor only where tags are the contract
        diag["answer_brackets"] = 0
    return _Reading(ext, diag, [] if deflected else ext.claims, kinds, deflected, unparseable)


def _check_admitted(
    mode: Mode,
    claims: Sequence[RawClaim],
    question: str,
    evidence: Sequence[Evidence],
    policy: Policy,
) -> list[Claim]:
    """Check each admitted claim (or quote) against the blocks it cites."""
    ctx = CheckContext(
        blocks={ev.id: ev for ev in evidence},
        question_content=frozenset(content_tokens(question)),
        policy=policy,
    )
    if mode is Mode.QUOTE:
        return [check_quote(c, ctx) for c in claims]
    json_mode = mode is Mode.CLAIM_LATTICE
    return [check_claim(c, ctx, json_mode=json_mode) for c in claims]


def _not_admitted(excess: Sequence[RawClaim]) -> list[Claim]:
    """Claims past the cap: listed in the verification, never checked or counted."""
    return [
        Claim(
            text=c.text,
            evidence_ids=c.ids,
            warrant=c.warrant,
            admitted=False,
            problems=(K.TOO_MANY_CLAIMS.value,),
        )
        for c in excess
    ]


def _broad_kinds(mode: Mode, pre: Preflight, reading: _Reading, policy: Policy) -> set[K]:
    """The row-level BROAD_QUANTIFIER_* kinds the guard finds, as if its cap were enforced.

    Only an active guard on a broad question has any. Whether they demote
    (caps applied) or are only recorded (the dry run) is the caller's choice.
    """
    q = pre.quantifier
    kinds: set[K] = set()
    if not (pre.guard_active and q.is_broad):
        return kinds
    if not reading.deflected and _is_runaway(mode, reading.extraction, reading.meaningful_lines):
        kinds.add(K.BROAD_QUANTIFIER_RUNAWAY)
    cap, profile_cap_binding = _effective_cap(mode, policy, pre.model_copy(update={"cap_enforced": True}))
    if profile_cap_binding and cap is not None and len(reading.claims) > cap:
        kinds.add(K.BROAD_QUANTIFIER_CAP_APPLIED)
    if q.scope_bound_hint == "unbounded":
        kinds.add(K.BROAD_QUANTIFIER_SCOPE_UNBOUND)
    return kinds


def _judge(
    mode: Mode,
    pre: Preflight,
    reading: _Reading,
    admitted: list[Claim],
    not_admitted: list[Claim],
    kinds: frozenset[K],
    would_fire: frozenset[K],
) -> Verification:
    """Counts, verdict, label and audit tails of the checked claims."""
    n_claims = len(admitted)
    n_verified = sum(1 for c in admitted if c.verified)
    verdict = decide_verdict(admitted, kinds, unparseable=reading.unparseable)
    label = decide_label(
        verdict,
        admitted,
        kinds,
        quote_mode=mode is Mode.QUOTE,
        is_broad=pre.quantifier.is_broad,
        exploratory=pre.exploratory,
    )
    return Verification(
        n_claims=n_claims,
        n_verified=n_verified,
        ratio=n_verified / max(n_claims, 1),
        verdict=verdict,
        label=label,
        violation_kinds=tuple(sorted(kinds)),
        would_fire_kinds=tuple(sorted(would_fire)),
        format_collapsed=K.FORMAT_COLLAPSED in kinds,
        quote_match_layers=_quote_layers(admitted) if mode is Mode.QUOTE else None,
        claims=(*admitted, *not_admitted),
        tails=render_tails(kinds, cap=pre.claim_cap, exploratory=pre.exploratory)
        or ((NO_CLAIMS_TAIL,) if n_claims == 0 else ()),
        **reading.diagnostics,
    )


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
    reading = _read_answer(text, mode, policy)
    cap, _ = _effective_cap(mode, policy, pre)
    within_cap = reading.claims if cap is None else reading.claims[:cap]
    excess = [] if cap is None else reading.claims[cap:]
    admitted = _check_admitted(mode, within_cap, question, evidence, policy)
    kinds = set(reading.kinds)
    kinds.update(K(p) for c in admitted for p in c.problems)
    if excess:
        kinds.add(K.TOO_MANY_CLAIMS)
    broad = _broad_kinds(mode, pre, reading, policy)
    if pre.cap_enforced:
        kinds |= broad
        broad = set()
    return _judge(
        mode, pre, reading, admitted, _not_admitted(excess), frozenset(kinds), frozenset(broad)
    )
