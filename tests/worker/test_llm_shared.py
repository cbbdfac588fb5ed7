"""Shared samples through the gateway, against replayed servers: one request with n choices
for vLLM, back to back for llama.cpp's server, retried and failed as one unit."""

from __future__ import annotations

import httpx
import pytest

from qfarm.common.errors import TransientServiceError
from qfarm.common.models import Sampling
from tests.worker.test_llm_contract import Server, completion, gateway, llama_cpp, llama_gateway

SHARED = Sampling(max_tokens=8, seed=100, share_samples=True)


def items(k: int, prompt: str = "p") -> list[tuple[str, Sampling, str]]:
    return [(prompt, SHARED.model_copy(update={"seed": 100 + j}), f"j{j}") for j in range(k)]


def choices(k: int, texts: list[str] | None = None, usage: tuple[int, int] = (10, 12)) -> httpx.Response:
    texts = texts or [f"answer {j}" for j in range(k)]
    return httpx.Response(200, json={
        "choices": [{"index": j, "text": t, "finish_reason": "stop"} for j, t in enumerate(texts)],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]},
    })


def test_samples_of_one_prompt_are_one_request_with_n_and_choice_j_is_sample_j() -> None:
    server = Server([choices(3, ["a", "bb", "ccc"], usage=(10, 12))])
    with gateway(server) as gw:
        gens = gw.generate_many(items(3))
    assert len(server.bodies) == 1
    assert (server.bodies[0]["n"], server.bodies[0]["seed"]) == (3, 100)
    assert [g.text for g in gens] == ["a", "bb", "ccc"]  # type: ignore[union-attr]
    # The prompt was read once: its tokens are shared out, summing to the server's count.
    assert sum(g.usage.prompt_tokens for g in gens) == 10  # type: ignore[union-attr,misc]
    assert [g.usage.completion_tokens for g in gens] == [2, 4, 6]  # type: ignore[union-attr]
    assert {g.request.prompts for g in gens} == {3}  # type: ignore[union-attr]


def test_without_the_switch_each_sample_is_its_own_request() -> None:
    server = Server([completion()])
    off = [(p, s.model_copy(update={"share_samples": False}), j) for p, s, j in items(3)]
    with gateway(server) as gw:
        gw.generate_many(off)
    assert [b["n"] for b in server.bodies] == [1, 1, 1]


def test_a_reply_with_fewer_choices_is_retried_as_a_whole_never_half_answered() -> None:
    server = Server([choices(2), choices(3)])
    with gateway(server, llm_max_attempts=3) as gw:
        gens = gw.generate_many(items(3))
    assert [b["n"] for b in server.bodies] == [3, 3]
    assert [g.text for g in gens] == ["answer 0", "answer 1", "answer 2"]  # type: ignore[union-attr]
    assert {g.attempts for g in gens} == {2}  # type: ignore[union-attr]


def test_a_group_that_fails_for_good_fails_every_sample_of_it() -> None:
    server = Server([choices(2)])
    with gateway(server, llm_max_attempts=2) as gw:
        out = gw.generate_many(items(3))
    assert len(server.bodies) == 2
    assert all(isinstance(o, TransientServiceError) for o in out)
    assert "no choice with index 2" in str(out[0])


def test_llama_cpp_gets_the_samples_back_to_back_each_with_its_own_seed() -> None:
    server = llama_cpp([completion("x")])
    with llama_gateway(server, llm_context_window=2048) as gw:
        gens = gw.generate_many(items(3))
    assert [(b["n"], b["seed"]) for b in server.bodies] == [(1, 100), (1, 101), (1, 102)]
    assert all(g.request.prompts == 1 for g in gens)  # type: ignore[union-attr]


@pytest.mark.parametrize("temperature", [0.0])
def test_greedy_samples_are_never_shared(temperature: float) -> None:
    server = Server([completion()])
    greedy = [(p, s.model_copy(update={"temperature": temperature}), j) for p, s, j in items(2)]
    with gateway(server) as gw:
        gw.generate_many(greedy)
    assert [b["n"] for b in server.bodies] == [1, 1]


def test_a_shared_reply_without_usage_estimates_the_prompt_once() -> None:
    reply = httpx.Response(200, json={"choices": [
        {"index": j, "text": "abcd" * (j + 1), "finish_reason": "stop"} for j in range(3)]})
    prompt = "x" * 400  # 100 tokens at 4 characters a token
    with gateway(Server([reply])) as gw:
        gens = gw.generate_many(items(3, prompt=prompt))
    assert sum(g.usage.prompt_tokens for g in gens) == 100  # type: ignore[union-attr,misc]
    assert [g.usage.completion_tokens for g in gens] == [1, 2, 3]  # type: ignore[union-attr]
    assert all(g.usage.estimated for g in gens)  # type: ignore[union-attr]
