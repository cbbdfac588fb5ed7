"""Interactive priority: how long a single question takes while a sweep saturates the endpoint.

SIMULATED. One simulated vLLM endpoint with few slots (``--max-num-seqs``, default 8)
and the 8B-on-H100 latency profile. A sweep from many threads keeps it saturated: every
slot of the server busy, requests queued at the server (the gateway keeps more in flight
than the server runs, as a farm's gateways do) and in the gateway. Single questions are
asked one after another, each the whole single-question pipeline the interactive task runs
(preflight, BM25 retrieval over the default index, the model call, verification, the row;
the Celery hop and the Redis writes left out), and timed:

* idle: no sweep;
* during the sweep, (a) no interactive priority: the ask's request is one more in the
  queues (it is given a sweep's run id); (b) the gateway's interactive admission and reserve
  (``QFARM_LLM_INTERACTIVE_RESERVE=1``, the default); (b') the same with the gateway's
  in-flight cap at the server's slots, so nothing queues at the server; (c) (b), plus
  vLLM's request priority (``QFARM_LLM_PRIORITY=1``) against a server started with
  ``--scheduling-policy priority``;
* each in two topologies: ``shared``, one gateway serves the sweep and the asks (a
  ``threads`` worker on both queues), and ``separate``, the farm's roles, where the
  generate worker and the interactive worker have a gateway each.

Printed: p50 and p95 of the model call and of the whole ask, each ÷ its idle value, and
the sweep's requests/s meanwhile. Then what the reserve costs a sweep alone when the
gateway's in-flight cap equals the server's capacity (its worst case). Nothing is
asserted. The last line is ``interactive_priority_ratio=<x>``: the whole ask's p50 during
the sweep ÷ idle, shared gateway, (c).

    .venv/bin/python -m bench.perf.interactive_priority [--asks 20] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from itertools import count, cycle

import httpx

from bench.perf.saturation import make_items
from qfarm.common.errors import ServiceError
from qfarm.common.jobs import ASK_RUN_PREFIX, expand_jobs
from qfarm.common.models import Mode, Question
from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.worker import pipeline
from qfarm.worker.llm import Gateway, open_gateway
from qfarm.worker.retrieval import ensure_default_index, open_retriever
from qfarm.worker.retrieval.base import Retriever

QUESTIONS = [
    "Who painted the Mona Lisa?",
    "What is the capital of Australia?",
    "Who wrote Pride and Prejudice?",
    "What is photosynthesis?",
    "Who discovered penicillin?",
    "What is the largest planet in the Solar System?",
    "Who composed the Moonlight Sonata?",
    "What is the Great Barrier Reef?",
]

# (label, asks marked interactive, reserve, request priority, gateway cap = server slots)
CONFIGS = [
    ("(a) none", False, 0, False, False),
    ("(b) reserve", True, 1, False, False),
    ("(b') reserve, cap = slots", True, 1, False, True),
    ("(c) reserve + priority", True, 1, True, False),
]
# (b') needs the sweep and the asks in one gateway: with separate gateways it is (b).
SHARED_ONLY = {"(b') reserve, cap = slots"}


@dataclass
class Sample:
    model_s: list[float]
    whole_s: list[float]
    sweep_rps: float = 0.0


def pct(values: list[float], q: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def gauges(sim: SimulatorHandle) -> dict[str, float]:
    out = {}
    for line in httpx.get(f"{sim.url}/metrics", timeout=5.0).text.splitlines():
        for name in ("running", "waiting"):
            if line.startswith(f"vllm:num_requests_{name}{{"):
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


def gateway_for(sim: SimulatorHandle, inflight: int, reserve: int, priority: bool) -> Gateway:
    return open_gateway(Settings(
        llm_endpoints=sim.url, llm_max_inflight_per_endpoint=inflight,
        llm_interactive_reserve=reserve, llm_priority=priority, llm_max_attempts=1,
    ))  # fmt: skip


@contextmanager
def sweep(gw: Gateway, threads: int) -> Iterator[Callable[[], tuple[int, float]]]:
    """``threads`` threads send sweep prompts through ``gw`` until the block ends; yields a
    function that says how many sweep requests were answered so far, and when."""
    stop = threading.Event()
    items = cycle(make_items(200, greedy=False))
    lock = threading.Lock()
    done = [0]

    def loop() -> None:
        while not stop.is_set():
            with lock:
                prompt, sampling, job_id = next(items)
            try:
                gw.generate(prompt, sampling, job_id=job_id)
            except ServiceError:
                continue
            with lock:
                done[0] += 1

    workers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    try:
        yield lambda: (done[0], time.perf_counter())
    finally:
        stop.set()


def wait_saturated(
    sim: SimulatorHandle, slots: int, timeout_s: float = 60.0, *, need_waiting: bool = True
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        g = gauges(sim)
        if g.get("running", 0) >= slots and (g.get("waiting", 0) >= 1 or not need_waiting):
            return
        time.sleep(0.05)
    raise RuntimeError("the sweep did not saturate the simulator")


def ask(gw: Gateway, retriever: Retriever, question: str, run_id: str) -> tuple[float, float]:
    """One single question through the interactive task's stages; (model call, whole) in s.
    An ``ask-`` run id makes its request interactive (``pipeline.sampling_for``)."""
    t0 = time.perf_counter()
    (job,) = expand_jobs(run_id, [Question(id="q", text=question)], [Mode.QUOTE], 1, Policy(),
                         model=gw.settings.model)  # fmt: skip
    record = pipeline.preflight_stage(pipeline.begin(job))
    (record,) = pipeline.retrieval_stage([record], retriever)
    (record,) = pipeline.generation_stage([record], gw)
    row = pipeline.finish(pipeline.verification_stage(record))
    whole = time.perf_counter() - t0
    if row.error or row.timings.llm_ms is None:
        raise RuntimeError(f"the ask failed: {row.error}")
    return row.timings.llm_ms / 1000.0, whole


def asks(gw: Gateway, retriever: Retriever, n: int, interactive: bool) -> Sample:
    ids = count()
    prefix = ASK_RUN_PREFIX if interactive else "bench-"
    sample = Sample([], [])
    for question, _ in zip(cycle(QUESTIONS), range(n), strict=False):
        model_s, whole_s = ask(gw, retriever, question, f"{prefix}{next(ids)}")
        sample.model_s.append(model_s)
        sample.whole_s.append(whole_s)
    return sample


def during_sweep(
    sims: dict[str, SimulatorHandle], retriever: Retriever, args: argparse.Namespace,
    shared: bool, config: tuple[str, bool, int, bool, bool],
) -> Sample:  # fmt: skip
    _, interactive, reserve, priority, cap_is_slots = config
    sim = sims["priority" if priority else "fcfs"]
    inflight = args.slots if cap_is_slots else args.inflight
    with ExitStack() as stack:
        sweep_gw = stack.enter_context(gateway_for(sim, inflight, reserve, priority))
        ask_gw = sweep_gw if shared else stack.enter_context(
            gateway_for(sim, inflight, reserve, priority))
        answered = stack.enter_context(sweep(sweep_gw, args.threads))
        # The sweep fills what the gateway lets it: every slot, or all but the reserve.
        wait_saturated(sim, inflight - reserve if cap_is_slots else args.slots,
                       need_waiting=not cap_is_slots)  # fmt: skip
        before = answered()
        sample = asks(ask_gw, retriever, args.asks, interactive)
        sample.sweep_rps = rate(before, answered())
    return sample


def rate(before: tuple[int, float], after: tuple[int, float]) -> float:
    return (after[0] - before[0]) / (after[1] - before[1])


def sweep_alone(sim: SimulatorHandle, slots: int, reserve: int, seconds: float) -> float:
    """The sweep's requests/s with the gateway's cap at the server's capacity."""
    with gateway_for(sim, slots, reserve, False) as gw, sweep(gw, 3 * slots) as answered:
        wait_saturated(sim, slots - reserve, need_waiting=False)
        before = answered()
        time.sleep(seconds)
        return rate(before, answered())


def row(label: str, s: Sample, idle: Sample, sweep_rps_base: float | None) -> str:
    cells = [label]
    for values, base in ((s.model_s, idle.model_s), (s.whole_s, idle.whole_s)):
        for q in (50, 95):
            v, b = pct(values, q), pct(base, q)
            cells.append(f"{v * 1000:.0f} ms (×{v / b:.1f})")
    if sweep_rps_base is None:
        cells.append("—")
    else:
        cells.append(f"{s.sweep_rps:.1f} (×{s.sweep_rps / sweep_rps_base:.2f})")
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--asks", type=int, default=20, help="asks timed per row (default 20)")
    p.add_argument("--slots", type=int, default=8, help="the server's max_num_seqs (default 8)")
    p.add_argument("--inflight", type=int, default=0,
                   help="the gateway's QFARM_LLM_MAX_INFLIGHT_PER_ENDPOINT (0: 2 x slots)")
    p.add_argument("--threads", type=int, default=0, help="sweep threads (0: 6 x slots)")
    p.add_argument("--alone-s", type=float, default=10.0,
                   help="seconds of each sweep-alone run (the reserve's cost; default 10)")
    p.add_argument("--quick", action="store_true",
                   help="seconds, figures meaningless: 3 asks a row, 2 slots, fast latency (CI)")
    args = p.parse_args(argv)
    from bench.perf.farmkit import exit_on_sigterm

    exit_on_sigterm()
    latency: dict[str, object] = {}
    if args.quick:
        args.asks, args.slots, args.alone_s = 3, 2, 1.0
        latency = {"ttft_ms": (5, 10), "tpot_ms": (1, 2)}
    args.inflight = args.inflight or 2 * args.slots
    args.threads = args.threads or 6 * args.slots

    settings = Settings()
    ensure_default_index(settings, progress=False)
    with ExitStack() as stack:
        sims = {policy: stack.enter_context(start_simulator(
                    max_num_seqs=args.slots, scheduling_policy=policy, **latency))
                for policy in ("fcfs", "priority")}  # fmt: skip
        retriever = open_retriever(settings)
        stack.callback(retriever.close)
        print(f"endpoint: vLLM SIMULATOR, max_num_seqs={args.slots}, "
              f"{'fast latency (quick)' if args.quick else 'TTFT 60-120 ms, 10-15 ms/token'}; "
              f"gateway in flight {args.inflight} per endpoint; sweep from {args.threads} "
              f"threads; {args.asks} asks a row, one at a time", flush=True)  # fmt: skip
        with gateway_for(sims["fcfs"], args.inflight, 1, False) as gw:
            asks(gw, retriever, 1, True)  # warm-up: index pages, the first connection
            idle = asks(gw, retriever, args.asks, True)
        results: dict[tuple[bool, str], Sample] = {}
        for shared in (True, False):
            for config in CONFIGS:
                if not shared and config[0] in SHARED_ONLY:
                    continue
                results[(shared, config[0])] = during_sweep(sims, retriever, args, shared, config)
                print(f"  measured: {'shared' if shared else 'separate'} {config[0]}", flush=True)
        alone = {r: sweep_alone(sims["fcfs"], args.slots, r, args.alone_s) for r in (0, 1)}

    print("\nAsk latency during a saturating sweep ÷ idle (SIMULATED)\n")
    print("| gateway | model call p50 | model call p95 | whole ask p50 | whole ask p95 | "
          "sweep req/s (÷ (a)) |")
    print("|---|---|---|---|---|---|")
    print(row("idle", idle, idle, None))
    for shared in (True, False):
        base = results[(shared, CONFIGS[0][0])].sweep_rps
        for label, *_ in CONFIGS:
            if not shared and label in SHARED_ONLY:
                continue
            name = f"{'shared' if shared else 'separate'} {label}"
            print(row(name, results[(shared, label)], idle, base))
    print(f"\nThe reserve's cost, worst case (gateway cap = server capacity = {args.slots}, sweep "
          f"alone, {args.alone_s:g} s each): reserve 0 {alone[0]:.1f} req/s, reserve 1 "
          f"{alone[1]:.1f} req/s, ×{alone[1] / alone[0]:.2f} (SIMULATED)")
    print(f"{os.cpu_count()} cores, load after: {os.getloadavg()[0]:.2f}. All figures come from the "
          "vLLM simulator (SIMULATED).")
    best = results[(True, CONFIGS[3][0])]
    print(f"interactive_priority_ratio={pct(best.whole_s, 50) / pct(idle.whole_s, 50):.2f}")


if __name__ == "__main__":
    main()
