"""Viewer at scale: a generated 100k-row run, indexed once, then filtered and paged.

Prints the one-off index build and the per-request figures (filter + page, search,
sort, row page, run page, a CSV and a JSONL export of every row) against a baseline measured in the same run: one plain
pass of ``json.loads`` over the file, what a viewer without an index would pay
on every request. The viewer alone, over a generated rows file: no run is involved.

With ``--real-run RUN_DIR`` (a run made with ``--keep-answers``) it also times
every row page of that run with re-verification (passages read from the
embedded index of the settings, the verifier and the sidecar run again)
against the same pages without an index, and counts the rows reproduced.

    .venv/bin/python -m bench.perf.viewer [--rows 100000] [--real-run RUN_DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qfarm.common.models import Manifest
from qfarm.common.policy import Policy, governance_policy_hash, verifier_policy_hash
from qfarm.producer.reports.rows import read_stats
from qfarm.producer.viewer.router import Viewer

MODES = ("quote", "claim_lattice_pointer", "claim_lattice")
VERDICTS = ("STRICT", "HYBRID", "UNGROUNDED")
KINDS = ("CITATION_MISMATCH", "NO_EVIDENCE_POINTER", "TITLE_MISMATCH", "FORMAT_COLLAPSED")
LABELS = ("EVIDENCE-WARRANTED", "ANCHOR-WARRANTED", "POINTER-LINKED", "UNGROUNDED")
INTENSITIES = ("SINGULAR", "PLURAL", "UNIVERSAL")


HASHES = (verifier_policy_hash(Policy()), governance_policy_hash(Policy()))


def synthetic_row(run_id: str, k: int, n: int) -> dict[str, Any]:
    """Row ``k`` of a generated run, shaped like the rows a sweep writes (fields of ``Row``)."""
    per_q = len(MODES) * n
    q, mode, i = k // per_q, MODES[(k // n) % len(MODES)], k % n
    error = "llm: endpoint timed out after 3 attempts" if k % 97 == 5 else None
    verdict = None if error else VERDICTS[(k * 7 + q) % 3]
    cited = 1 + k % 4
    return {
        "schema_version": 1, "run_id": run_id, "job_id": f"job{k:08d}",
        "question": f"Which river flows through city number {q}?", "question_id": f"q{q:06d}",
        "mode": mode, "sample_index": i, "verdict": verdict,
        "label": None if error else LABELS[(k + q) % 4],
        "ratio": None if error else (k % 5) / 4, "n_claims": 2, "n_verified": k % 3,
        "violation_kinds": [] if error or k % 3 else [KINDS[(k // 3) % len(KINDS)]],
        "quantifier_intensity": INTENSITIES[q % 3], "quantifier_matched_token": "which",
        "quantifier_explicit_count": None, "scope_bound_hint": "unknown",
        "claim_cap_applied": 1, "claim_cap_enforced": q % 2 == 0,
        "model_profile_id": "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic", "model_profile_key": "hermes-3-8b",
        "model": "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic",
        "endpoint": f"http://127.0.0.1:{8000 + k % 3}", "simulated": True,
        "retriever": "embedded", "evidence_ids": [f"E{j}" for j in range(1, 9)],
        "top_doc_titles": ["Seine", "Paris", "Rhine"], "top_scores": [9.5, 8.0, 7.0, 6.5, 6.0,
                                                                       5.0, 4.0, 3.0],
        "gold_in_claims": None, "gold_in_evidence": None,
        "verifier_policy_hash": HASHES[0], "governance_policy_hash": HASHES[1],
        "cache_hit": False, "attempts": 3 if error else 1, "error": error,
        "error_kind": "llm" if error else None,
        "timings": {"queue_wait_ms": 4.0, "retrieval_ms": 3.0, "llm_ms": 120.0 + k % 50,
                    "ttft_ms": None, "verify_ms": 2.0, "total_ms": 130.0 + k % 50},
        "usage": {"prompt_tokens": 800, "completion_tokens": 60}, "worker": "eager",
        "llm_request": {"sent_at": 1_700_000_000.0 + k, "ms": 120.0 + k % 50, "prompts": 1},
        "started_at": 1_700_000_000.0 + k, "finished_at": 1_700_000_000.2 + k,
        "answer": f'"The Seine flows through it." [E{cited}]\n"It is long." [E{cited + 1}]',
    }


def write_synthetic_run(root: Path, run_id: str, n_questions: int, n: int = 2,
                        *, status: str = "complete") -> Path:
    """A run directory (manifest, status, rows) with ``n_questions × 3 modes × n`` rows."""
    policy = Policy()
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    manifest = Manifest(
        run_id=run_id, created_at=1_700_000_000.0, question_file="bench/questions/smoke.txt",
        question_file_digest="sha256:1111", n_questions=n_questions, modes=MODES, n=n,
        n_jobs=n_questions * len(MODES) * n, policy=policy,
        verifier_policy_hash=verifier_policy_hash(policy),
        governance_policy_hash=governance_policy_hash(policy),
        model="adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic", model_profile_id="hermes-3-8b",
        simulated=True, keep_answers=True,
    )
    (run_dir / "manifest.json").write_text(manifest.model_dump_json())
    (run_dir / "status.json").write_text(json.dumps({"status": status,
                                                     "started_at": 1_700_000_000.0}))
    with (run_dir / "rows.jsonl").open("w") as fh:
        for k in range(manifest.n_jobs):
            fh.write(json.dumps(synthetic_row(run_id, k, n)) + "\n")
    return run_dir


def _best(fn: Callable[[], object], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--real-run", type=Path, default=None,
                        help="also time the re-verified row pages of this run directory")
    parser.add_argument("--quick", action="store_true", help="seconds, figures meaningless: 600 rows (CI)")
    args = parser.parse_args()
    if args.quick:
        args.rows = 600
    if args.real_run is not None:
        time_reverified_rows(args.real_run)
    with tempfile.TemporaryDirectory() as tmp:
        n_questions = max(1, args.rows // 6)
        run_dir = write_synthetic_run(Path(tmp), "bench-run", n_questions)
        rows_path = run_dir / "rows.jsonl"
        n_rows = sum(1 for _ in rows_path.open())

        def parse_all() -> None:
            with rows_path.open() as fh:
                for line in fh:
                    json.loads(line)

        baseline = _best(parse_all, 3)
        report_pass = _best(lambda: read_stats(rows_path), 1)
        viewer = Viewer(Path(tmp))
        t0 = time.perf_counter()
        viewer.handle("/runs/bench-run", {})
        build = time.perf_counter() - t0
        # Pages, rows and questions that exist in a run of any --rows (a small one too).
        page, row, question = min(1000, max(1, n_rows // 100)), min(77777, n_rows - 1), min(1234, n_questions - 1)
        cases: dict[str, tuple[str, dict[str, str]]] = {
            f"rows, no filter, page {page}": ("/runs/bench-run/rows", {"page": str(page)}),
            "rows, kind + mode filter": ("/runs/bench-run/rows",
                                         {"kind": "CITATION_MISMATCH", "mode": "quote"}),
            "rows, question text search": ("/runs/bench-run/rows", {"q": f"number {question}?"}),
            "rows, question + answer search": ("/runs/bench-run/rows", {"q": "[e3]"}),
            "rows, failures only": ("/runs/bench-run/rows", {"failures": "1"}),
            f"rows, sorted by latency, page {page}": ("/runs/bench-run/rows",
                                                    {"sort": "latency", "desc": "1",
                                                     "page": str(page)}),
            "row page": (f"/runs/bench-run/rows/{row}", {}),
            "run page": ("/runs/bench-run", {}),
        }
        print(f"{n_rows} rows, {rows_path.stat().st_size / 1e6:.1f} MB")
        print(f"baseline: one json.loads pass over the file   {baseline * 1000:8.1f} ms")
        print(f"qfarm report's pass (read_stats)             {report_pass * 1000:8.1f} ms"
              f"  ({report_pass / baseline:.2f}× baseline)")
        print(f"index build (once per file change)           {build * 1000:8.1f} ms"
              f"  ({build / baseline:.2f}× baseline)")
        for name, (path, query) in cases.items():
            assert viewer.handle(path, query).status == 200, name
            t = _best(lambda p=path, q=query: viewer.handle(p, q))
            print(f"{name:<44} {t * 1000:8.1f} ms  ({t / baseline:.3f}× baseline)")
        for fmt in ("jsonl", "csv"):  # every row, streamed to nowhere
            t = _best(lambda f=fmt: _drain(viewer, f"/runs/bench-run/rows.{f}"), 1)
            print(f"{'export of every row as ' + fmt.upper():<44} {t * 1000:8.1f} ms"
                  f"  ({t / baseline:.2f}× baseline)")


def _drain(viewer: Viewer, path: str) -> int:
    resp = viewer.handle(path, {"sort": "latency"})
    return sum(len(piece) for piece in resp.stream or ())


def time_reverified_rows(run_dir: Path) -> None:
    """Row pages of a real run, with and without re-verification, measured in the same run."""
    from qfarm.common.settings import load_settings

    index = load_settings().embedded_index_path()
    n = sum(1 for _ in (run_dir / "rows.jsonl").open())
    plain = Viewer(run_dir.parent, index_path=None)
    again = Viewer(run_dir.parent, index_path=index)
    paths = [f"/runs/{run_dir.name}/rows/{i}" for i in range(n)]
    reproduced = sum(b'id="reproduced"' in again.handle(p, {}).body for p in paths)
    base = _best(lambda: [plain.handle(p, {}) for p in paths], 3) / n
    with_index = _best(lambda: [again.handle(p, {}) for p in paths], 3) / n
    print(f"real run {run_dir.name}: {n} rows, {reproduced} reproduced by re-verification "
          f"(index {index})")
    print(f"row page without an index (baseline)         {base * 1000:8.2f} ms")
    print(f"row page re-verified from the index          {with_index * 1000:8.2f} ms"
          f"  ({with_index / base:.2f}× baseline)")


if __name__ == "__main__":
    main()
