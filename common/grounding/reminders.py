"""The quantifier reminder turn (docs/grounding.md, 'Quantifier reminder').

Inserted by ``qfarm.common.grounding.prompts.build_prompt`` right after the grounding
reminder, only in guarded modes and only when ``quantifier_reminder_enabled``.

Decisions where the rules left room:

* The reminder goes only to broad questions: ALL, MANY, COMPREHENSIVE,
  OPEN_REQUEST, and an explicit count above ``claim_lattice_max_claims_per_answer``
  ("name the top 30 rivers"). A one-fact question ("What is the capital of
  France?") gets none: telling it "at most N claims" only adds noise to a prompt
  whose grounding reminder already covers it.
* Only the two lattice modes get it, and only when the guard covers the mode:
  quote mode answers in quotes, where a claim count means nothing to the model.
* N is the guard's cap bounded by ``claim_lattice_max_claims_per_answer``,
  i.e. the cap that would be enforced with ``--apply-quantifier-caps``.
* Bounded scope → the bounded template; unbounded → the unbounded template,
  which also says the list must come from the evidence, not from memory. The
  bounded template has no such training-prior clause, as the design's has
  none: a finite, known set is one the model may well know, and the clause
  that matters there is "only the members the evidence states".
* Both templates ask for fewer claims, each grounded, over a longer list
  (``FEWER_CLAIMS``): the cap tells the model where to stop, this sentence
  tells it what to prefer when it has more to say than it can ground.
* The ``[E#]`` rule is restated in the mode's own terms (pointer tags for
  claim_lattice_pointer, the ``evidence`` list and a verbatim ``warrant`` for
  claim_lattice).
"""

from __future__ import annotations

from qfarm.common.grounding.preflight import is_guard_active
from qfarm.common.models import Mode, Preflight, QuantifierInfo
from qfarm.common.policy import Policy

_POINTER_RULES: dict[Mode, str] = {
    Mode.CLAIM_LATTICE_POINTER: "Every claim must end with the [E#] pointer tags of the blocks that state it.",
    Mode.CLAIM_LATTICE: 'Every claim must list its [E#] ids in "evidence" and copy its "warrant" verbatim from a cited block.',
}

FEWER_CLAIMS = (
    "Fewer claims, each grounded in the evidence, are better than a longer list: "
    "leave out any claim you cannot point to in a block."
)
BOUNDED_TEMPLATE = (
    "Quantifier reminder: this question asks about a finite, known set. "
    "Name only the members the evidence states, at most {cap}, one per item; "
    "do not claim the list is complete unless the evidence says so. "
    f"{FEWER_CLAIMS} "
    "{pointer_rule}"
)
UNBOUNDED_TEMPLATE = (
    "Quantifier reminder: this question has no natural bound, so do not try to be exhaustive "
    "and do not claim completeness. Give at most {cap}, only what the evidence states: "
    "the list must come from the evidence above, not from what you remember from training. "
    f"{FEWER_CLAIMS} "
    "{pointer_rule}"
)


def wants_reminder(quantifier: QuantifierInfo, policy: Policy) -> bool:
    """A broad rung, or an explicit count above the policy's claim limit."""
    count = quantifier.explicit_count
    return quantifier.is_broad or (
        count is not None and count > policy.claim_lattice_max_claims_per_answer
    )


def render_quantifier_reminder(
    mode: Mode, policy: Policy, preflight: Preflight | None
) -> str | None:
    """The reminder text, or None when it does not apply to this job."""
    if not policy.quantifier_reminder_enabled or preflight is None:
        return None
    if mode not in _POINTER_RULES or not is_guard_active(mode, policy):
        return None
    if not wants_reminder(preflight.quantifier, policy):
        return None
    cap = policy.claim_lattice_max_claims_per_answer
    if preflight.claim_cap is not None:
        cap = min(cap, preflight.claim_cap)
    bounded = preflight.quantifier.scope_bound_hint == "bounded"
    template = BOUNDED_TEMPLATE if bounded else UNBOUNDED_TEMPLATE
    claims = f"{cap} claim" if cap == 1 else f"{cap} claims"
    return template.format(cap=claims, pointer_rule=_POINTER_RULES[mode])
