"""Quantifier preflight: classify, cap, and decide reject-broad before retrieval.

Pure: ``run_preflight`` runs before any I/O of a job, so a rejected job costs
no retrieval and no model call (docs/grounding.md, 'Preflight, reject-broad, allow-broad').

Decisions where the rules left room:

* The guard is *active* for a job when ``quantifier_guard_enabled`` and the
  job's mode is in ``quantifier_guard_modes``. Everything broad-specific
  (reject-broad, EXPLORATORY, cap enforcement, the reminder, the four
  BROAD_QUANTIFIER_* kinds) needs an active guard; the classification and the
  profile table's cap (``claim_cap_profile``) are computed and reported for
  every job, guarded or not. ``claim_cap`` is None when the guard is off.
* The regression rule wins over the cap table for the one-claim rungs only:
  ABSENT and SINGULAR keep ``claim_lattice_max_claims_per_answer`` unless
  listed in ``quantifier_caps_by_intensity`` (see ``guard_cap``). PROPORTIONAL
  keeps its profile cap (1 on the small model, 3 on the default profile): a
  fraction is answered with a few claims, and the cap is what the profile says
  the model can ground. ``allow_broad`` keeps the default cap for the broad
  rungs: EXPLORATORY answers get no cap reduction.
* A universal over a set whose size the question states ("name all three ...")
  is capped at that number, as a counted rung is; an override for its rung wins.
* ``allow_broad`` wins over ``quantifier_reject_broad`` when both are set: the
  reject message itself offers ``--allow-broad`` as the way through.
* Reject-broad fires for ALL, COMPREHENSIVE and OPEN_REQUEST with an
  ``unbounded`` scope only; MANY is never rejected (docs/grounding.md names the three).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from qfarm.common import versions
from qfarm.common.grounding.names import TitleSet
from qfarm.common.grounding.quantifier import classify_question_quantifier
from qfarm.common.models import (
    Intensity,
    Label,
    Mode,
    Preflight,
    QuantifierInfo,
    Verdict,
    Verification,
    ViolationKind,
)
from qfarm.common.policy import Policy
from qfarm.common.profiles import cap_for_intensity
from qfarm.common.vocab import COUNTED_INTENSITIES

REJECTABLE_INTENSITIES: frozenset[Intensity] = frozenset(
    {Intensity.ALL, Intensity.COMPREHENSIVE, Intensity.OPEN_REQUEST}
)
# Rungs whose profile cap is reported but never enforced unless the operator lists them:
# their table value (1) would cut a two-sentence answer to a one-fact question.
DEFAULT_CAP_INTENSITIES: frozenset[Intensity] = frozenset({Intensity.ABSENT, Intensity.SINGULAR})

_REJECT_WHY = {
    Intensity.ALL: "it asks for every item of an open-ended set",
    Intensity.COMPREHENSIVE: "it asks for an exhaustive answer",
    Intensity.OPEN_REQUEST: "it asks for an open-ended overview",
}


def is_guard_active(mode: Mode, policy: Policy) -> bool:
    """The quantifier guard applies to this mode under this policy."""
    return policy.quantifier_guard_enabled and mode.value in policy.quantifier_guard_modes


NARROWING = (
    "Narrow the question: name a year, league, country or category "
    '(e.g. "... in 1998", "... in the Premier League", "... in France", "... albums only")'
)


def narrowing_message(quantifier: QuantifierInfo) -> str | None:
    """For an unbounded broad question that was answered: its answer is a sample, and how
    to ask for a set the evidence can cover (the reject message's advice, in default mode)."""
    if not quantifier.is_broad or quantifier.scope_bound_hint != "unbounded":
        return None
    return (
        "no bound on its scope: the answer is a sample from the evidence, not a complete "
        f"list. {NARROWING}."
    )


def reject_message(quantifier: QuantifierInfo) -> str:
    """Why the question was rejected and how to narrow it.

    The rule: docs/grounding.md, 'Preflight, reject-broad, allow-broad'.
    """
    why = _REJECT_WHY.get(quantifier.intensity, "it asks for an unbounded set")
    token = f' ("{quantifier.matched_token}")' if quantifier.matched_token else ""
    return (
        f"rejected before retrieval: {why}{token} with no bound on its scope, so no answer "
        f"drawn from a few evidence passages could be checked for completeness. {NARROWING}, "
        "or rerun with --allow-broad for an EXPLORATORY (not evidence-warranted) answer."
    )


def guard_cap(quantifier: QuantifierInfo, policy: Policy, profile_cap: int) -> int:
    """The cap the guard applies: the profile's, except where the policy default must stand.

    ABSENT, SINGULAR and, with ``allow_broad``, the broad rungs keep
    ``claim_lattice_max_claims_per_answer`` unless the operator listed the rung
    in ``quantifier_caps_by_intensity``; PROPORTIONAL keeps its profile cap.
    """
    if quantifier.intensity in policy.quantifier_caps_by_intensity:
        return profile_cap
    if quantifier.intensity in DEFAULT_CAP_INTENSITIES or (
        quantifier.is_broad and policy.allow_broad
    ):
        return policy.claim_lattice_max_claims_per_answer
    return profile_cap


def run_preflight(
    question: str,
    mode: Mode,
    policy: Policy,
    model_profile_id: str,
    titles: TitleSet | None = None,
) -> Preflight:
    """Classify the question and decide caps, reject-broad and exploratory.

    ``titles`` are the corpus's own titles, when the caller's index can give them: a
    title the question names is read as a name, not as a quantifier.
    """
    quantifier = classify_question_quantifier(question, titles)
    guard_active = is_guard_active(mode, policy)
    overrides = policy.quantifier_caps_by_intensity
    profile_cap = cap_for_intensity(
        quantifier.intensity, model_profile_id, quantifier.explicit_count, overrides
    )
    if (
        quantifier.explicit_count is not None
        and quantifier.intensity not in COUNTED_INTENSITIES
        and quantifier.intensity not in overrides
    ):
        profile_cap = max(1, quantifier.explicit_count)  # "all three": the set's own size
    broad = quantifier.is_broad and guard_active
    rejected = (
        broad
        and policy.quantifier_reject_broad
        and not policy.allow_broad
        and quantifier.intensity in REJECTABLE_INTENSITIES
        and quantifier.scope_bound_hint == "unbounded"
    )
    return Preflight(
        quantifier=quantifier,
        guard_active=guard_active,
        claim_cap=guard_cap(quantifier, policy, profile_cap) if guard_active else None,
        claim_cap_profile=profile_cap,
        cap_enforced=guard_active and policy.quantifier_guard_apply_caps,
        rejected=rejected,
        reject_message=reject_message(quantifier) if rejected else None,
        exploratory=broad and policy.allow_broad,
    )


def plan_preflight_hash(
    questions: Iterable[str], model_profile_id: str, titles: TitleSet | None = None
) -> str:
    """The preflight node of a run's plan: a digest of every question's classification and
    profile cap, with the classifier's and the profile table's versions and the title list.

    Computed before anything is enqueued and kept in the manifest, so two runs whose
    questions were read differently (a changed classifier, cap table or corpus titles)
    differ in it even where no version string moved. The policy is bound by the
    manifest's own hashes; this one is equal across the runs of an A/B/D cycle
    (docs/grounding.md, 'Preflight, reject-broad, allow-broad', decision 8).
    """
    from qfarm.common.profiles import MODEL_PROFILES  # the table's caps, not just its version

    entries = []
    for question in dict.fromkeys(questions):
        q = classify_question_quantifier(question, titles)
        cap = cap_for_intensity(q.intensity, model_profile_id, q.explicit_count, {})
        entries.append([question, q.model_dump(mode="json"), cap])
    payload = {
        "classifier": versions.CLASSIFIER_VERSION,
        "profiles": versions.MODEL_PROFILES_VERSION,
        "profile_table": {k: dict(v) for k, v in MODEL_PROFILES.items()},
        "titles": titles.digest if titles is not None else None,
        "preflights": entries,
    }
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def rejected_verification() -> Verification:
    """The verification of a job that reject-broad stopped before the model call."""
    return Verification(
        verdict=Verdict.UNGROUNDED,
        label=Label.BROAD_REJECTED,
        violation_kinds=(ViolationKind.BROAD_QUANTIFIER_REJECTED,),
        tails=("broad rejected",),
    )
