"""Rows before and after a change: a sweep's rows.jsonl minus what differs run to run.

A CPU optimisation of the worker must not change a row. This runs one sweep (the
general question set, every mode, ``-n`` samples, answers kept, cache off) through
real Celery workers on Redis with bundles, as ``qfarm sweep`` runs it, against the
zero-latency simulator (deterministic for a given prompt and seed), and writes the
rows with their run-specific fields removed (ids, clocks, timings, worker, endpoint
URL), sorted, one per line. Run it on the old code with ``--out old.jsonl`` and on the
new with ``--against old.jsonl``: it prints how many rows differ and exits non-zero
if any does.

    python -m bench.perf.rows_check --out /tmp/rows-before.jsonl
    python -m bench.perf.rows_check --against /tmp/rows-before.jsonl [--eager]

``--questions`` sweeps another question file (``-n 1`` on the 1,000 distinct tuning
questions checks what depends on each question's own words: its search and preflight).

``--cache`` checks the response cache: the sweep runs twice with ``--cache`` (the first run
fills the cache, the second is answered from it), and the second run's rows are the ones
written or compared, less the cache's own marks (``CACHE_MARKS``; removed from both sides),
so that a reference written without ``--cache`` must match them field for field:

    python -m bench.perf.rows_check --eager --out /tmp/rows-plain.jsonl
    python -m bench.perf.rows_check --eager --cache --against /tmp/rows-plain.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.perf.farmkit import REPO, bench_redis_url, exit_on_sigterm, farm_env, flush, workers

# What a run stamps on a row that is not its result.
VOLATILE = ("run_id", "job_id", "timings", "started_at", "finished_at", "worker", "endpoint",
            "llm_request")


# What says where a reply came from rather than what it was: a cached reply made no request.
CACHE_MARKS = ("attempts", "response_cache_hit", "model_ms_saved")


def normalised(row: dict[str, Any], drop: tuple[str, ...] = ()) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in VOLATILE and k not in drop}


def _key(row: dict[str, Any]) -> tuple:
    return (row["question_id"], row["mode"], row["sample_index"])


def run(n: int, bundle: int, eager: bool, first: int | None = None,
        question_file: Path = REPO / "bench/questions/general.jsonl", *,
        cache: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """The sweep's normalised rows; with ``cache``, those of the second of two runs with
    ``--cache`` (the first fills the response cache), less ``CACHE_MARKS``."""
    if not cache:
        return _run(n, bundle, eager, first, question_file, cache=False)
    filled = _run(n, bundle, eager, first, question_file, cache=True, drop=CACHE_MARKS)
    print(f"first run with --cache: rows={len(filled)}", flush=True)
    return _run(n, bundle, eager, first, question_file, cache=True, drop=CACHE_MARKS,
                keep_redis=True)


def _run(n: int, bundle: int, eager: bool, first: int | None, question_file: Path, *,
         cache: bool, drop: tuple[str, ...] = (), keep_redis: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    from qfarm.common.settings import Settings
    from qfarm.ops.sim.launch import start_simulator
    from qfarm.producer import QuestionSet, SweepSpec, run_sweep
    from qfarm.worker.retrieval import ensure_default_index

    tmp = Path(tempfile.mkdtemp(prefix="qfarm-rows-"))
    index = ensure_default_index(Settings(data_dir=tmp / "data"), progress=False)
    questions = QuestionSet.from_file(question_file)
    if first is not None:
        questions = QuestionSet.from_texts(questions.questions[:first], source=questions.source)
    spec = SweepSpec(questions=questions,
                     n=n, keep_answers=True, use_cache=False, response_cache=cache)
    with start_simulator(ttft_ms=0, tpot_ms=0, max_num_seqs=512) as sim:
        settings = Settings(redis_url=bench_redis_url(), llm_endpoints=sim.url, index_path=index,
                            bundle_size=bundle, results_dir=tmp / "results")
        if eager:
            result = run_sweep(spec, eager=True, settings=settings)
        else:
            if not keep_redis:  # the second run with --cache reads the first's replies there
                flush()
            env = farm_env(QFARM_LLM_ENDPOINTS=sim.url, QFARM_INDEX_PATH=str(index))
            spec_w = [("rows-cpu", "retrieve,verify", "prefork", 2),
                      ("rows-gpu", "generate", "threads", 8)]
            with workers(env, spec_w, tmp):
                result = run_sweep(spec, settings=settings)
    rows = [json.loads(line) for line in result.rows_path.read_text().splitlines() if line.strip()]
    hits = sum(1 for r in rows if r.get("response_cache_hit"))
    if cache:
        print(f"replies from the response cache: {hits} of {len(rows)}", flush=True)
    return sorted((normalised(r, drop) for r in rows), key=_key)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--bundle", type=int, default=None, help="jobs per message (default: the setting's)")
    ap.add_argument("--eager", action="store_true", help="run in-process instead of on workers")
    ap.add_argument("--out", type=Path, help="write the normalised rows here")
    ap.add_argument("--against", type=Path, help="compare with rows written by --out")
    ap.add_argument("--questions", type=Path, default=REPO / "bench/questions/general.jsonl",
                    help="question file (default: the general set); e.g. independent_tune.jsonl "
                         "for distinct questions, each searched and classified once")
    ap.add_argument("--cache", action="store_true",
                    help="run twice with --cache and check the second run's rows (from the "
                         "response cache), less the cache's own marks")
    ap.add_argument("--quick", action="store_true",
                    help="seconds: the first 10 questions, 1 sample (CI; not the fixed sweep to compare)")
    args = ap.parse_args()
    exit_on_sigterm()
    from qfarm.common.settings import Settings

    n, first = (1, 10) if args.quick else (args.n, None)
    rows = run(n, args.bundle or Settings().bundle_size, args.eager, first, args.questions,
               cache=args.cache)
    errors = sum(1 for r in rows if r["error"])
    print(f"rows={len(rows)} error_rows={errors}")
    if args.out:
        args.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        print(f"wrote {args.out}")
    if args.against:
        old = [json.loads(line) for line in args.against.read_text().splitlines() if line.strip()]
        if args.cache:  # a reference written without --cache carries its request counts
            old = [normalised(r, CACHE_MARKS) for r in old]
        old_by, new_by = {_key(r): r for r in old}, {_key(r): r for r in rows}
        differ = [k for k in old_by.keys() | new_by.keys() if old_by.get(k) != new_by.get(k)]
        for k in sorted(differ)[:5]:
            a, b = old_by.get(k) or {}, new_by.get(k) or {}
            fields = sorted(f for f in a.keys() | b.keys() if a.get(f) != b.get(f))
            print(f"differs: {k} fields={fields}")
        print(f"rows_compared={len(old_by)} rows_differing={len(differ)}")
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
