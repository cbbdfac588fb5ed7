"""What the run record and ``--retry-errors`` cost on a large run, against the summary's own
pass over the rows (measured in the same process, so a busy machine shifts both).

Run: ``.venv/bin/python -m bench.perf.record_cost [--rows 20000] [--dir /tmp/qfarm-record-cost]``

Writes a synthetic run of ``--rows`` rows (one in ten an error row, with a retry row for
each in ``retry.jsonl``), then times: merging the retry rows into ``rows.jsonl``, writing
the record, and ``qfarm verify``'s checks; each is printed with its ratio to
``read_stats`` (the pass over rows.jsonl that every summary makes).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from qfarm.common.models import Manifest, Mode, Row
from qfarm.common.policy import Policy, governance_policy_hash, verifier_policy_hash
from qfarm.producer.reports.record import verify_run, write_record
from qfarm.producer.reports.rows import read_stats
from qfarm.producer.reports.summary import write_summary
from qfarm.producer.rundir import write_json_atomic
from qfarm.producer.runs.retry import merge_retry_rows


def make_run(run_dir: Path, n: int) -> None:
    policy = Policy()
    manifest = Manifest(
        run_id=run_dir.name, created_at=0.0, question_file="<bench>",
        question_file_digest="sha256:0", n_questions=n, modes=(Mode.QUOTE,), n=1, n_jobs=n,
        policy=policy, verifier_policy_hash=verifier_policy_hash(policy),
        governance_policy_hash=governance_policy_hash(policy), model="m",
        model_profile_id="default")
    write_json_atomic(run_dir / "manifest.json", manifest.model_dump(mode="json"))
    with (run_dir / "rows.jsonl").open("w") as rows, (run_dir / "retry.jsonl").open("w") as retry:
        for i in range(n):
            failed = i % 10 == 0
            row = Row(run_id=run_dir.name, job_id=f"j{i}", question="q?", question_id=f"q{i}",
                      mode=Mode.QUOTE, sample_index=0, model="m",
                      verifier_policy_hash=manifest.verifier_policy_hash,
                      governance_policy_hash=manifest.governance_policy_hash,
                      error="llm: down" if failed else None, error_kind="llm" if failed else None)
            rows.write(row.model_dump_json() + "\n")
            if failed:
                retry.write(row.model_copy(update={"error": None, "error_kind": None,
                                                   "retried_errors": ["llm"]}).model_dump_json()
                            + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/qfarm-record-cost"))
    ap.add_argument("--quick", action="store_true", help="500 rows: checks the script runs")
    args = ap.parse_args()
    if args.quick:
        args.rows = 500
    run_dir = args.dir / "bench-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    make_run(run_dir, args.rows)
    t = time.perf_counter()
    replaced = merge_retry_rows(run_dir)
    merge_s = time.perf_counter() - t
    (run_dir / "status.json").write_text(json.dumps({"status": "complete", "finished_at": 1.0}))
    write_summary(run_dir)
    t = time.perf_counter()
    write_record(run_dir)
    record_s = time.perf_counter() - t
    t = time.perf_counter()
    failed = [c.what for c in verify_run(run_dir) if c.ok is False]
    verify_s = time.perf_counter() - t
    t = time.perf_counter()
    read_stats(run_dir / "rows.jsonl")
    base_s = time.perf_counter() - t
    print(f"{args.rows} rows, {replaced} replaced by retry rows; failed checks: {failed or 'none'}")
    for name, secs in (("merge retry rows", merge_s), ("write record", record_s),
                       ("verify", verify_s), ("read_stats (baseline)", base_s)):
        print(f"  {name:<22} {secs:6.2f} s  x{secs / base_s:.2f} of read_stats")
    print(f"record_verify_ratio={verify_s / base_s:.2f}")


if __name__ == "__main__":
    main()
