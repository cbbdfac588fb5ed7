"""`qfarm ask`: one question, one mode, answered with the audit line (or the row as JSON).

The asking is ``qfarm.producer.api.ask``: without ``--eager`` the job goes to the
``interactive`` queue, so it never waits behind a sweep; the command waits for
the row and fails clearly when no worker consumes that queue.
"""

from __future__ import annotations

import argparse
import json
import sys

from qfarm import runtime
from qfarm.common.errors import InputError
from qfarm.common.models import JobRecord, Row
from qfarm.common.settings import load_settings
from qfarm.producer.api import ask


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ask", help="answer one question and print its audit line")
    p.add_argument("question")
    p.add_argument("--mode", default="claim_lattice_pointer")
    p.add_argument("--eager", action="store_true", help="run in this process (no Redis, no workers)")
    p.add_argument("--json", action="store_true", help="print the row (and sidecar dict) as JSON")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the row")
    p.add_argument("--burn", action="store_true", help="bypass the result cache")
    runtime.add_local_model_flag(p)
    runtime.add_policy_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.local_model and not args.eager:
        raise InputError(
            "--local-model starts the server for this process only: use it with --eager, or "
            "start it with `qfarm local-model` and give the workers the variables it prints"
        )
    answer = ask(
        args.question,
        args.mode,
        eager=args.eager,
        policy=runtime.policy_from_args(args),
        use_cache=not args.burn,
        timeout_s=args.timeout,
        settings=load_settings(),
        endpoints=lambda s: runtime.llm_endpoints(s, quiet=args.json or not args.eager,
                                                   local_model=args.local_model),
    )
    _print(answer.row, answer.record, as_json=args.json)
    return 0 if not answer.row.error else 1


def _print(row: Row, record: JobRecord | None, *, as_json: bool) -> None:
    if as_json:
        data = row.model_dump(mode="json")
        data["answerability_detail"] = record.answerability.model_dump(mode="json") if record and record.answerability else None
        data["claims"] = (
            [c.model_dump(mode="json") for c in record.verification.claims]
            if record and record.verification
            else []
        )
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return
    from qfarm.common.reporting.audit import render_audit_block, render_claims

    if row.error:
        print(f"ERROR · via {row.mode.value} · {row.error}", file=sys.stderr)
    if record is not None and record.verification is not None:
        for line in render_audit_block(record):
            print(line)
        for line in render_claims(record):
            print("  " + line)
        if record.answerability:
            a = record.answerability
            print(f"  ! answerability: the answer denies evidence that may hold it "
                  f"({a.confidence_class}, {a.candidate_count} candidates)")
    elif row.grading is not None:  # cache hit: the verdict was computed in an earlier run
        g = row.grading
        print(f"{g.label} · via {row.mode.value} · cached  {g.n_verified}/{g.n_claims}")
