"""Model profiles and ``cap_for_intensity`` (docs/grounding.md, 'Profiles and caps')."""

from __future__ import annotations

import pytest

from qfarm.common.errors import InputError
from qfarm.common.policy import (
    Policy,
    build_policy,
    governance_policy_hash,
    verifier_policy_hash,
)
from qfarm.common.profiles import (
    DEFAULT_PROFILE_ID,
    EXPLICIT_COUNT,
    HERMES_3_8B_PROFILE_ID,
    MODEL_PROFILES,
    SMALL_LOCAL_PROFILE_ID,
    cap_for_intensity,
    profile_id_for_model,
)
from qfarm.common.vocab import ALL_INTENSITIES

# The profile table of docs/grounding.md, restated here so a change to the profiles has to change the test too.
PROFILE_TABLE = {
    "ABSENT": (1, 1, 1),
    "SINGULAR": (1, 1, 1),
    "PROPORTIONAL": (1, 3, 1),
    "FEW": (5, 5, 3),
    "MANY": (8, 12, 4),
    "ALL": (8, 12, 4),
    "COMPREHENSIVE": (5, 15, 4),
    "OPEN_REQUEST": (5, 12, 3),
}
COUNTED = ("SMALL_NUM_EXPLICIT", "COMPARATIVE_BOUND")


@pytest.mark.parametrize("intensity", list(PROFILE_TABLE))
def test_every_rung_in_every_profile_matches_the_profile_table(intensity: str) -> None:
    hermes, default, small = PROFILE_TABLE[intensity]
    assert cap_for_intensity(intensity, HERMES_3_8B_PROFILE_ID, None, None) == hermes
    assert cap_for_intensity(intensity, DEFAULT_PROFILE_ID, None, None) == default
    assert cap_for_intensity(intensity, SMALL_LOCAL_PROFILE_ID, None, None) == small


@pytest.mark.parametrize(("model", "profile"), [
    ("adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic", HERMES_3_8B_PROFILE_ID),
    ("SmolLM2-135M-Instruct.Q4_1", SMALL_LOCAL_PROFILE_ID),
    ("HuggingFaceTB/SmolLM2-360M-Instruct", SMALL_LOCAL_PROFILE_ID),
    ("meta-llama/Llama-3.1-70B-Instruct", DEFAULT_PROFILE_ID),
])
def test_served_model_names_pick_their_profile(model: str, profile: str) -> None:
    assert profile_id_for_model(model) == profile


def test_profiles_cover_all_ten_rungs() -> None:
    for profile in MODEL_PROFILES.values():
        assert set(profile) == set(ALL_INTENSITIES)
        assert all(profile[i] == EXPLICIT_COUNT for i in COUNTED)


@pytest.mark.parametrize("intensity", COUNTED)
@pytest.mark.parametrize("profile", [HERMES_3_8B_PROFILE_ID, DEFAULT_PROFILE_ID, SMALL_LOCAL_PROFILE_ID])
def test_counted_rungs_use_the_explicit_count(intensity: str, profile: str) -> None:
    assert cap_for_intensity(intensity, profile, 3, None) == 3
    assert cap_for_intensity(intensity, profile, 20, None) == 20


@pytest.mark.parametrize("intensity", COUNTED)
def test_missing_explicit_count_falls_back_to_the_profiles_many_cap(intensity: str) -> None:
    assert cap_for_intensity(intensity, HERMES_3_8B_PROFILE_ID, None, None) == 8
    assert cap_for_intensity(intensity, DEFAULT_PROFILE_ID, None, None) == 12


def test_explicit_count_zero_still_allows_one_claim() -> None:
    assert cap_for_intensity("SMALL_NUM_EXPLICIT", DEFAULT_PROFILE_ID, 0, None) == 1


def test_override_beats_model_profile_beats_default() -> None:
    assert cap_for_intensity("ALL", HERMES_3_8B_PROFILE_ID, None, {"ALL": 3}) == 3
    assert cap_for_intensity("ALL", HERMES_3_8B_PROFILE_ID, None, {"MANY": 3}) == 8
    assert cap_for_intensity("ALL", "some-unknown-model", None, None) == 12


def test_override_replaces_the_explicit_count_sentinel() -> None:
    assert (
        cap_for_intensity("SMALL_NUM_EXPLICIT", DEFAULT_PROFILE_ID, 7, {"SMALL_NUM_EXPLICIT": 2})
        == 2
    )


def test_unknown_intensity_is_an_input_error() -> None:
    with pytest.raises(InputError, match="unknown quantifier intensity 'LOTS'"):
        cap_for_intensity("LOTS", DEFAULT_PROFILE_ID, None, None)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("quantifier_guard_enabled", False),
        ("quantifier_guard_apply_caps", True),
        ("quantifier_caps_by_intensity", {"ALL": 4}),
        ("quantifier_guard_modes", ["claim_lattice"]),
        ("claim_lattice_max_claims_per_answer", 6),
        ("quantifier_reminder_enabled", True),
        ("quantifier_reject_broad", True),
        ("allow_broad", True),
    ],
)
def test_both_hashes_change_when_a_cap_related_field_flips(key: str, value: object) -> None:
    base = Policy()
    flipped = build_policy({key: value})
    assert verifier_policy_hash(flipped) != verifier_policy_hash(base)
    assert governance_policy_hash(flipped) != governance_policy_hash(base)
