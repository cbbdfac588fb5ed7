"""The policy object, its overrides and its two hashes (docs/grounding.md, 'Policy and its hashes')."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from qfarm.common import versions
from qfarm.common.errors import PolicyError
from qfarm.common.policy import (
    GOVERNANCE_ONLY_FIELDS,
    VERIFIER_FIELDS,
    Policy,
    allowed_range,
    build_policy,
    governance_policy_hash,
    parse_overrides,
    policy_from_mapping,
    type_label,
    verifier_policy_hash,
)
from qfarm.common.vocab import Confidence

ROOT = Path(__file__).resolve().parents[2]

# One changed value per field: every field must appear here (checked below).
FLIPS: dict[str, Any] = {
    "top_k": 5,
    "title_boost": 3.0,
    "max_context_chars_by_mode": {"quote": 1000},
    "user_payload_layout": "bookend",
    "claim_lattice_max_claims_per_answer": 6,
    "min_claim_content_tokens": 2,
    "max_evidence_ids_per_claim": 2,
    "format_collapse_check_enabled": False,
    "quantifier_guard_enabled": False,
    "quantifier_guard_apply_caps": True,
    "quantifier_caps_by_intensity": {"ALL": 4},
    "quantifier_guard_modes": ["claim_lattice"],
    "quantifier_reminder_enabled": True,
    "quantifier_reject_broad": True,
    "allow_broad": True,
    "answerability_sidecar_enabled": False,
    "answerability_threshold": "strong",
    "answerability_proximity_chars": 300,
    "answerability_demote_enabled": True,
    "temperature": 0.0,
    "max_tokens": 256,
    "structured_output": True,
    "share_samples": True,
    "prompt_order": "evidence_first",
}


def test_every_field_has_a_flip_and_a_hash_list() -> None:
    fields = set(Policy.model_fields)
    assert set(FLIPS) == fields, "add the new field to FLIPS and to one hash list"
    assert set(VERIFIER_FIELDS) | set(GOVERNANCE_ONLY_FIELDS) == fields
    assert not set(VERIFIER_FIELDS) & set(GOVERNANCE_ONLY_FIELDS)


def test_documented_defaults() -> None:
    p = Policy()
    assert (p.top_k, p.claim_lattice_max_claims_per_answer, p.min_claim_content_tokens) == (
        8,
        12,
        3,
    )
    assert p.max_evidence_ids_per_claim == 3
    assert p.format_collapse_check_enabled and p.quantifier_guard_enabled
    assert not (p.quantifier_guard_apply_caps or p.quantifier_reminder_enabled)
    assert not (p.quantifier_reject_broad or p.allow_broad)
    assert p.quantifier_caps_by_intensity == {}
    assert p.quantifier_guard_modes == ("claim_lattice", "claim_lattice_pointer")
    assert p.answerability_sidecar_enabled and p.answerability_threshold == "medium"
    assert p.max_context_chars_by_mode == {
        m: 6000 for m in ("quote", "claim_lattice_pointer", "claim_lattice")
    }


@pytest.mark.parametrize("field", sorted(FLIPS))
def test_each_field_changes_exactly_the_hashes_it_folds_into(field: str) -> None:
    base, flipped = Policy(), build_policy({field: FLIPS[field]})
    assert flipped != base
    assert governance_policy_hash(flipped) != governance_policy_hash(base)
    changes_verifier = verifier_policy_hash(flipped) != verifier_policy_hash(base)
    assert changes_verifier is (field in VERIFIER_FIELDS)


def test_sidecar_settings_fold_into_the_governance_hash_only() -> None:
    assert {f for f in GOVERNANCE_ONLY_FIELDS if f.startswith("answerability_")} == {
        "answerability_sidecar_enabled",
        "answerability_threshold",
        "answerability_proximity_chars",
    }


def test_rule_set_versions_fold_into_the_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    p = Policy()
    v0, g0 = verifier_policy_hash(p), governance_policy_hash(p)
    monkeypatch.setattr(versions, "CLASSIFIER_VERSION", "quantifier-test")
    assert (verifier_policy_hash(p), governance_policy_hash(p) != g0) == (v0, True)
    monkeypatch.setattr(versions, "VERIFIER_VERSION", "verifier-test")
    assert verifier_policy_hash(p) != v0


def test_the_grammar_version_folds_in_only_while_grammars_are_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    free, constrained = Policy(), Policy(structured_output=True)
    before = [f(p) for p in (free, constrained) for f in (verifier_policy_hash, governance_policy_hash)]
    monkeypatch.setattr(versions, "GRAMMAR_VERSION", "grammar-test")
    after = [f(p) for p in (free, constrained) for f in (verifier_policy_hash, governance_policy_hash)]
    assert after[:2] == before[:2]  # runs without grammars keep their hashes
    assert after[2] != before[2] and after[3] != before[3]


def test_hashes_ignore_dict_and_set_order() -> None:
    a = build_policy(
        {
            "quantifier_caps_by_intensity": {"ALL": 4, "MANY": 6},
            "quantifier_guard_modes": ["claim_lattice", "quote"],
        }
    )
    b = build_policy(
        {
            "quantifier_caps_by_intensity": {"MANY": 6, "ALL": 4},
            "quantifier_guard_modes": ["quote", "claim_lattice"],
        }
    )
    assert verifier_policy_hash(a) == verifier_policy_hash(b)
    assert governance_policy_hash(a) == governance_policy_hash(b)


SCRIPT = """
import json
from qfarm.common.policy import build_policy, governance_policy_hash, verifier_policy_hash
p = build_policy({"quantifier_caps_by_intensity": {"MANY": 6, "ALL": 4}, "top_k": 5})
print(json.dumps([verifier_policy_hash(p), governance_policy_hash(p)]))
"""


@pytest.mark.slow  # starts a Python process
@pytest.mark.parametrize("hashseed", ["0", "12345"])
def test_hashes_are_stable_across_processes(hashseed: str) -> None:
    p = build_policy({"quantifier_caps_by_intensity": {"ALL": 4, "MANY": 6}, "top_k": 5})
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={"PYTHONHASHSEED": hashseed, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(out.stdout) == [verifier_policy_hash(p), governance_policy_hash(p)]


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (["top_k=5"], {"top_k": 5}),
        (["allow_broad=true"], {"allow_broad": True}),
        (["allow_broad=off"], {"allow_broad": False}),
        (
            ["quantifier_guard_modes=claim_lattice,quote"],
            {"quantifier_guard_modes": ["claim_lattice", "quote"]},
        ),
        (['quantifier_caps_by_intensity={"ALL": 4}'], {"quantifier_caps_by_intensity": {"ALL": 4}}),
        (["user_payload_layout=bookend"], {"user_payload_layout": "bookend"}),
    ],
)
def test_override_parsing(items: list[str], expected: dict[str, Any]) -> None:
    assert parse_overrides(items) == expected
    build_policy(parse_overrides(items))  # and they validate


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["top_k"], "expected key=value"),
        (["topk=5"], "unknown policy key"),
        (["quantifier_guard=false"], "did you mean"),
    ],
)
def test_override_parsing_errors(items: list[str], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_overrides(items)


@pytest.mark.parametrize(
    ("overrides", "where"),
    [
        ({"top_k": "many"}, "top_k"),
        ({"top_k": 0}, "top_k"),
        ({"user_payload_layout": "sideways"}, "user_payload_layout"),
        ({"quantifier_guard_modes": ["quote", "chat"]}, "quantifier_guard_modes"),
        ({"quantifier_caps_by_intensity": {"LOTS": 3}}, "quantifier_caps_by_intensity"),
        ({"quantifier_caps_by_intensity": {"ALL": 0}}, "quantifier_caps_by_intensity"),
        ({"answerability_threshold": "loud"}, "answerability_threshold"),
        ({"max_context_chars_by_mode": {"chat": 10}}, "max_context_chars_by_mode"),
    ],
)
def test_bad_values_are_policy_errors_naming_the_key(overrides: dict[str, Any], where: str) -> None:
    with pytest.raises(PolicyError, match=where) as info:
        build_policy(overrides)
    assert "qfarm policy" in str(info.value)  # says how to find the right value


@pytest.mark.parametrize(
    ("item", "allowed"),
    [
        ("title_boost=inf", "0 < title_boost <= 100"),
        ("title_boost=-inf", "0 < title_boost <= 100"),
        ("title_boost=Infinity", "0 < title_boost <= 100"),
        ("title_boost=NaN", "0 < title_boost <= 100"),
        ("title_boost=nan", "0 < title_boost <= 100"),
        ("title_boost=1e999", "0 < title_boost <= 100"),
        ("title_boost=1e6", "0 < title_boost <= 100"),
        ("temperature=NaN", "0.0 <= temperature <= 2.0"),
        ("temperature=inf", "0.0 <= temperature <= 2.0"),
        ("top_k=NaN", "1 <= top_k <= 100"),
        ("top_k=1e300", "1 <= top_k <= 100"),
        ("max_tokens=Infinity", "1 <= max_tokens <= 32768"),
        ("claim_lattice_max_claims_per_answer=100000", "<= 100"),
        ("answerability_proximity_chars=1e12", "<= 100000"),
        ('max_context_chars_by_mode={"quote": 1e999}', "from 0 to 200000"),
        ('max_context_chars_by_mode={"quote": 10000000}', "from 0 to 200000"),
        ('quantifier_caps_by_intensity={"ALL": 1000000}', "from 1 to 1000"),
    ],
)
def test_non_finite_and_out_of_range_values_are_refused_with_the_range(item: str, allowed: str) -> None:
    with pytest.raises(PolicyError) as info:
        build_policy(parse_overrides([item]))
    message = str(info.value)
    assert f"--policy {item.split('=')[0]}" in message and allowed in message, message


def test_every_numeric_key_has_a_range_and_the_readme_lists_it() -> None:
    readme = (ROOT / "README.md").read_text()
    numeric = [n for n, f in Policy.model_fields.items() if f.annotation in (int, float)]
    numeric += ["max_context_chars_by_mode", "quantifier_caps_by_intensity"]
    for name in numeric:
        allowed = allowed_range(name)
        assert allowed is not None, name
        assert f"| `{name}` | {allowed} |" in readme, f"README policy ranges: {name}"


def test_qfarm_policy_lists_the_values_of_a_vocabulary_key() -> None:
    # answerability_threshold is a Confidence enum; the listing must show its values,
    # not "<enum 'Confidence'>".
    label = type_label("answerability_threshold")
    assert all(f"'{c.value}'" in label for c in Confidence) and "enum" not in label
    assert type_label("top_k") == "<class 'int'>"


@pytest.mark.parametrize(
    "source",
    [
        lambda: build_policy(parse_overrides(["claim_lattice_format_collapse_check_enabled=false"])),
        lambda: build_policy({"claim_lattice_format_collapse_check_enabled": False}),
        lambda: policy_from_mapping({"claim_lattice_format_collapse_check_enabled": False}),
    ],
)
def test_the_seed_key_for_the_collapse_check_sets_the_field(source: Any) -> None:
    policy = source()
    assert policy.format_collapse_check_enabled is False
    assert policy == build_policy({"format_collapse_check_enabled": False})


def test_the_seed_key_and_the_field_disagreeing_is_an_error() -> None:
    with pytest.raises(PolicyError, match="format_collapse_check_enabled.*give one of the two"):
        parse_overrides(
            ["format_collapse_check_enabled=true", "claim_lattice_format_collapse_check_enabled=false"]
        )
