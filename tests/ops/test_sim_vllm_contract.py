"""Conformance: the simulator against vLLM 0.33's own protocol models, over real HTTP.

Every response is validated with the models rebuilt from vLLM's source in
``vllm_protocol.py`` (extra fields forbidden), and every request the simulator
refuses must be one vLLM's request models or sampling checks refuse too (and
the other way round for requests it accepts). A drift between the simulator and
vLLM fails here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from qfarm.common.models import Mode
from qfarm.ops.sim import behaviour
from qfarm.ops.sim.config import add_sim_arguments, config_from_args
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator

sys.path.insert(0, str(Path(__file__).parent))
import vllm_protocol as v  # noqa: E402
from test_sim_behaviour import make_prompt  # noqa: E402

pytestmark = pytest.mark.slow
MODEL = "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic"
MAX_MODEL_LEN = 4096


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(
        latency="zero", profile="clean", max_model_len=MAX_MODEL_LEN, stream_interval=2
    ) as handle:
        yield handle


@pytest.fixture(autouse=True)
def _reset(request: pytest.FixtureRequest) -> None:
    if "sim" in request.fixturenames:
        request.getfixturevalue("sim").reset()


def post(sim: SimulatorHandle, body: dict, chat: bool = False) -> httpx.Response:
    path = "/v1/chat/completions" if chat else "/v1/completions"
    return httpx.post(f"{sim.url}{path}", json=body, timeout=10.0)


def events(resp: httpx.Response) -> list[dict | str]:
    out: list[dict | str] = []
    for line in resp.text.splitlines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def prompt() -> str:
    return make_prompt(Mode.QUOTE)  # answered with ~38 tokens


def chat_body(**kw: object) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt()}], **kw}


# --------------------------------------------------------------------------- rejections

REJECTED = [
    ("max_tokens=0", {"max_tokens": 0}, "max_tokens", "BadRequestError"),
    ("temperature>2", {"temperature": 2.5}, "temperature", "BadRequestError"),
    ("temperature<0", {"temperature": -0.1}, "temperature", "BadRequestError"),
    ("top_p>1", {"top_p": 2.0}, "top_p", "BadRequestError"),
    ("n>1 greedy", {"n": 2, "temperature": 0.0}, None, "BadRequestError"),
    ("5 stop strings", {"stop": ["a", "b", "c", "d", "e"]}, "stop", "Bad Request"),
    ("empty prompt", {"prompt": ""}, "prompt", "Bad Request"),
    ("stream_options w/o stream", {"stream_options": {"include_usage": True}},
     "stream_options", "Bad Request"),
    ("1025 prompts", {"prompt": ["p"] * 1025}, "prompt", "Bad Request"),
]  # fmt: skip


def vllm_refuses(body: dict) -> bool:
    """Does vLLM 0.33 (its request model, then its sampling checks) refuse ``body``?"""
    try:
        req = v.CompletionRequest.model_validate(body)
        v.verify_sampling(
            req.max_tokens, 1.0 if req.temperature is None else req.temperature, req.n,
            1.0 if req.top_p is None else req.top_p,
        )
    except (ValidationError, ValueError):
        return True
    return False


@pytest.mark.parametrize(("name", "change", "param", "err_type"), REJECTED)
def test_the_simulator_refuses_what_vllm_refuses_with_vllms_error_shape(
    sim: SimulatorHandle, name: str, change: dict, param: str | None, err_type: str
) -> None:
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 8, **change}
    assert vllm_refuses(body), f"vLLM accepts {name}: the table is wrong"
    r = post(sim, body)
    assert r.status_code == 400, name
    err = v.ErrorResponse.model_validate(r.json()).error
    assert err.code == 400 and err.type == err_type and err.param == param


def test_what_vllm_accepts_the_simulator_accepts(sim: SimulatorHandle) -> None:
    for body in (
        {"model": MODEL, "prompt": "hello", "max_tokens": 1},
        {"model": MODEL, "prompt": ["a", "b"], "temperature": 2.0, "stop": ["w", "x", "y", "z"]},
        {"model": MODEL, "prompt": "hi", "n": 2, "temperature": 0.7, "seed": 1},
        {"model": MODEL, "prompt": ["p"] * 1024, "max_tokens": 1, "temperature": 0.0},
        {"model": MODEL, "prompt": "hi", "stream": True, "stream_options": {"include_usage": True}},
    ):
        assert not vllm_refuses(body)
        r = post(sim, body)
        assert r.status_code == 200, (body, r.text)


# --------------------------------------------------------------------------- responses


def test_completion_responses_validate_against_vllms_models(sim: SimulatorHandle) -> None:
    r = post(sim, {"model": MODEL, "prompt": [prompt(), prompt()], "max_tokens": 64, "seed": 3})
    reply = v.CompletionResponse.model_validate(r.json())
    assert sorted(c.index for c in reply.choices) == [0, 1]
    models = v.ModelList.model_validate(httpx.get(f"{sim.url}/v1/models").json())
    assert models.data[0].max_model_len == MAX_MODEL_LEN


def test_streamed_completion_chunks_validate(sim: SimulatorHandle) -> None:
    body = {"model": MODEL, "prompt": prompt(), "max_tokens": 64, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    chunks = events(post(sim, body))
    assert chunks[-1] == "[DONE]"
    parsed = [v.CompletionStreamResponse.model_validate(c) for c in chunks[:-1]]
    assert parsed[-1].usage is not None and parsed[-1].choices == []


def test_chat_responses_validate_and_honour_max_completion_tokens(sim: SimulatorHandle) -> None:
    reply = v.ChatCompletionResponse.model_validate(
        post(sim, chat_body(max_completion_tokens=5, max_tokens=500), chat=True).json()
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 5


def test_chat_default_max_tokens_is_the_rest_of_the_context(sim: SimulatorHandle) -> None:
    # Completions default to 16 tokens; chat (as vLLM) to whatever the window leaves.
    full = v.ChatCompletionResponse.model_validate(post(sim, chat_body(seed=1), chat=True).json())
    assert full.choices[0].finish_reason == "stop"
    assert (full.usage.completion_tokens or 0) > 16
    legacy = post(sim, {"model": MODEL, "prompt": prompt(), "seed": 1}).json()
    assert legacy["usage"]["completion_tokens"] == 16
    # An explicit null is no limit either (vLLM falls back to the rest of the window).
    nulled = post(sim, {"model": MODEL, "prompt": prompt(), "seed": 1, "max_tokens": None}).json()
    ample = post(sim, {"model": MODEL, "prompt": prompt(), "seed": 1, "max_tokens": 1000}).json()
    assert nulled["choices"][0]["finish_reason"] == "stop"
    assert nulled["usage"]["completion_tokens"] == ample["usage"]["completion_tokens"] > 16


def test_chat_accepts_content_as_a_list_of_text_parts(sim: SimulatorHandle) -> None:
    parts = [{"type": "text", "text": prompt()}]
    body = {"model": MODEL, "messages": [{"role": "user", "content": parts}], "seed": 1}
    assert v.ChatCompletionRequest.model_validate(body)
    r = post(sim, body, chat=True)
    assert r.status_code == 200
    reply = v.ChatCompletionResponse.model_validate(r.json())
    assert "[E1]" in (reply.choices[0].message.content or "")


def test_streaming_chat_starts_with_the_role_chunk(sim: SimulatorHandle) -> None:
    chunks = events(post(sim, chat_body(stream=True, seed=2), chat=True))
    assert chunks[-1] == "[DONE]"
    parsed = [v.ChatCompletionStreamResponse.model_validate(c) for c in chunks[:-1]]
    first = parsed[0].choices[0].delta
    assert first.role == "assistant" and not first.content
    assert all(p.choices[0].delta.role is None for p in parsed[1:])
    assert "".join(p.choices[0].delta.content or "" for p in parsed)


# --------------------------------------------------------------------------- context window


def test_context_overflow_is_a_silent_shrink_with_finish_reason_length(
    sim: SimulatorHandle,
) -> None:
    filler = "pad " * (MAX_MODEL_LEN - behaviour.count_tokens(prompt()) - 6)
    text = filler + prompt()
    room = MAX_MODEL_LEN - behaviour.count_tokens(text)
    assert 0 < room < 38
    r = post(sim, {"model": MODEL, "prompt": text, "max_tokens": 200, "seed": 1})
    assert r.status_code == 200  # prompt + max_tokens > max_model_len, yet no error
    reply = v.CompletionResponse.model_validate(r.json())
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == room
    too_many = post(sim, {"model": MODEL, "prompt": "hi", "max_tokens": MAX_MODEL_LEN + 1})
    err = v.ErrorResponse.model_validate(too_many.json()).error
    assert too_many.status_code == 400 and err.param == "max_tokens"
    assert f"cannot be greater than max_model_len={MAX_MODEL_LEN}" in err.message


# --------------------------------------------------------------------------- faults


def test_queue_full_fault_answers_vllms_503_and_429_is_the_proxy_fault(
    sim: SimulatorHandle,
) -> None:
    sim.set_faults(next=["queue_full", "429"])
    full = post(sim, {"model": MODEL, "prompt": "hi"})
    assert full.status_code == 503 and "Retry-After" not in full.headers
    err = v.ErrorResponse.model_validate(full.json()).error
    assert err.type == "Service Unavailable" and err.code == 503
    assert err.message.startswith("The engine is currently busy and cannot accept new requests.")
    proxy = post(sim, {"model": MODEL, "prompt": "hi"})
    assert proxy.status_code == 429 and proxy.headers["Retry-After"]


def test_queue_full_is_a_fault_rate_kind() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_sim_arguments(parser)
    config = config_from_args(parser.parse_args(["--fault-rate", "queue_full=0.25"]))
    assert config.fault_rates == {"queue_full": 0.25}


def test_stream_error_fault_sends_an_error_event_mid_stream(sim: SimulatorHandle) -> None:
    sim.set_faults(next=["stream_error"])
    body = {"model": MODEL, "prompt": prompt(), "max_tokens": 64, "stream": True, "seed": 1}
    resp = post(sim, body)
    assert resp.status_code == 200
    chunks = events(resp)
    assert chunks[-1] == "[DONE]"
    text_chunks = [v.CompletionStreamResponse.model_validate(c) for c in chunks[:-2]]
    assert text_chunks and text_chunks[0].choices[0].text  # part of the answer came first
    err = v.ErrorResponse.model_validate(chunks[-2]).error
    assert err.code == 500 and err.type == "InternalServerError"


def test_abort_fault_finishes_with_abort(sim: SimulatorHandle) -> None:
    sim.set_faults(next=["abort", "abort"])
    reply = v.CompletionResponse.model_validate(
        post(sim, {"model": MODEL, "prompt": prompt(), "max_tokens": 64}).json()
    )
    assert reply.choices[0].finish_reason == "abort"
    chunks = events(post(sim, {"model": MODEL, "prompt": prompt(), "max_tokens": 64,
                               "stream": True}))  # fmt: skip
    finishes = [c["choices"][0]["finish_reason"] for c in chunks[:-1] if c["choices"]]
    assert finishes[-1] == "abort"


# --------------------------------------------------------------------------- metrics


def test_gauges_carry_model_name_and_engine_labels(sim: SimulatorHandle) -> None:
    text = httpx.get(f"{sim.url}/metrics").text
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc"):  # fmt: skip
        (line,) = [x for x in text.splitlines() if x.startswith(name + "{")]
        assert 'engine="0"' in line and f'model_name="{MODEL}"' in line
    assert "gpu_cache_usage_perc" not in text


def test_metrics_can_be_disabled_like_disable_log_stats() -> None:
    with start_simulator(latency="zero", profile="clean", disable_log_stats=True) as quiet:
        r = httpx.get(f"{quiet.url}/metrics")
    assert r.status_code == 200
    assert not [x for x in r.text.splitlines() if x.startswith("vllm:")]
