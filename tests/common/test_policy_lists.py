"""List-valued policy keys take a comma list as well as JSON."""

from __future__ import annotations

import pytest

from qfarm.common.errors import PolicyError
from qfarm.common.policy import Policy, build_policy, parse_overrides
from qfarm.common.vocab import ALL_MODES


def policy_from(item: str) -> Policy:
    return build_policy(parse_overrides([item]))


LIST_KEYS = [k for k, f in Policy.model_fields.items() if "tuple" in str(f.annotation)]


def test_the_list_valued_keys_are_known() -> None:
    assert LIST_KEYS == ["quantifier_guard_modes"]


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (
            "quantifier_guard_modes=claim_lattice,claim_lattice_pointer",
            ("claim_lattice", "claim_lattice_pointer"),
        ),
        ("quantifier_guard_modes=claim_lattice", ("claim_lattice",)),
        ("quantifier_guard_modes= quote , claim_lattice ", ("claim_lattice", "quote")),
        ('quantifier_guard_modes=["claim_lattice", "quote"]', ("claim_lattice", "quote")),
        ("quantifier_guard_modes=", ()),
    ],
)
def test_comma_list_and_json_give_the_same_policy(item: str, expected: tuple[str, ...]) -> None:
    assert policy_from(item).quantifier_guard_modes == expected


def test_a_bad_element_names_the_key_and_the_allowed_values() -> None:
    with pytest.raises(PolicyError) as err:
        policy_from("quantifier_guard_modes=claim_lattice,pointer")
    message = str(err.value)
    assert "quantifier_guard_modes" in message and "'pointer'" in message
    assert all(mode in message for mode in ALL_MODES)
    assert "Value error" not in message


def test_an_empty_element_is_an_error_not_silently_dropped() -> None:
    with pytest.raises(PolicyError, match="quantifier_guard_modes.*empty element"):
        policy_from("quantifier_guard_modes=claim_lattice,,quote")
