"""Endpoint saturation: how close the gateway gets to what two endpoints can serve.

Two simulated vLLM endpoints with a known capacity (``max_num_seqs``) and
latency model (TTFT 60–120 ms, 10–15 ms per output token: the published
8B-on-H100 profile) serve a sweep of evidence prompts. Printed:

* achieved requests/s ÷ ideal, where ideal = Σ over endpoints of capacity ÷
  mean time a sequence holds a slot (mean TTFT + (mean output tokens − 1) ×
  mean per-token time; the first token arrives at TTFT). The mean output
  tokens are measured from the replies' usage in the same run;
* the speed-up over running the same jobs one at a time (the serial harness
  this replaces), measured on a sample of jobs;
* batched (micro-batcher, prompt lists) vs unbatched at the same concurrency,
  with greedy sampling so prompts can share a request (with per-job seeds at
  temperature > 0 they cannot: the seed is request-level in vLLM).

The driver is a function (``DRIVERS``) so the thread pool used here (the way
a Celery ``threads`` worker calls the gateway) can be swapped for a driver
that goes through the distributed farm. Figures are printed, never asserted.
``saturation_ratio=<x>`` is the last line.

    .venv/bin/python -m bench.perf.saturation [--jobs 1000] [--quick]
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace

from common.errors import ServiceError
from common.models import Evidence, Mode, Sampling
from common.policy import Policy
from common.prompts import build_prompt
from common.settings import Settings
from ops.sim.latency import LatencyModel
from ops.sim.launch import SimulatorHandle, start_simulator
from worker.llm import open_gateway

Item = tuple[str, Sampling, str]  # prompt, sampling, job id


@dataclass(frozen=True)
class EndpointSpec:
    max_num_seqs: int
    latency: LatencyModel = LatencyModel()


@dataclass
class RunResult:
    label: str
    n_jobs: int
    wall_s: float
    errors: int
    completion_tokens: int
    by_endpoint: Counter[str]
    mean_batch_size: float = 0.0
    done_at: list[float] | None = None  # completion times since the start, seconds
    last_start_s: float = 0.0  # when the last job was handed to the gateway

    def steady_rps(self) -> float:
        """Completions per second until the last job was sent (excludes the final drain)."""
        if not self.done_at or not self.last_start_s:
            return self.rps
        return sum(1 for t in self.done_at if t <= self.last_start_s) / self.last_start_s

    @property
    def rps(self) -> float:
        return self.n_jobs / self.wall_s if self.wall_s else 0.0

    @property
    def mean_output_tokens(self) -> float:
        done = self.n_jobs - self.errors
        return self.completion_tokens / done if done else 0.0


Driver = Callable[[Sequence[str], Sequence[Item], int, dict[str, object]], RunResult]


# --------------------------------------------------------------------------- workload

WORDS = (
    "river castle empire painter treaty harbour merchant council cathedral railway novelist "
    "composer glacier province dynasty festival observatory monastery parliament vineyard"
).split()
NAMES = "Aldous Beatrix Casimir Delphine Evander Florian Gisela Horatio Isolde Jasper".split()
PLACES = "Arlen Brevik Castellan Dorn Elsmere Falkirk Grisham Halden Ivarsk Jorvik".split()


def synthetic_evidence(rng: random.Random, k: int = 6) -> list[Evidence]:
    """Encyclopedia-like blocks: several plain sentences each, so answers quote whole ones."""
    blocks = []
    for i in range(1, k + 1):
        place = rng.choice(PLACES)
        sentences = [
            f"The {rng.choice(WORDS)} of {place} was founded in {rng.randint(1100, 1990)} by "
            f"{rng.choice(NAMES)} {rng.choice(PLACES)}son after a long dispute over the {rng.choice(WORDS)}."
            for _ in range(rng.randint(3, 5))
        ]
        text = " ".join(sentences)
        blocks.append(Evidence(id=f"E{i}", doc_id=f"doc{i}", chunk_id=f"doc{i}-0", title=place,
                               text=text, score=10.0 - i, offset_start=0, offset_end=len(text)))  # fmt: skip
    return blocks


def make_items(n: int, *, greedy: bool, seed: int = 7) -> list[Item]:
    rng = random.Random(seed)
    modes = list(Mode)
    items = []
    for i in range(n):
        evidence = synthetic_evidence(rng)
        question = f"Who founded the {rng.choice(WORDS)} of {evidence[0].title}?"
        prompt = build_prompt(question, modes[i % 3], evidence, Policy()).text
        sampling = Sampling(
            temperature=0.0 if greedy else 0.7, max_tokens=512, seed=rng.getrandbits(31)
        )
        items.append((prompt, sampling, f"job-{i}"))
    return items


# --------------------------------------------------------------------------- drivers


def drive_thread_pool(
    urls: Sequence[str], items: Sequence[Item], concurrency: int, settings: dict[str, object]
) -> RunResult:
    """Many threads calling one gateway, as a Celery ``threads`` worker does.

    The generate stage alone, so not through the run API: a sweep would add retrieval,
    verification and queues to what this driver isolates."""
    gw = open_gateway(Settings(llm_endpoints=",".join(urls), **settings))  # type: ignore[arg-type]
    by_endpoint: Counter[str] = Counter()
    errors = tokens = 0
    done_at: list[float] = []
    last_start = 0.0
    try:

        def one(item: Item) -> None:
            nonlocal errors, tokens, last_start
            prompt, sampling, job_id = item
            last_start = max(last_start, time.perf_counter() - t0)
            try:
                g = gw.generate(prompt, sampling, job_id=job_id)
            except ServiceError:
                errors += 1
                return
            finally:
                done_at.append(time.perf_counter() - t0)
            by_endpoint[g.endpoint or "?"] += 1
            tokens += g.usage.completion_tokens or 0

        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as ex:
            list(ex.map(one, items))
        wall = time.perf_counter() - t0
        batch = gw.batch_stats()["mean_batch_size"]
    finally:
        gw.close()
    return RunResult("", len(items), wall, errors, tokens, by_endpoint, batch, done_at, last_start)


def drive_farm(
    urls: Sequence[str], items: Sequence[Item], concurrency: int, settings: dict[str, object]
) -> RunResult:
    """The distributed farm: Redis, a prefork worker for retrieve/verify, a threads worker
    for generate. ``qfarm sweep`` sends bundles, and a bundle holds its thread until its
    slowest answer, so the worker gets ``-c`` = 2 × concurrency ÷ bundle size (the
    README's sizing rule) and the gateway caps what is in flight per endpoint. As many
    jobs as ``items``, but real questions from ``bench/questions/general.jsonl`` through
    real retrieval and verification."""
    import tempfile
    from pathlib import Path

    from bench.perf.farmkit import REPO, bench_redis_url, farm_env, flush, sweep_on_farm, workers
    from common.models import ALL_MODES
    from producer import QuestionSet, SweepSpec
    from worker.retrieval import ensure_default_index

    tmp = Path(tempfile.mkdtemp(prefix="qfarm-sat-"))
    index = ensure_default_index(Settings(data_dir=tmp / "data"), progress=False)
    every = QuestionSet.from_file(REPO / "bench/questions/general.jsonl")
    n = -(-len(items) // (len(every.questions) * len(ALL_MODES)))
    # A sweep is questions x modes x n: as few questions as reach len(items) jobs (a few more at most).
    questions = replace(every, questions=every.questions[: -(-len(items) // (len(ALL_MODES) * n))])
    # Greedy items ask for temperature 0, the only setting at which prompts can share a batch.
    policy = Policy(temperature=items[0][1].temperature) if items else Policy()
    client = flush()
    env = farm_env(QFARM_LLM_ENDPOINTS=",".join(urls), QFARM_INDEX_PATH=str(index),
                   **{f"QFARM_{k.upper()}": str(v) for k, v in settings.items()})
    bundle = min(Settings().bundle_size, concurrency)
    threads = 1 if concurrency == 1 else -(-2 * concurrency // bundle)  # serial: one at a time
    env["QFARM_BUNDLE_SIZE"] = str(bundle)
    spec = [("sat-cpu", "retrieve,verify", "prefork", 2),
            ("sat-gpu", "generate", "threads", threads)]
    print(f"farm: generate worker -P threads -c {spec[1][3]}, bundles of {bundle} jobs", flush=True)
    with workers(env, spec, tmp):
        rows, wall = sweep_on_farm(
            SweepSpec(questions=questions, modes=ALL_MODES, n=n, policy=policy, use_cache=False),
            Settings(redis_url=bench_redis_url(), llm_endpoints=",".join(urls), index_path=index,
                     results_dir=tmp / "results", bundle_size=bundle),
        )
    client.flushdb()
    ok = [r for r in rows if not r["error"]]
    by_endpoint: Counter[str] = Counter(r["endpoint"] or "?" for r in ok)
    tokens = sum(r["usage"]["completion_tokens"] or 0 for r in ok)
    return RunResult("", len(rows), wall, len(rows) - len(ok), tokens, by_endpoint)


DRIVERS: dict[str, Driver] = {"thread-pool": drive_thread_pool, "farm": drive_farm}


# --------------------------------------------------------------------------- figures


def ideal_rps(specs: Sequence[EndpointSpec], mean_output_tokens: float) -> float:
    """Σ capacity ÷ the simulator's exact mean slot time: TTFT + (tokens − 1) × tpot."""
    return sum(s.max_num_seqs / s.latency.mean_service_s(mean_output_tokens) for s in specs)


def ideal_rps_issue_formula(specs: Sequence[EndpointSpec], mean_output_tokens: float) -> float:
    """Issue 5's wording, TTFT + tokens × tpot: one token-time longer, so a lower ideal."""
    return sum(s.max_num_seqs / s.latency.mean_service_s(mean_output_tokens + 1) for s in specs)


def report(result: RunResult, specs: Sequence[EndpointSpec], urls: Sequence[str]) -> float:
    ideal = ideal_rps(specs, result.mean_output_tokens)
    ratio = result.rps / ideal
    shares = " ".join(
        f"{chr(65 + i)}={result.by_endpoint[u] / max(result.n_jobs - result.errors, 1):.2f}"
        for i, u in enumerate(urls)
    )
    batch = f" mean_batch={result.mean_batch_size:.2f}" if result.mean_batch_size else ""
    print(
        f"{result.label}: jobs={result.n_jobs} errors={result.errors} wall={result.wall_s:.2f}s "
        f"achieved={result.rps:.1f} req/s mean_output_tokens={result.mean_output_tokens:.1f} "
        f"ideal={ideal:.1f} req/s ratio={ratio:.3f} "
        f"steady_ratio={result.steady_rps() / ideal:.3f} share {shares}{batch}",
        flush=True,
    )
    return ratio


def run(driver: Driver, urls: Sequence[str], items: Sequence[Item], conc: int, label: str,
        **settings: object) -> RunResult:  # fmt: skip
    base: dict[str, object] = {"llm_health_interval_s": 1.0, "llm_timeout_s": 60.0}
    result = driver(urls, items, conc, {**base, **settings})
    result.label = label
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=2000, help="jobs in the main run (default 2000)")
    p.add_argument("--compare-jobs", type=int, default=600, help="jobs per batched/unbatched run")
    p.add_argument("--serial-jobs", type=int, default=12, help="jobs timed one at a time")
    p.add_argument("--capacity", default="32,16", help="max_num_seqs of the two endpoints")
    p.add_argument("--concurrency", type=int, default=0, help="driver threads (0: 2 × Σ capacity)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--batch-wait-ms", type=float, default=5.0)
    p.add_argument("--driver", choices=sorted(DRIVERS), default="thread-pool")
    p.add_argument("--quick", action="store_true", help="300 jobs, 200 per comparison, 8 serial")
    args = p.parse_args(argv)
    from bench.perf.farmkit import exit_on_sigterm

    exit_on_sigterm()
    if args.quick:
        args.jobs, args.compare_jobs, args.serial_jobs = 300, 200, 8
    specs = [EndpointSpec(int(c)) for c in args.capacity.split(",")]
    conc = args.concurrency or 2 * sum(s.max_num_seqs for s in specs)
    driver = DRIVERS[args.driver]

    with ExitStack() as stack:
        sims: list[SimulatorHandle] = [
            stack.enter_context(
                start_simulator(
                    max_num_seqs=s.max_num_seqs,
                    ttft_ms=s.latency.ttft_ms,
                    tpot_ms=s.latency.tpot_ms,
                )
            )  # fmt: skip
            for s in specs
        ]
        urls = [s.url for s in sims]
        for i, (sim, spec) in enumerate(zip(sims, specs, strict=True)):
            lat = spec.latency
            print(f"endpoint {chr(65 + i)}: {sim.url} (vLLM SIMULATOR) max_num_seqs={spec.max_num_seqs} "
                  f"ttft={lat.ttft_ms[0]:g}-{lat.ttft_ms[1]:g} ms tpot={lat.tpot_ms[0]:g}-{lat.tpot_ms[1]:g} ms")  # fmt: skip
        print(f"driver={args.driver} concurrency={conc}", flush=True)

        main_run = run(
            driver, urls, make_items(args.jobs, greedy=False), conc, "unbatched (default)"
        )
        ratio = report(main_run, specs, urls)
        loose = main_run.rps / ideal_rps_issue_formula(specs, main_run.mean_output_tokens)
        print(f"  (with the issue's TTFT + tokens x tpot ideal the ratio would read {loose:.3f}; "
              "steady_ratio leaves out the final drain, when fewer jobs remain than slots)")  # fmt: skip

        serial = run(
            driver, urls[:1], make_items(args.serial_jobs, greedy=False, seed=11), 1, "serial"
        )
        print(f"serial (one job at a time, endpoint A): jobs={serial.n_jobs} wall={serial.wall_s:.2f}s "
              f"achieved={serial.rps:.2f} req/s; speed-up x{main_run.rps / serial.rps:.1f}", flush=True)  # fmt: skip

        greedy = make_items(args.compare_jobs, greedy=True, seed=13)
        unbatched = run(driver, urls, greedy, conc, "greedy unbatched")
        r_unbatched = report(unbatched, specs, urls)
        batched = run(driver, urls, greedy, conc, f"greedy batched B={args.batch_size}",
                      llm_batch_size=args.batch_size, llm_batch_wait_ms=args.batch_wait_ms)  # fmt: skip
        r_batched = report(batched, specs, urls)
        print(f"batched/unbatched throughput: {batched.rps / unbatched.rps:.3f} "
              f"(ratios {r_batched:.3f} vs {r_unbatched:.3f}); "
              f"default stays {'batched' if r_batched > r_unbatched * 1.02 else 'unbatched'}")  # fmt: skip
    print("all figures come from the vLLM simulator")
    print(f"saturation_ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
