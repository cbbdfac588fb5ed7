"""The typed policy of a run, its overrides and its two hashes.

The rules: docs/grounding.md, 'Policy and its hashes'.

A policy is frozen: a run's jobs all carry the same one. Overrides come as
``key=value`` strings (``--policy``), are parsed as JSON where they look like
JSON and validated by pydantic, so a typo fails before anything is enqueued.

Which fields fold into which hash is one explicit list per hash:

* ``VERIFIER_FIELDS`` change what the model is asked or how its answer is
  verified; ``verifier_policy_hash`` covers exactly these plus the verifier and
  prompt versions.
* ``governance_policy_hash`` covers every field plus every rule-set version
  (classifier, denial patterns, extraction cues, verifier, prompt, model
  profiles) and every cap of every model profile, so editing one cap
  invalidates the cache. The
  answerability sidecar's settings fold into this hash only, and so does
  ``share_samples``, only while it is on.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, Literal, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from qfarm.common import versions
from qfarm.common.errors import PolicyError
from qfarm.common.vocab import ALL_INTENSITIES, ALL_MODES, LATTICE_MODES, Confidence

# Bounds of the values inside the two per-mode / per-intensity maps (inclusive).
CONTEXT_CHARS_RANGE = (0, 200_000)
QUANTIFIER_CAP_RANGE = (1, 1000)


class Policy(BaseModel):
    """Every knob that changes what a job asks or how it is judged."""

    # allow_inf_nan=False: an infinite or NaN knob (``title_boost=inf``) is refused at parse
    # time; downstream it would make a job that can never be serialised or scored.
    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_default=True, allow_inf_nan=False
    )

    # retrieval and prompt
    top_k: int = Field(8, ge=1, le=100)
    title_boost: float = Field(2.0, gt=0, le=100)
    max_context_chars_by_mode: dict[str, int] = Field(
        default_factory=lambda: {m.value: 6000 for m in ALL_MODES}
    )
    user_payload_layout: Literal["tail", "bookend", "per_chunk"] = "tail"
    # Where the evidence stands: after the mode's instructions (the default), or first, after
    # a system turn every mode shares, so a question's prompts in every mode open alike up to
    # the end of the evidence and a server's prefix cache prefills it once for all of them
    # (docs/grounding.md, 'Prompts'). Changes the prompt, so it folds into both hashes, but
    # only while set away from the default: runs without it keep their hashes.
    prompt_order: Literal["instructions_first", "evidence_first"] = "instructions_first"
    # claims
    claim_lattice_max_claims_per_answer: int = Field(12, ge=1, le=100)
    min_claim_content_tokens: int = Field(3, ge=0, le=100)
    max_evidence_ids_per_claim: int = Field(3, ge=1, le=100)
    format_collapse_check_enabled: bool = True
    # quantifier guard
    quantifier_guard_enabled: bool = True
    quantifier_guard_apply_caps: bool = False
    quantifier_caps_by_intensity: dict[str, int] = Field(default_factory=dict)
    quantifier_guard_modes: tuple[str, ...] = tuple(sorted(m.value for m in LATTICE_MODES))
    quantifier_reminder_enabled: bool = False
    quantifier_reject_broad: bool = False
    allow_broad: bool = False
    # answerability sidecar (governance hash only)
    answerability_sidecar_enabled: bool = True
    answerability_threshold: Confidence = Confidence.MEDIUM
    answerability_proximity_chars: int = Field(600, ge=1, le=100_000)
    # opt-in: a row the sidecar flags is demoted (verifier hash: it moves a verdict)
    answerability_demote_enabled: bool = False
    # sampling
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    max_tokens: int = Field(512, ge=1, le=32768)
    # Each request carries its mode's grammar (common/grounding/grammars.py): the server
    # decodes only the contract's form. Off by default: the design measures before it turns
    # a prompt-changing switch on.
    structured_output: bool = False
    # The samples of one question x mode share one request with ``n`` completions (the
    # prompt prefilled once), their seeds following vLLM's rule for the choices of one
    # request (docs/llm.md, 'Shared samples'). Changes which answers a run gets, so it
    # folds into the governance hash, but only while on: runs without it keep their hash.
    share_samples: bool = False

    @field_validator("max_context_chars_by_mode")
    @classmethod
    def _known_modes_only(cls, value: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(value) - set(ALL_MODES))
        if unknown:
            raise ValueError(f"unknown mode(s) {unknown}; modes are {[m.value for m in ALL_MODES]}")
        lo, hi = CONTEXT_CHARS_RANGE
        if any(not lo <= v <= hi for v in value.values()):
            raise ValueError(f"character caps must be between {lo} and {hi}")
        return {m.value: value.get(m, 6000) for m in ALL_MODES}

    @field_validator("quantifier_guard_modes")
    @classmethod
    def _guard_modes_known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(value) - set(ALL_MODES))
        if unknown:
            raise ValueError(f"unknown mode(s) {unknown}; modes are {[m.value for m in ALL_MODES]}")
        return tuple(sorted(set(value)))

    @field_validator("quantifier_caps_by_intensity")
    @classmethod
    def _caps_known(cls, value: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(value) - set(ALL_INTENSITIES))
        if unknown:
            raise ValueError(
                f"unknown intensity {unknown}; intensities are {[i.value for i in ALL_INTENSITIES]}"
            )
        lo, hi = QUANTIFIER_CAP_RANGE
        if any(not lo <= v <= hi for v in value.values()):
            raise ValueError(f"caps must be between {lo} and {hi}")
        return dict(sorted(value.items()))

    def context_chars(self, mode: str) -> int:
        return self.max_context_chars_by_mode.get(mode, 6000)


# Other names a key is accepted under, each mapped to the field it sets. The design's seed
# policy spelled the collapse switch with its modes' prefix; configs written from it keep working.
POLICY_ALIASES: dict[str, str] = {
    "claim_lattice_format_collapse_check_enabled": "format_collapse_check_enabled",
}


def canonical_overrides(overrides: Mapping[str, Any], prefix: str = "--policy ") -> dict[str, Any]:
    """``overrides`` with every alias replaced by its field's name.

    An alias and its field both given with different values is an error: which one
    was meant cannot be told.
    """
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        name = POLICY_ALIASES.get(key, key)
        if name in out and out[name] != value:
            raise PolicyError(
                f"{prefix}{key}: sets {name}, which is also given with another value "
                f"({out[name]!r}); give one of the two"
            )
        out[name] = value
    return out


# The CPU policy (docs/llm.md, 'A real model on this machine'): what `--local-model` runs
# with before the operator's own --policy overrides. A small model on two cores reads about
# 70 prompt tokens a second and writes about 24, so the prompt is what costs: three passages
# (of at most 800 characters each) in at most 2,400 characters keep a prompt near 800
# tokens (about 11 s), and 160 new tokens (about 7 s) are more than a 135M model writes
# before it repeats itself. Prompt plus budget fits the 2,048-token window the launcher
# opens. What the shorter evidence costs in recall is measured in the same section.
LOCAL_CPU_CONTEXT_CHARS = 2400
LOCAL_CPU_POLICY: Mapping[str, Any] = {
    "top_k": 3,
    "max_context_chars_by_mode": {m.value: LOCAL_CPU_CONTEXT_CHARS for m in ALL_MODES},
    "max_tokens": 160,
}


def type_label(name: str) -> str:
    """A policy key's type as ``qfarm policy`` shows it; a vocabulary enum lists its values."""
    annotation = Policy.model_fields[name].annotation
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        return str(Literal[tuple(m.value for m in annotation)])
    return str(annotation)


def allowed_range(name: str) -> str | None:
    """A numeric policy key's allowed values, e.g. ``0 < title_boost <= 100``; None if not numeric."""
    if name == "max_context_chars_by_mode":
        return "each mode's cap from {} to {}".format(*CONTEXT_CHARS_RANGE)
    if name == "quantifier_caps_by_intensity":
        return "each cap from {} to {}".format(*QUANTIFIER_CAP_RANGE)
    field = Policy.model_fields[name]
    if field.annotation not in (int, float):
        return None
    low = high = ""
    for bound in field.metadata:
        for attr, text in (("ge", "{} <= "), ("gt", "{} < ")):
            if getattr(bound, attr, None) is not None:
                low = text.format(getattr(bound, attr))
        for attr, text in (("le", " <= {}"), ("lt", " < {}")):
            if getattr(bound, attr, None) is not None:
                high = text.format(getattr(bound, attr))
    kind = "an integer" if field.annotation is int else "a finite number"
    return f"{kind}, {low}{name}{high}"


VERIFIER_FIELDS: tuple[str, ...] = (
    "top_k",
    "title_boost",
    "max_context_chars_by_mode",
    "user_payload_layout",
    "prompt_order",
    "claim_lattice_max_claims_per_answer",
    "min_claim_content_tokens",
    "max_evidence_ids_per_claim",
    "format_collapse_check_enabled",
    "quantifier_guard_enabled",
    "quantifier_guard_apply_caps",
    "quantifier_caps_by_intensity",
    "quantifier_guard_modes",
    "quantifier_reminder_enabled",
    "quantifier_reject_broad",
    "allow_broad",
    "temperature",
    "max_tokens",
    "structured_output",
    "answerability_demote_enabled",
)
GOVERNANCE_ONLY_FIELDS: tuple[str, ...] = (
    "answerability_sidecar_enabled",
    "answerability_threshold",
    "answerability_proximity_chars",
    "share_samples",
)


def _digest(payload: dict[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


# Every row carries both hashes of its job's policy, and a run's jobs all share one policy:
# the hashes are memoised by the policy's JSON (pydantic's Rust dump, a few µs), which
# names every field's value, by the rule-set version stamps and by the identity of the
# (immutable) profile table, so an equal key means an equal hash. The dump and
# SHA-256 they replace were about a tenth of the verify worker's CPU.
_HASH_MEMO_SIZE = 256
_hash_memo: dict[tuple[str, str, tuple[object, ...]], str] = {}


def _memoised(kind: str, policy: Policy, compute: Callable[[Policy], str]) -> str:
    from qfarm.common.profiles import MODEL_PROFILES  # imported here: it imports this module

    stamps = (
        id(MODEL_PROFILES),
        versions.MODEL_PROFILES_VERSION,
        versions.CLASSIFIER_VERSION,
        versions.DENIAL_PATTERNS_VERSION,
        versions.EXTRACTION_CUES_VERSION,
        versions.VERIFIER_VERSION,
        versions.PROMPT_VERSION,
        versions.GRAMMAR_VERSION,
    )
    key = (kind, policy.model_dump_json(), stamps)
    found = _hash_memo.get(key)
    if found is None:
        if len(_hash_memo) >= _HASH_MEMO_SIZE:
            _hash_memo.clear()  # a handful of policies per process: a reset is simpler than LRU
        found = _hash_memo[key] = compute(policy)
    return found


def verifier_policy_hash(policy: Policy) -> str:
    """Hash of the fields that change the prompt or the verification."""
    return _memoised("verifier", policy, _verifier_policy_hash)


def governance_policy_hash(policy: Policy) -> str:
    """Hash of every policy field, every rule-set version and the model-profile caps."""
    return _memoised("governance", policy, _governance_policy_hash)


def _unless_set(policy: Policy) -> set[str]:
    """The switches a hash leaves out while at their defaults: the hashes runs had before
    the switch existed."""
    out: set[str] = set()
    if not policy.share_samples:
        out.add("share_samples")
    if policy.prompt_order == "instructions_first":
        out.add("prompt_order")
    return out


def _verifier_policy_hash(policy: Policy) -> str:
    data = policy.model_dump(mode="json")
    left_out = _unless_set(policy)
    payload = {k: data[k] for k in VERIFIER_FIELDS if k not in left_out}
    payload["_versions"] = {
        "verifier": versions.VERIFIER_VERSION,
        "prompt": versions.PROMPT_VERSION,
        **_grammar_version(policy),
    }
    return _digest(payload)


def _grammar_version(policy: Policy) -> dict[str, str]:
    """The grammar rules' version, for a policy that sends grammars: a changed grammar changes
    what the model may write, as a changed prompt does."""
    return {"grammar": versions.GRAMMAR_VERSION} if policy.structured_output else {}


def _governance_policy_hash(policy: Policy) -> str:
    # Imported here: qfarm.common.profiles imports this module.
    from qfarm.common.profiles import MODEL_PROFILES

    payload = policy.model_dump(mode="json", exclude=_unless_set(policy))
    payload["_model_profiles"] = {pid: dict(caps) for pid, caps in MODEL_PROFILES.items()}
    payload["_versions"] = {
        "model_profiles": versions.MODEL_PROFILES_VERSION,
        "classifier": versions.CLASSIFIER_VERSION,
        "denial_patterns": versions.DENIAL_PATTERNS_VERSION,
        "extraction_cues": versions.EXTRACTION_CUES_VERSION,
        "verifier": versions.VERIFIER_VERSION,
        "prompt": versions.PROMPT_VERSION,
        **_grammar_version(policy),
    }
    return _digest(payload)


def _is_list_field(key: str) -> bool:
    return get_origin(Policy.model_fields[key].annotation) in (tuple, list)


def _parse_list(key: str, text: str) -> list[str]:
    """``a,b,c`` for a list-valued key: one element is a list of one, empty is an empty list."""
    if not text:
        return []
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise PolicyError(
            f"--policy {key}={text}: empty element in the comma list; "
            f'write {key}=a,b or {key}=\'["a", "b"]\''
        )
    return parts


def _parse_value(raw: str, key: str | None = None) -> Any:
    """JSON where it parses (numbers, booleans, lists, objects), else the bare string.

    A list-valued key also takes a comma list (``quantifier_guard_modes=quote,claim_lattice``).
    """
    text = raw.strip()
    if key is not None and _is_list_field(key) and not text.startswith("["):
        return _parse_list(key, text)
    lowered = text.lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        if "," in text and not text.startswith(("{", "[")):
            return [part.strip() for part in text.split(",") if part.strip()]
        return text


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Turn ``["key=value", ...]`` into a dict, rejecting unknown keys at once."""
    known = set(Policy.model_fields) | set(POLICY_ALIASES)
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise PolicyError(f"--policy {item!r}: expected key=value, e.g. --policy top_k=5")
        key, raw = item.split("=", 1)
        key = key.strip()
        if key not in known:
            close = [k for k in sorted(known) if key.split("_")[0] in k][:3]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise PolicyError(
                f"--policy {key}: unknown policy key{hint}; run `qfarm policy` to list the keys"
            )
        out[key] = _parse_value(raw, POLICY_ALIASES.get(key, key))
    return canonical_overrides(out)


def policy_from_mapping(data: Mapping[str, Any], where: str = "policy") -> Policy:
    """A policy from a JSON object (the HTTP API's ``policy``): an unknown key is refused
    with the nearest known name, a bad value with the key's allowed range."""
    known = sorted(Policy.model_fields)
    for key in data:
        if key not in known and key not in POLICY_ALIASES:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
            hint = f"; nearest: {close[0]}" if close else ""
            raise PolicyError(
                f"{where}.{key}: unknown policy key{hint}; the keys are {', '.join(known)}"
            )
    return build_policy(dict(data), prefix=f"{where}.")


def build_policy(overrides: dict[str, Any] | None = None, base: Policy | None = None, *,
                 prefix: str = "--policy ") -> Policy:
    """Apply overrides on top of ``base`` (defaults if None), validating every value.
    ``prefix`` names where the override came from in messages (a flag, a JSON field)."""
    data = (base or Policy()).model_dump()
    data.update(canonical_overrides(overrides or {}, prefix))
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "policy"
        msg = str(first["msg"]).removeprefix("Value error, ")
        allowed = allowed_range(str(first["loc"][0])) if first["loc"] else None
        raise PolicyError(
            f"{prefix}{where}: {msg} (got {first.get('input')!r})"
            + (f"; allowed: {allowed}" if allowed else "")
            + "; run `qfarm policy` to see each key's type, default and range"
        ) from exc
