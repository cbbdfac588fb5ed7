"""`qfarm policy`: list every policy key with its type, default and range, and the hashes."""

from __future__ import annotations

import argparse
import json

from qfarm.common.policy import (
    GOVERNANCE_ONLY_FIELDS,
    POLICY_ALIASES,
    VERIFIER_FIELDS,
    Policy,
    allowed_range,
    build_policy,
    governance_policy_hash,
    parse_overrides,
    type_label,
    verifier_policy_hash,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("policy", help="list policy keys, defaults and hashes")
    p.add_argument("--policy", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", action="store_true", help="print the resolved policy as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    policy = build_policy(parse_overrides(args.policy))
    data = policy.model_dump(mode="json")
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return 0
    for name in Policy.model_fields:
        which = "verifier+governance" if name in VERIFIER_FIELDS else "governance"
        assert name in VERIFIER_FIELDS or name in GOVERNANCE_ONLY_FIELDS
        allowed = allowed_range(name)
        print(f"{name:40s} {json.dumps(data[name]):50s} [{which}]  {type_label(name)}"
              + (f"  ({allowed})" if allowed else ""))
    for alias, name in POLICY_ALIASES.items():
        print(f"{alias:40s} also accepted for {name}")
    print(f"\nverifier_policy_hash   {verifier_policy_hash(policy)}")
    print(f"governance_policy_hash {governance_policy_hash(policy)}")
    return 0
