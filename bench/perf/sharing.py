"""What sharing a question's samples saves in model time, on the simulator's cost engine.

The saturation table measures how close the farm gets to what endpoints serve; this
measures what the endpoints are charged. A general × 13 workload: each question of
``general.jsonl`` in ``quote`` mode, its evidence retrieved from the embedded index, 13
samples (temperature 0.7). One simulated endpoint under ``--latency cost`` (prefill per
uncached prompt token, decode batched across running sequences, vLLM's prefix cache of
16-token blocks; defaults for Llama-3.1-8B on one H100, docs/llm.md, 'The cost model')
is sent each question's samples three ways, a fresh simulator per way:

* ``13 requests, no prefix cache``: what 13 separate jobs cost when nothing is shared
  (a server without the cache, or samples spread where the prompt is not cached);
* ``13 requests, one endpoint``: the same 13 requests, at once, to one endpoint with the
  prefix cache on: the first prefills the prompt, the others find its blocks;
* ``1 request, n=13``: one request asking for 13 choices.

Questions go one after another, each question's requests at once, over HTTP straight to
the simulator, without the farm (the farm asks for ``n`` samples in one request with
``--share-samples``: bench/perf/shared_samples.py sweeps through it). Printed
per way: prompt tokens queried, computed and served from the cache (vLLM's
``prefix_cache_*`` counters), the model seconds charged (prefill, decode, busy) and the
busy time ÷ the no-cache way's, measured in the same run. Every figure is SIMULATED.
The last line is ``sharing_model_time_ratio=`` (n=13 ÷ no cache).

    .venv/bin/python -m bench.perf.sharing [--questions 152] [--time-scale 0.2] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from qfarm.common.grounding.prompts import build_prompt
from qfarm.common.models import Mode
from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.ops.sim.launch import start_simulator
from qfarm.producer.api import QuestionSet

QUESTIONS = Path(__file__).resolve().parents[1] / "questions" / "general.jsonl"
SAMPLES = 13
TEMPERATURE = 0.7
WAYS = (
    ("13 requests, no prefix cache", "separate", 0),
    ("13 requests, one endpoint", "separate", None),
    ("1 request, n=13", "n", None),
)


@dataclass
class Charged:
    way: str
    requests: int
    wall_s: float
    stats: dict[str, float]


def prompts_for(count: int, index: Path) -> list[str]:
    """Quote-mode prompts of the first ``count`` general questions, evidence retrieved."""
    from qfarm.worker.retrieval import open_retriever

    policy = Policy()
    questions = QuestionSet.from_file(QUESTIONS).questions[:count]
    retriever = open_retriever(Settings(index_path=index))
    try:
        return [
            build_prompt(q.text, Mode.QUOTE,
                         retriever.search(q.text, top_k=policy.top_k, title_boost=policy.title_boost),
                         policy).text  # fmt: skip
            for q in questions
        ]
    finally:
        retriever.close()


async def send(client: httpx.AsyncClient, url: str, prompts: Sequence[str], how: str,
               max_tokens: int, seed: int) -> int:  # fmt: skip
    """Every question's samples, question after question; the number of requests sent."""
    rng = random.Random(seed)
    sent = 0
    for prompt in prompts:
        base = {"prompt": prompt, "max_tokens": max_tokens, "temperature": TEMPERATURE}
        if how == "n":
            bodies = [{**base, "n": SAMPLES, "seed": rng.getrandbits(31)}]
        else:
            bodies = [{**base, "seed": rng.getrandbits(31)} for _ in range(SAMPLES)]
        replies = await asyncio.gather(
            *(client.post(f"{url}/v1/completions", json=b, timeout=120.0) for b in bodies)
        )
        for reply in replies:
            reply.raise_for_status()
            assert len(reply.json()["choices"]) == (SAMPLES if how == "n" else 1)
        sent += len(bodies)
    return sent


def run_way(way: str, how: str, cache_blocks: int | None, prompts: Sequence[str],
            time_scale: float, max_tokens: int) -> Charged:  # fmt: skip
    options: dict[str, Any] = {"latency": "cost", "time_scale": time_scale}
    if cache_blocks is not None:
        options["prefix_cache_blocks"] = cache_blocks
    with start_simulator(**options) as sim:
        t0 = time.perf_counter()

        async def go() -> int:
            async with httpx.AsyncClient() as client:
                return await send(client, sim.url, prompts, how, max_tokens, seed=17)

        sent = asyncio.run(go())
        wall = time.perf_counter() - t0
        charged = sim.stats()["charged"]
    return Charged(way, sent, wall, charged)


def print_table(results: Sequence[Charged], questions: int) -> float:
    base = results[0].stats["busy_s"]
    print(f"\n{questions} questions × {SAMPLES} samples, quote mode, one simulated endpoint "
          "(--latency cost, defaults: Llama-3.1-8B on one H100); every figure SIMULATED\n")  # fmt: skip
    print("| way | requests | prompt tokens queried | computed | from the prefix cache | "
          "generated tokens | prefill s | decode s | model time (busy) s | ÷ no cache |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        s = r.stats
        print(f"| {r.way} | {r.requests} | {s['prompt_tokens']:,} | {s['prompt_tokens_computed']:,} | "
              f"{s['prompt_tokens_cached']:,} | {s['generation_tokens']:,} | {s['prefill_s']:.2f} | "
              f"{s['decode_s']:.2f} | {s['busy_s']:.2f} | {s['busy_s'] / base:.3f} |")  # fmt: skip
    return results[-1].stats["busy_s"] / base


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=152, help="general questions (default all 152)")
    p.add_argument("--time-scale", type=float, default=0.2,
                   help="the simulator's sleeps × this; the seconds charged are model seconds "
                        "(default 0.2)")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="5 questions, time scale 0.05 (CI)")
    args = p.parse_args(argv)
    from bench.perf.farmkit import exit_on_sigterm
    from bench.perf.saturation import table_index

    exit_on_sigterm()
    if args.quick:
        args.questions, args.time_scale = 5, 0.05
    prompts = prompts_for(args.questions, table_index())
    max_tokens = Policy().max_tokens
    print(f"load before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores); {len(prompts)} prompts, "
          f"max_tokens={max_tokens}, time scale {args.time_scale:g}", flush=True)  # fmt: skip
    results = []
    for way, how, cache_blocks in WAYS:
        r = run_way(way, how, cache_blocks, prompts, args.time_scale, max_tokens)
        print(f"{way}: {r.requests} requests in {r.wall_s:.1f} s wall; charged {r.stats}",
              flush=True)  # fmt: skip
        results.append(r)
    ratio = print_table(results, len(prompts))
    print("\nThe farm sends every sample as its own job today: n-sharing is measured here over "
          "HTTP, straight to the simulator. All figures come from the vLLM simulator (SIMULATED).")
    print(f"sharing_model_time_ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
