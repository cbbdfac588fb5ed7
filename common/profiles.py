"""Model profiles: how many claims each quantifier rung may carry.

The rules and the table: docs/grounding.md, 'Profiles and caps'.

``cap_for_intensity`` resolves a cap in this order: the per-call override dict
(``Policy.quantifier_caps_by_intensity``) → the model's profile → the
``default`` profile. SMALL_NUM_EXPLICIT and COMPARATIVE_BOUND map to the
``EXPLICIT_COUNT`` sentinel in every profile: their cap is the question's own
number, falling back to the profile's MANY cap when no number was parsed.

Decisions where the rules left room:

* An override for SMALL_NUM_EXPLICIT or COMPARATIVE_BOUND replaces the
  explicit count (the override is the operator's word for this run).
* An unknown profile id resolves through the ``default`` profile (a new model
  is never an error; it simply gets the default caps).
* An explicit count of 0 (e.g. "top 0") gives a cap of 1: a cap below one
  would reject every answer, including a correct "none".
* An unknown intensity is a caller bug and raises ``InputError``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from qfarm.common.errors import InputError
from qfarm.common.vocab import ALL_INTENSITIES, Intensity

EXPLICIT_COUNT: Final = -1  # sentinel: use the question's explicit count
DEFAULT_PROFILE_ID: Final = "default"
HERMES_3_8B_PROFILE_ID: Final = "hermes-3-8b"
# Small instruct models served on CPU (SmolLM2-135M through llama.cpp's server): they
# restate one or two passages and drift into repetition when asked for more, so a
# broad rung asks for a handful of claims, not a dozen.
SMALL_LOCAL_PROFILE_ID: Final = "small-local"

_DEFAULT_CAPS = {
    Intensity.ABSENT: 1,
    Intensity.SINGULAR: 1,
    Intensity.PROPORTIONAL: 3,
    Intensity.SMALL_NUM_EXPLICIT: EXPLICIT_COUNT,
    Intensity.COMPARATIVE_BOUND: EXPLICIT_COUNT,
    Intensity.FEW: 5,
    Intensity.MANY: 12,
    Intensity.ALL: 12,
    Intensity.COMPREHENSIVE: 15,
    Intensity.OPEN_REQUEST: 12,
}
_HERMES_3_8B_CAPS = {
    Intensity.ABSENT: 1,
    Intensity.SINGULAR: 1,
    Intensity.PROPORTIONAL: 1,
    Intensity.SMALL_NUM_EXPLICIT: EXPLICIT_COUNT,
    Intensity.COMPARATIVE_BOUND: EXPLICIT_COUNT,
    Intensity.FEW: 5,
    Intensity.MANY: 8,
    Intensity.ALL: 8,
    Intensity.COMPREHENSIVE: 5,
    Intensity.OPEN_REQUEST: 5,
}
_SMALL_LOCAL_CAPS = {
    Intensity.ABSENT: 1,
    Intensity.SINGULAR: 1,
    Intensity.PROPORTIONAL: 1,
    Intensity.SMALL_NUM_EXPLICIT: EXPLICIT_COUNT,
    Intensity.COMPARATIVE_BOUND: EXPLICIT_COUNT,
    Intensity.FEW: 3,
    Intensity.MANY: 4,
    Intensity.ALL: 4,
    Intensity.COMPREHENSIVE: 4,
    Intensity.OPEN_REQUEST: 3,
}
MODEL_PROFILES: Final = MappingProxyType(
    {
        DEFAULT_PROFILE_ID: MappingProxyType(_DEFAULT_CAPS),
        HERMES_3_8B_PROFILE_ID: MappingProxyType(_HERMES_3_8B_CAPS),
        SMALL_LOCAL_PROFILE_ID: MappingProxyType(_SMALL_LOCAL_CAPS),
    }
)
# Served-model names (case-folded substrings) that take the small-local profile.
SMALL_LOCAL_MODEL_MARKERS: Final = ("smollm",)


def profile_id_for_model(model: str) -> str:
    """Model profile (docs/grounding.md, 'Profiles and caps') for a served model name."""
    folded = model.casefold()
    if "hermes-3" in folded and "8b" in folded:
        return HERMES_3_8B_PROFILE_ID
    if any(marker in folded for marker in SMALL_LOCAL_MODEL_MARKERS):
        return SMALL_LOCAL_PROFILE_ID
    return DEFAULT_PROFILE_ID


def _profile_cap(profile_id: str, intensity: Intensity) -> int:
    profile = MODEL_PROFILES.get(profile_id, MODEL_PROFILES[DEFAULT_PROFILE_ID])
    if intensity in profile:
        return profile[intensity]
    return MODEL_PROFILES[DEFAULT_PROFILE_ID][intensity]


def cap_for_intensity(
    intensity: str,
    model_profile_id: str,
    explicit_count: int | None,
    overrides: dict[str, int] | None,
) -> int:
    """The maximum number of claims an answer to this rung should carry."""
    if intensity not in ALL_INTENSITIES:  # a str from an override or a logged row
        raise InputError(
            f"unknown quantifier intensity {intensity!r}; "
            f"intensities are {[i.value for i in ALL_INTENSITIES]}"
        )
    if overrides and intensity in overrides:
        return max(1, int(overrides[intensity]))
    cap = _profile_cap(model_profile_id, Intensity(intensity))
    if cap == EXPLICIT_COUNT:
        if explicit_count is None:
            return _profile_cap(model_profile_id, Intensity.MANY)
        return max(1, explicit_count)
    return cap
