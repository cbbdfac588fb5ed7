"""Shared samples: one request with n choices per question x mode, against one request per job.

The ``general`` workload of bench/perf/saturation.py (the 152 questions of general.jsonl,
quote mode, 13 samples each: 1,976 jobs) is swept eagerly on the same two simulated vLLM
endpoints (the published 8B-on-H100 latency profile) three ways, alternating, after an
untimed warm-up of each: every job its own request; the same with prefix affinity
(``QFARM_LLM_PREFIX_AFFINITY``: identical prompts to one endpoint, docs/llm.md); and
``share_samples`` (docs/llm.md, 'Shared samples'). Printed per run: requests the endpoints
received (their request logs), prompt tokens the rows count (the cost table's), wall time
of the run API call, and each way's ratios against the first measured in the same process.
All SIMULATED: the latency profile charges a sequence its TTFT and per-token time whatever
its prompt, so it shows what sharing saves in requests and prompt tokens; ``--cost`` (the
cost engine with vLLM's prefix cache) also prints the prefill and decode seconds charged,
which is where affinity shows.

    .venv/bin/python -m bench.perf.shared_samples [--questions 152] [-n 13] [--repeat 2] [--cost] [--affinity 16] [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from bench.perf.saturation import QUESTIONS, WORKLOADS, table_index
from qfarm.common.models import Mode
from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.producer import SweepSpec, run_sweep
from qfarm.producer.api import QuestionSet

TTFT_MS, TPOT_MS = (60.0, 120.0), (10.0, 15.0)  # the published 8B-on-H100 profile
MAX_NUM_SEQS = 64


@dataclass(frozen=True)
class Figures:
    jobs: int
    rows: int
    errors: int
    requests: int
    prompt_tokens: int
    wall_s: float
    charged: dict[str, float]  # the cost engine's model seconds (--cost), summed over endpoints


def sweep(sims: Sequence[SimulatorHandle], questions: QuestionSet, n: int, *,
          share: bool, affinity: int = 0) -> Figures:  # fmt: skip
    for sim in sims:
        sim.reset()  # the request log and the prefix cache; the charged seconds run on
    before = [_charged(sim.stats()) for sim in sims]
    tmp = Path(tempfile.mkdtemp(prefix="qfarm-shared-"))
    settings = Settings(llm_endpoints=",".join(s.url for s in sims), index_path=table_index(),
                        results_dir=tmp / "results", bundle_size=n,  # a bundle per question
                        llm_prefix_affinity=affinity)
    spec = SweepSpec(questions=questions, modes=[Mode.QUOTE], n=n,
                     policy=Policy(share_samples=share), use_cache=False)
    t0 = time.perf_counter()
    result = run_sweep(spec, eager=True, settings=settings)
    wall = time.perf_counter() - t0
    rows = result.rows()
    stats = [s.stats() for s in sims]
    requests = sum(1 for st in stats for r in st["requests"] if "completions" in r["path"])
    charged: dict[str, float] = {}
    for st, was in zip(stats, before, strict=True):
        for key, value in _charged(st).items():
            charged[key] = charged.get(key, 0.0) + value - was.get(key, 0.0)
    return Figures(
        jobs=result.manifest.n_jobs, rows=len(rows), errors=sum(1 for r in rows if r.error),
        requests=requests, prompt_tokens=sum(r.usage.prompt_tokens or 0 for r in rows),
        wall_s=wall, charged=charged,
    )


def _charged(stats: dict) -> dict[str, float]:
    """The cost engine's running totals of model seconds (none without --cost)."""
    return {k: float(v) for k, v in (stats.get("charged") or {}).items()
            if isinstance(v, (int, float))}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=152, help="questions of general.jsonl (152)")
    p.add_argument("-n", type=int, default=13, help="samples per question (13)")
    p.add_argument("--repeat", type=int, default=2, help="runs of each (alternated; 2)")
    p.add_argument("--cost", action="store_true",
                   help="the simulator's cost engine (--latency cost: prefill per uncached "
                        "prompt token, vLLM's prefix cache) instead of the latency profile; "
                        "prints the model seconds it charged")
    p.add_argument("--time-scale", type=float, default=0.2,
                   help="--cost: the engine's sleeps x this (the seconds charged are not scaled)")
    p.add_argument("--affinity", type=int, default=16,
                   help="the third arm's QFARM_LLM_PREFIX_AFFINITY: one request per job, "
                        "identical prompts to one endpoint within this many requests (16)")
    p.add_argument("--quick", action="store_true",
                   help="seconds, figures meaningless: 4 questions x 3 samples, zero latency (CI)")
    args = p.parse_args(argv)
    arms = {  # label: (share_samples, prefix affinity)
        "one request per job": (False, 0),
        f"one request per job, affinity {args.affinity}": (False, args.affinity),
        "share_samples": (True, 0),
    }
    if args.quick:
        args.questions, args.n, args.repeat = 4, 3, 1
    every = QuestionSet.from_file(QUESTIONS / WORKLOADS["general"][0])
    questions = replace(every, questions=every.questions[: args.questions])
    latency: dict[str, object] = {"ttft_ms": TTFT_MS, "tpot_ms": TPOT_MS}
    if args.cost:
        latency = {"latency": "cost", "time_scale": args.time_scale}
    elif args.quick:
        latency = {"latency": "zero"}
    with ExitStack() as stack:
        sims = [stack.enter_context(start_simulator(max_num_seqs=MAX_NUM_SEQS, **latency))
                for _ in range(2)]  # fmt: skip
        print(f"endpoints: 2 vLLM SIMULATORS, max_num_seqs={MAX_NUM_SEQS}, "
              + (f"cost engine (time scale {args.time_scale:g})" if args.cost
                 else "zero latency" if args.quick else
                 f"ttft {TTFT_MS[0]:g}-{TTFT_MS[1]:g} ms, tpot {TPOT_MS[0]:g}-{TPOT_MS[1]:g} ms"))
        print(f"workload: general, {len(questions.questions)} questions x quote x {args.n} samples")
        # Untimed: the index opened, the simulators and this process warm, before either runs.
        warm = replace(questions, questions=questions.questions[:4])
        for share, affinity in arms.values():
            sweep(sims, warm, args.n, share=share, affinity=affinity)
        runs: dict[str, list[Figures]] = {label: [] for label in arms}
        for _ in range(args.repeat):
            for label, (share, affinity) in arms.items():
                runs[label].append(sweep(sims, questions, args.n, share=share, affinity=affinity))
    print("\n| SIMULATED | jobs | rows | error rows | requests | prompt tokens | wall s |")
    print("|---|---|---|---|---|---|---|")
    for label, figures in runs.items():
        for f in figures:
            print(f"| {label} | {f.jobs} | {f.rows} | {f.errors} | {f.requests} | "
                  f"{f.prompt_tokens} | {f.wall_s:.1f} |")
    base_label = next(iter(arms))
    base = runs[base_label]
    req_ratio = 1.0
    for label, figures in list(runs.items())[1:]:
        ratio = sum(f.requests for f in figures) / max(1, sum(f.requests for f in base))
        tok_ratio = sum(f.prompt_tokens for f in figures) / max(1, sum(f.prompt_tokens for f in base))
        wall_ratio = sum(f.wall_s for f in figures) / max(1e-9, sum(f.wall_s for f in base))
        print(f"\nSIMULATED ratios, {label} / {base_label}: requests {ratio:.3f}, "
              f"prompt tokens {tok_ratio:.3f}, wall time {wall_ratio:.2f}")
        if args.cost:
            for key in ("prefill_s", "decode_s", "busy_s"):
                a = sum(f.charged.get(key, 0.0) for f in base)
                b = sum(f.charged.get(key, 0.0) for f in figures)
                print(f"charged {key}: {base_label} {a:.2f}, {label} {b:.2f}, "
                      f"ratio {b / a if a else float('nan'):.3f}")
        if arms[label][0]:
            req_ratio = ratio
    print(f"shared_requests_ratio={req_ratio:.3f}")


if __name__ == "__main__":
    main()
