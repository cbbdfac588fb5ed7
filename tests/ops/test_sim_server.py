"""The simulator over real HTTP: vLLM's API subset, capacity, faults, labelling."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from qfarm.common.errors import ServiceError
from qfarm.common.models import Mode
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from test_sim_behaviour import BLOCKS, make_prompt  # noqa: E402

pytestmark = pytest.mark.slow
MODEL = "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(latency="zero", profile="clean", max_model_len=4096) as handle:
        yield handle


@pytest.fixture(autouse=True)
def _reset(request: pytest.FixtureRequest) -> None:
    if "sim" in request.fixturenames:
        request.getfixturevalue("sim").reset()


def post(sim: SimulatorHandle, body: dict, path: str = "/v1/completions", **kw) -> httpx.Response:
    return httpx.post(f"{sim.url}{path}", json=body, timeout=10.0, **kw)


def test_models_health_and_simulated_label(sim: SimulatorHandle) -> None:
    models = httpx.get(f"{sim.url}/v1/models").json()
    assert models["data"][0]["id"] == MODEL
    assert models["data"][0]["owned_by"] == "qfarm-simulator"
    health = httpx.get(f"{sim.url}/health")
    assert health.status_code == 200
    assert health.headers["x-qfarm-simulator"] == "1"


def test_list_prompt_with_n_maps_index_and_sums_usage(sim: SimulatorHandle) -> None:
    prompts = [make_prompt(Mode.QUOTE), make_prompt(Mode.CLAIM_LATTICE_POINTER), "plain text"]
    body = {
        "model": MODEL,
        "prompt": prompts,
        "n": 2,
        "max_tokens": 300,
        "seed": 7,
        "temperature": 0.7,
    }
    reply = post(sim, body).json()
    assert reply["system_fingerprint"] == "qfarm-simulator"
    by_index = {c["index"]: c for c in reply["choices"]}
    assert sorted(by_index) == list(range(6))
    singles = [
        post(sim, {**body, "prompt": p}).json()["choices"] for p in prompts
    ]  # index = prompt_i * n + j
    for i, choices in enumerate(singles):
        for c in choices:
            assert by_index[i * 2 + c["index"]]["text"] == c["text"]
    assert by_index[0]["text"].startswith('"')
    assert "[E" in by_index[2]["text"]
    usage = reply["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["completion_tokens"] > 6


def test_choice_j_is_the_answer_of_seed_plus_j(sim: SimulatorHandle) -> None:
    """As vLLM's parallel sampling: choice j of a request seeded s is what a request of
    n=1 seeded s + j answers (the farm's shared samples depend on it)."""
    body = {"model": MODEL, "prompt": make_prompt(Mode.CLAIM_LATTICE_POINTER), "n": 4,
            "max_tokens": 300, "seed": 40, "temperature": 0.7}
    shared = {c["index"]: c["text"] for c in post(sim, body).json()["choices"]}
    alone = [post(sim, {**body, "n": 1, "seed": 40 + j}).json()["choices"][0]["text"]
             for j in range(4)]
    assert [shared[j] for j in range(4)] == alone
    assert len(set(alone)) > 1


def test_deterministic_for_prompt_and_seed_across_processes(sim: SimulatorHandle) -> None:
    body = {
        "prompt": make_prompt(Mode.CLAIM_LATTICE),
        "max_tokens": 400,
        "seed": 11,
        "temperature": 0.9,
    }
    with start_simulator(latency="zero", profile="clean") as other:
        a = post(sim, body).json()["choices"][0]["text"]
        b = post(other, body).json()["choices"][0]["text"]
    assert a == b
    assert json.loads(a)["claims"]


def test_max_tokens_defaults_to_16_and_stop_cuts(sim: SimulatorHandle) -> None:
    c = post(sim, {"prompt": make_prompt(Mode.QUOTE), "seed": 1}).json()["choices"][0]
    assert c["finish_reason"] == "length"
    full = post(sim, {"prompt": make_prompt(Mode.QUOTE), "seed": 1, "max_tokens": 300}).json()
    first_line = full["choices"][0]["text"].split("\n")[0]
    cut = post(
        sim, {"prompt": make_prompt(Mode.QUOTE), "seed": 1, "max_tokens": 300, "stop": ["\n"]}
    )
    assert cut.json()["choices"][0]["text"] == first_line


def test_chat_completions(sim: SimulatorHandle) -> None:
    from qfarm.common.grounding.prompts import SYSTEM_PROMPTS

    evidence = '<evidence id="E1" title="The Beatles">\n' + BLOCKS["E1"] + "\n</evidence>"
    messages = [
        {"role": "system", "content": SYSTEM_PROMPTS[Mode.QUOTE]},
        {"role": "user", "content": f"Evidence:\n\n{evidence}\n\nQuestion: Who were the Beatles?"},
    ]
    reply = post(
        sim, {"messages": messages, "max_tokens": 200, "seed": 3}, "/v1/chat/completions"
    ).json()
    content = reply["choices"][0]["message"]["content"]
    assert reply["object"] == "chat.completion"
    assert content.endswith("[E1]") and content.split('"')[1] in BLOCKS["E1"]


def test_errors_follow_vllm(sim: SimulatorHandle) -> None:
    r = post(sim, {"model": "nope", "prompt": "x"})
    assert r.status_code == 404 and "does not exist" in r.json()["error"]["message"]
    r = post(sim, {"prompt": "word " * 4100, "max_tokens": 200})  # the prompt alone is too long
    assert r.status_code == 400 and "maximum context length is 4096" in r.json()["error"]["message"]
    r = httpx.post(f"{sim.url}/v1/completions", content=b"{not json", timeout=5)
    assert r.status_code == 400
    r = post(sim, {"prompt": [1, 2, 3]})
    assert r.status_code == 400


def test_metrics_use_vllm_names(sim: SimulatorHandle) -> None:
    post(sim, {"prompt": "hello", "max_tokens": 5})
    text = httpx.get(f"{sim.url}/metrics").text
    assert "SIMULATED" in text.splitlines()[0]
    for name in (
        "vllm:num_requests_running{",
        "vllm:num_requests_waiting{",
        "vllm:time_to_first_token_seconds_bucket{",
        "vllm:e2e_request_latency_seconds_count{",
        f'model_name="{MODEL}"',
    ):
        assert name in text


def test_streaming_yields_the_same_text(sim: SimulatorHandle) -> None:
    body = {"prompt": make_prompt(Mode.CLAIM_LATTICE_POINTER), "max_tokens": 300, "seed": 5}
    plain = post(sim, body).json()["choices"][0]["text"]
    pieces, usage = [], None
    with httpx.stream(
        "POST",
        f"{sim.url}/v1/completions",
        json={**body, "stream": True, "stream_options": {"include_usage": True}},
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                pieces += [c["text"] for c in chunk["choices"]]
                usage = chunk.get("usage") or usage
    assert "".join(pieces) == plain
    assert len(pieces) > 1 and usage["completion_tokens"] > 0


def test_runtime_faults(sim: SimulatorHandle) -> None:
    sim.set_faults(next=["429", "503", "malformed", "empty", "drop"])
    r = post(sim, {"prompt": "x"})
    assert r.status_code == 429 and r.headers["Retry-After"] == "1"
    assert post(sim, {"prompt": "x"}).status_code == 503
    r = post(sim, {"prompt": "x"})
    assert r.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.text)
    assert post(sim, {"prompt": "x"}).json()["choices"] == []
    with pytest.raises(httpx.RemoteProtocolError):
        post(sim, {"prompt": "x"})
    assert post(sim, {"prompt": "x"}).status_code == 200
    sim.set_faults(down=True)
    assert httpx.get(f"{sim.url}/health").status_code == 503
    sim.set_faults(down=False)
    r = httpx.post(f"{sim.url}/sim/faults", json={"rates": {"teapot": 1.0}})
    assert r.status_code == 400 and "unknown fault kind" in r.json()["error"]["message"]


def test_fault_rates_apply_at_roughly_the_rate() -> None:
    with (
        start_simulator(latency="zero", fault_rates={"503": 0.3}, seed=1) as sim,
        httpx.Client() as c,
    ):
        url = f"{sim.url}/v1/completions"
        statuses = [
            c.post(url, json={"prompt": "x", "max_tokens": 2}).status_code for _ in range(200)
        ]
    share = statuses.count(503) / len(statuses)
    assert 0.18 < share < 0.42


def test_timeout_fault_holds_the_request() -> None:
    with start_simulator(latency="zero", hang_s=30) as sim:
        sim.set_faults(next=["timeout"])
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{sim.url}/v1/completions", json={"prompt": "x"}, timeout=0.5)
        assert post(sim, {"prompt": "x"}).status_code == 200


def test_api_key_required_when_set() -> None:
    with start_simulator(latency="zero", api_key="sim-secret-key") as sim:
        assert post(sim, {"prompt": "x"}).status_code == 401
        bad = post(sim, {"prompt": "x"}, headers={"Authorization": "Bearer wrong"})
        assert bad.status_code == 401
        good = post(sim, {"prompt": "x"}, headers={"Authorization": "Bearer sim-secret-key"})
        assert good.status_code == 200
        assert httpx.get(f"{sim.url}/health").status_code == 200  # like vLLM: /health is open
        assert "sim-secret-key" not in sim.log_tail(200)
        assert [r["auth_ok"] for r in sim.stats()["requests"]] == [False, False, True]


def test_capacity_queues_excess_sequences() -> None:
    with start_simulator(max_num_seqs=2, ttft_ms=300, tpot_ms=0) as sim:
        seen_waiting: list[float] = []

        def scrape() -> None:
            for _ in range(20):
                text = httpx.get(f"{sim.url}/metrics").text
                for line in text.splitlines():
                    if line.startswith("vllm:num_requests_waiting{"):
                        seen_waiting.append(float(line.rsplit(" ", 1)[1]))
                time.sleep(0.02)

        t0 = time.perf_counter()
        scraper = threading.Thread(target=scrape)
        scraper.start()
        reply = post(sim, {"prompt": ["a", "b", "c", "d", "e"], "max_tokens": 4})
        elapsed = time.perf_counter() - t0
        scraper.join()
    assert reply.status_code == 200 and len(reply.json()["choices"]) == 5
    assert elapsed >= 0.85  # 5 sequences, 2 slots: three rounds of 300 ms
    assert max(seen_waiting) >= 1


def test_hundreds_of_concurrent_connections() -> None:
    async def fire(url: str, n: int) -> list[int]:
        limits = httpx.Limits(max_connections=n)
        async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:
            replies = await asyncio.gather(
                *(
                    client.post(f"{url}/v1/completions", json={"prompt": f"p{i}", "max_tokens": 8})
                    for i in range(n)
                )
            )
        return [r.status_code for r in replies]

    with start_simulator(max_num_seqs=512, ttft_ms=400, tpot_ms=0) as sim:
        statuses = asyncio.run(fire(sim.url, 300))
        peak = sim.stats()["max_concurrent_requests"]
    assert statuses == [200] * 300
    assert peak >= 200  # they were in flight together, not one after another


def test_bad_options_fail_at_start() -> None:
    from qfarm.ops.sim.config import options_to_argv

    with pytest.raises(TypeError, match="unknown simulator option"):
        options_to_argv(max_seqs=3)
    with pytest.raises(ServiceError, match="exited at start"):
        start_simulator(ttft_ms="abc")
