"""Per-claim checks: ids, content, citation, title, anchor (docs/grounding.md, 'Verification').

Each check attaches a violation kind to the claim it concerns; ``verdict.py``
turns the kinds into the row's verdict and label.

Decisions where the rules left room:

* CITATION_MISMATCH counts *distinct* content tokens of the claim and looks
  them up in the cited blocks' text and titles (the title is part of the
  block the model was shown). Exactly half passes ("under half" fires).
  A claim whose ids were all dropped has no cited block and fails this check.
* TITLE_MISMATCH, WARRANT_MISSING and LAZY_ANCHOR_DEMOTE grade verified
  claims only: an unverified claim is already counted against the row.
* Pointer-mode anchor: a run of 4 normalized tokens shared with a cited block
  that contains at least one content token ("one of the most" anchors
  nothing).
* JSON-mode warrant: "verbatim" means its normalized tokens are a word-aligned
  substring of a cited block's normalized tokens (case, Unicode form and
  spacing forgiven, nothing else). A missing or empty warrant is no anchor.
* Quote mode: a quote citing only unknown ids is looked up in every block
  (it may still be verbatim; the row is soft-demoted by
  POINTER_OVERFLOW_TRIMMED); an unmatched quote gets CITATION_MISMATCH; a
  fuzzy match verifies without anchoring and never fires WARRANT_MISSING.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from qfarm.common.grounding.verify.claims import RawClaim
from qfarm.common.grounding.verify.quote import match_quote
from qfarm.common.grounding.verify.text import (
    STOP_WORDS,
    BlockAnalysis,
    analyze_block,
    block_ngrams,
    content_tokens,
    joined,
    tokens,
)
from qfarm.common.models import Claim, Evidence, ViolationKind
from qfarm.common.policy import Policy

ANCHOR_RUN = 4
K = ViolationKind


@dataclass(frozen=True)
class CheckContext:
    blocks: Mapping[str, Evidence]  # id → block, exactly the blocks the model was shown
    question_content: frozenset[str]
    policy: Policy


def _id_checks(raw: RawClaim, ctx: CheckContext, problems: list[K]) -> list[Evidence]:
    if len(raw.ids) > ctx.policy.max_evidence_ids_per_claim:
        problems.append(K.TOO_MANY_EVIDENCE_IDS)
    cited = [ctx.blocks[i] for i in raw.ids if i in ctx.blocks]
    if len(cited) < len(raw.ids):
        problems.append(K.POINTER_OVERFLOW_TRIMMED)
    return cited


def _titles_match(
    analyses: list[BlockAnalysis], claim_content: set[str], ctx: CheckContext
) -> bool:
    wanted = ctx.question_content | claim_content
    return any(not a.title_content.isdisjoint(wanted) for a in analyses)


def _pointer_anchor(text: str, cited: list[Evidence]) -> bool:
    toks = tokens(text)
    grams = {
        gram
        for gram in zip(*(toks[i:] for i in range(ANCHOR_RUN)), strict=False)
        if any(t not in STOP_WORDS for t in gram)
    }
    return any(not grams.isdisjoint(block_ngrams(ev.title, ev.text, ANCHOR_RUN)) for ev in cited)


def _warrant_anchor(warrant: str | None, analyses: list[BlockAnalysis]) -> tuple[bool, set[str]]:
    wt = tokens(warrant or "")
    if not wt:
        return False, set()
    wj = joined(wt)
    return any(wj in a.joined for a in analyses), {t for t in wt if t not in STOP_WORDS}


def _done(raw: RawClaim, cited: list[Evidence], problems: list[K], **flags: object) -> Claim:
    return Claim(
        text=raw.text,
        evidence_ids=tuple(ev.id for ev in cited),
        warrant=raw.warrant,
        problems=tuple(dict.fromkeys(p.value for p in problems)),
        **flags,  # type: ignore[arg-type]
    )


def check_claim(raw: RawClaim, ctx: CheckContext, *, json_mode: bool) -> Claim:
    """Check one pointer-mode or JSON-mode claim."""
    problems: list[K] = []
    cited = _id_checks(raw, ctx, problems)
    if raw.problem is not None:
        problems.append(raw.problem)
        return _done(raw, cited, problems)
    if not raw.tagged:
        problems.append(K.NO_EVIDENCE_POINTER)
        return _done(raw, cited, problems)
    claim_content = set(content_tokens(raw.text))
    if len(claim_content) < ctx.policy.min_claim_content_tokens:
        problems.append(K.SCHEMA_INVALID)
        return _done(raw, cited, problems)
    analyses = [analyze_block(ev.title, ev.text) for ev in cited]
    supported = set().union(*(a.content for a in analyses)) if analyses else set()
    if not cited or 2 * len(claim_content & supported) < len(claim_content):
        problems.append(K.CITATION_MISMATCH)
        return _done(raw, cited, problems)
    if not _titles_match(analyses, claim_content, ctx):
        problems.append(K.TITLE_MISMATCH)
    if json_mode:
        anchored, warrant_content = _warrant_anchor(raw.warrant, analyses)
        if anchored and warrant_content.isdisjoint(claim_content):
            problems.append(K.LAZY_ANCHOR_DEMOTE)
    else:
        anchored = _pointer_anchor(raw.text, cited)
    if not anchored:
        problems.append(K.WARRANT_MISSING)
    return _done(raw, cited, problems, verified=True, anchored=anchored)


def check_quote(raw: RawClaim, ctx: CheckContext) -> Claim:
    """Check one quote by layered matching against its cited (or all) blocks."""
    problems: list[K] = []
    cited = _id_checks(raw, ctx, problems)
    if not raw.tagged:  # prose beside the quotes: nothing backs it
        problems.append(K.NO_EVIDENCE_POINTER)
        return _done(raw, cited, problems)
    search = cited or list(ctx.blocks.values())
    layer, where = match_quote(raw.text, search)
    if layer is None or where is None:
        problems.append(K.CITATION_MISMATCH)
        return _done(raw, cited, problems, match_layer="unmatched")
    titled = cited or [ctx.blocks[where]]
    analyses = [analyze_block(ev.title, ev.text) for ev in titled]
    if not _titles_match(analyses, set(content_tokens(raw.text)), ctx):
        problems.append(K.TITLE_MISMATCH)
    return _done(
        raw,
        cited,
        problems,
        verified=True,
        anchored=layer in ("exact", "normalized"),
        match_layer=layer,
    )
