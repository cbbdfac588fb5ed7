"""The quantifier reminder turn (SPEC §3, §4).

Inserted by ``common.prompts.build_prompt`` right after the grounding
reminder, only in guarded modes and only when ``quantifier_reminder_enabled``.

Decisions where the SPEC left room:

* The reminder is rendered for every guarded job when enabled, not only for
  broad questions: it states the cap N, which matters as much for a SINGULAR
  question (N = 1) as for a broad one. Non-broad questions have scope
  ``unknown`` and get the unbounded template.
* N is the preflight cap bounded by ``claim_lattice_max_claims_per_answer``,
  i.e. the cap that would be enforced with ``--apply-quantifier-caps``.
* The ``[E#]`` rule is restated in the mode's own terms (pointer tags for
  claim_lattice_pointer, the ``evidence`` list and a verbatim ``warrant`` for
  claim_lattice, the id after the quote for quote mode if it is ever guarded).
"""

from __future__ import annotations

from common.models import Mode, Preflight
from common.policy import Policy
from common.preflight import is_guard_active

_POINTER_RULES: dict[Mode, str] = {
    Mode.QUOTE: "Every quote must be followed by its [E#] id.",
    Mode.CLAIM_LATTICE_POINTER: "Every claim must end with the [E#] pointer tags of the blocks that state it.",
    Mode.CLAIM_LATTICE: 'Every claim must list its [E#] ids in "evidence" and copy its "warrant" verbatim from a cited block.',
}

BOUNDED_TEMPLATE = (
    "Quantifier reminder: this question asks about a finite, known set. "
    "Name only the members the evidence states, at most {cap}, one per item; "
    "do not add members from memory and do not claim the list is complete unless the evidence says so. "
    "{pointer_rule}"
)
UNBOUNDED_TEMPLATE = (
    "Quantifier reminder: this question has no natural bound, so do not try to be exhaustive "
    "and do not claim completeness. Give at most {cap}, only what the evidence states. "
    "{pointer_rule}"
)


def render_quantifier_reminder(
    mode: Mode, policy: Policy, preflight: Preflight | None
) -> str | None:
    """The reminder text, or None when it does not apply to this job."""
    if not policy.quantifier_reminder_enabled or preflight is None:
        return None
    if not is_guard_active(mode, policy):
        return None
    cap = policy.claim_lattice_max_claims_per_answer
    if preflight.claim_cap is not None:
        cap = min(cap, preflight.claim_cap)
    bounded = preflight.quantifier.scope_bound_hint == "bounded"
    template = BOUNDED_TEMPLATE if bounded else UNBOUNDED_TEMPLATE
    claims = f"{cap} claim" if cap == 1 else f"{cap} claims"
    return template.format(cap=claims, pointer_rule=_POINTER_RULES[mode])
