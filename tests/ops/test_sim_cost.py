"""``--latency cost``: the prefix cache's block hashing and LRU, the cost model, the engine's
batching, ``n`` > 1 and the counters it reports. Pure functions, or the app in-process at a
tiny time scale: nothing sleeps for a real token's time."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from qfarm.common.models import Mode
from qfarm.ops.sim.config import SimConfig, add_sim_arguments, config_from_args, options_to_argv
from qfarm.ops.sim.cost import CostModel
from qfarm.ops.sim.engine import Engine
from qfarm.ops.sim.metrics import Metrics
from qfarm.ops.sim.prefix_cache import PrefixCache, block_hashes, tokenize
from qfarm.ops.sim.server import create_app

sys.path.insert(0, str(Path(__file__).parent))
from test_sim_behaviour import make_prompt  # noqa: E402

FAST = CostModel(time_scale=1e-6)


def words(count: int, start: int = 0) -> list[str]:
    return [f"w{i}" for i in range(start, start + count)]


# --------------------------------------------------------------------------- block hashing


def test_a_shared_prefix_of_two_full_blocks_hits_32_tokens() -> None:
    cache = PrefixCache(100)
    first = cache.admit(words(40))
    assert (first.queried, first.hit, first.computed) == (40, 0, 40)
    second = cache.admit(words(32) + words(8, start=1000))  # same 32, then different
    assert (second.hit, second.computed) == (32, 8)


def test_a_difference_in_block_1_misses_everything_after_it() -> None:
    cache = PrefixCache(100)
    tokens = words(64)
    cache.admit(tokens)
    changed = list(tokens)
    changed[20] = "other"  # block 1 (tokens 16..31); blocks 2 and 3 are the same again
    assert cache.admit(changed).hit == 16
    first_block_changed = ["other", *tokens[1:]]
    assert cache.admit(first_block_changed).hit == 0
    # The hashes chain: equal token ids in block 2 give different hashes after a change.
    assert block_hashes(tokens)[2] != block_hashes(changed)[2]
    assert tokens[32:48] == changed[32:48]


def test_a_partial_last_block_never_hits() -> None:
    cache = PrefixCache(100)
    cache.admit(words(40))  # 2 full blocks and 8 tokens that are never cached
    assert len(cache) == 2
    assert cache.admit(words(40)).hit == 32
    assert cache.admit(words(20)).hit == 16  # block 0; its 4 tokens of block 1 miss


def test_the_last_prompt_token_is_always_computed() -> None:
    cache = PrefixCache(100)
    cache.admit(words(32))
    again = cache.admit(words(32))  # vLLM needs the last token's logits: at most 31 hit
    assert (again.hit, again.computed) == (16, 16)


def test_tokens_are_the_simulators_word_and_punctuation_split() -> None:
    assert tokenize("Hello, world!\n<|im_end|>") == (
        "Hello", ",", "world", "!", "<", "|", "im_end", "|", ">"
    )


def test_prefix_cache_off_never_hits() -> None:
    cache = PrefixCache(0)
    cache.admit(words(64))
    assert cache.admit(words(64)).hit == 0


# --------------------------------------------------------------------------- LRU


def test_lru_evicts_the_least_recently_used_blocks() -> None:
    cache = PrefixCache(4)
    a, b, c = words(33), words(33, start=100), words(33, start=200)
    cache.admit(a)
    cache.admit(b)  # full: a's 2 blocks and b's 2
    assert cache.admit(a).hit == 32  # a is now the most recent
    cache.admit(c)  # evicts b, the least recently used
    assert cache.evictions == 2
    assert cache.admit(a).hit == 32
    assert cache.admit(b).hit == 0


def test_eviction_takes_a_prefix_tail_first() -> None:
    cache = PrefixCache(2)
    a = words(33)
    cache.admit(a)
    cache.admit(words(17, start=100))  # one block more: a's last block goes, its first stays
    assert cache.admit(a).hit == 16


# --------------------------------------------------------------------------- the cost model


def test_step_time_is_fixed_plus_per_sequence_plus_uncached_prefill() -> None:
    cost = CostModel(prefill_ms_per_token=0.05, decode_step_ms=5.0, decode_ms_per_seq=0.1)
    assert cost.step_seconds(0, 0) == 0.0
    assert cost.step_seconds(0, 1) == pytest.approx(0.0051)
    assert cost.step_seconds(1000, 10) == pytest.approx(0.005 + 0.001 + 0.05)
    assert cost.prefill_seconds(1000) == pytest.approx(0.05)


def test_bad_cost_options_name_themselves() -> None:
    with pytest.raises(ValueError, match="decode_step_ms"):
        CostModel(decode_step_ms=-1)
    p = argparse.ArgumentParser()
    add_sim_arguments(p)
    with pytest.raises(ValueError, match="--prefix-cache-blocks: only with --latency cost"):
        config_from_args(p.parse_args(["--prefix-cache-blocks", "10"]))
    with pytest.raises(ValueError, match="--ttft-ms"):
        config_from_args(p.parse_args(["--latency", "cost", "--ttft-ms", "50"]))
    config = config_from_args(p.parse_args(["--latency", "cost", "--time-scale", "0.5"]))
    assert config.cost == CostModel(time_scale=0.5)
    assert config_from_args(p.parse_args([])).cost is None  # the default is unchanged
    assert options_to_argv(latency="cost", prefix_cache_blocks=0) == [
        "--latency", "cost", "--prefix-cache-blocks", "0"
    ]


# --------------------------------------------------------------------------- the engine


class _Completion:
    def __init__(self, tokens: int):
        self.completion_tokens = tokens
        self.finish_reason = "stop"


class _Seq:
    def __init__(self, tokens: int, priority: int = 0):
        self.completion = _Completion(tokens)
        self.priority = priority
        self.ttft_s = 0.0
        self.e2e_s = 0.0


def _charge(prompts: list[list[str]], out_tokens: int, cost: CostModel = FAST,
            max_num_seqs: int = 256) -> dict[str, float]:  # fmt: skip
    """Run sequences (one per prompt) at once on an engine; what it charged."""

    async def go() -> dict[str, float]:
        engine = Engine(cost, max_num_seqs, Metrics())
        await asyncio.gather(*(engine.run(_Seq(out_tokens), tuple(p)) for p in prompts))
        await engine.close()
        return engine.charged.as_dict()

    return asyncio.run(go())


def test_decode_is_batched_across_concurrent_sequences() -> None:
    prompt = words(100)
    one = _charge([prompt], 50)
    thirteen = _charge([prompt] * 13, 50)
    assert one["steps"] == thirteen["steps"] == 50
    # 13 sequences decode in the same steps: each step costs a little more, not 13 times.
    per_seq = FAST.decode_ms_per_seq / 1000.0
    assert thirteen["decode_s"] - one["decode_s"] == pytest.approx(50 * 12 * per_seq)
    # The prompt is prefilled once; each further copy recomputes its tail past the last
    # whole block that leaves the last token to compute (100 = 6 × 16 + 4).
    assert thirteen["prompt_tokens_computed"] == 100 + 12 * 4
    assert thirteen["prompt_tokens_cached"] == 12 * 96


def test_capacity_queues_the_excess() -> None:
    charged = _charge([words(10, start=100 * i) for i in range(4)], 5, max_num_seqs=2)
    assert charged["steps"] == 10  # two waves of 5 steps
    assert charged["sequences"] == 4


def test_waiting_sequences_are_served_by_priority_then_arrival() -> None:
    done: list[int] = []

    async def one(engine: Engine, priority: int, prompt: list[str]) -> None:
        await engine.run(_Seq(3, priority), tuple(prompt))
        done.append(priority)

    async def go() -> None:
        engine = Engine(FAST, 1, Metrics())
        await asyncio.gather(*(one(engine, p, words(20, start=100 * p)) for p in (2, 0, 1, 0)))
        await engine.close()

    asyncio.run(go())
    assert done == [0, 0, 1, 2]


# --------------------------------------------------------------------------- over HTTP


def _serve(config: SimConfig, work: Any) -> Any:
    async def go() -> Any:
        async with TestClient(TestServer(create_app(config))) as client:
            return await work(client)

    return asyncio.run(go())


def _metric(text: str, name: str, source: str | None = None) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and (source is None or f'source="{source}"' in line):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_n_choices_are_distinct_deterministic_and_usage_is_summed() -> None:
    prompt = make_prompt(Mode.CLAIM_LATTICE_POINTER)
    body = {"prompt": prompt, "n": 4, "max_tokens": 300, "temperature": 0.8, "seed": 5}

    async def work(client: TestClient) -> list[dict[str, Any]]:
        out = []
        for _ in range(2):
            resp = await client.post("/v1/completions", json=body)
            assert resp.status == 200
            out.append(await resp.json())
        return out

    first, again = _serve(SimConfig(profile="clean", cost=FAST), work)
    texts = {c["index"]: c["text"] for c in first["choices"]}
    assert sorted(texts) == [0, 1, 2, 3]
    assert len(set(texts.values())) > 1  # each (seed, index) draws its own answer
    assert {c["index"]: c["text"] for c in again["choices"]} == texts
    usage = first["usage"]
    assert usage["prompt_tokens"] == len(tokenize(prompt))  # the prompt, once per request
    assert usage["completion_tokens"] == sum(len(tokenize(t)) for t in texts.values())


def test_metrics_count_prompt_tokens_evaluated_and_served_from_the_cache() -> None:
    prompt = make_prompt(Mode.QUOTE)
    p = len(tokenize(prompt))
    hit = (p - 1) // 16 * 16

    async def work(client: TestClient) -> tuple[str, dict[str, Any]]:
        for n in (1, 1, 3):
            body = {"prompt": prompt, "n": n, "max_tokens": 20, "temperature": 0.7, "seed": 1}
            assert (await client.post("/v1/completions", json=body)).status == 200
        stats = await (await client.get("/sim/stats")).json()
        return await (await client.get("/metrics")).text(), stats["charged"]

    text, charged = _serve(SimConfig(profile="clean", cost=FAST), work)
    sequences = 5  # each choice is an engine request, as in vLLM
    assert _metric(text, "vllm:prompt_tokens_total") == sequences * p
    assert _metric(text, "vllm:prefix_cache_queries_total") == sequences * p
    assert _metric(text, "vllm:prefix_cache_hits_total") == 4 * hit
    assert _metric(text, "vllm:prompt_tokens_by_source_total", "local_compute") == (
        p + 4 * (p - hit)
    )
    assert _metric(text, "vllm:prompt_tokens_by_source_total", "local_cache_hit") == 4 * hit
    busy = _metric(text, "qfarm_sim_model_seconds_total")
    assert busy == pytest.approx(charged["busy_s"]) and busy > 0
    assert charged["prompt_tokens_cached"] == 4 * hit


def test_the_default_latency_reports_no_cost_series() -> None:
    async def work(client: TestClient) -> tuple[str, dict[str, Any]]:
        body = {"prompt": "plain text", "max_tokens": 5}
        assert (await client.post("/v1/completions", json=body)).status == 200
        stats = await (await client.get("/sim/stats")).json()
        return await (await client.get("/metrics")).text(), stats

    from qfarm.ops.sim.latency import LatencyModel

    text, stats = _serve(SimConfig(profile="clean", latency=LatencyModel.preset("zero")), work)
    assert "prefix_cache" not in text and "qfarm_sim_model_seconds" not in text
    assert stats["charged"] is None
    assert _metric(text, "vllm:prompt_tokens_total") == 2


def test_streaming_under_the_cost_engine_sends_the_whole_answer() -> None:
    prompt = make_prompt(Mode.QUOTE)
    body = {"prompt": prompt, "max_tokens": 200, "temperature": 0.7, "seed": 3}

    async def work(client: TestClient) -> tuple[str, str]:
        whole = (await (await client.post("/v1/completions", json=body)).json())["choices"][0]
        resp = await client.post("/v1/completions", json={**body, "stream": True})
        text = ""
        async for raw in resp.content:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                import json

                text += "".join(c.get("text", "") for c in json.loads(line[6:])["choices"])
        return whole["text"], text

    whole, streamed = _serve(SimConfig(profile="clean", cost=FAST), work)
    assert streamed == whole and whole
