"""One contract, two servers: what the farm's client and gateway meet, asserted against the
vLLM simulator and against a server nobody here wrote (llama.cpp's, on the local CPU model).

Every test runs on both. Where vLLM (whose behaviour the simulator copies) and llama.cpp's
server genuinely differ, the expectation is parametrised on ``server.kind`` with a comment,
and docs/llm.md, 'Other OpenAI-compatible servers', lists the difference and what the
gateway does about it. A test that passes on the simulator and fails on the real server is
a simulator laxity: the simulator is fixed to behave like the real servers.

The real server answers one request at a time at about 70 prompt tokens a second, so the
prompts are short and the answers a few tokens (its prompt cache makes a repeated prompt
cheap). Without `make install-local` its half is skipped (the `local_model` fixture says
why in one line).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from qfarm.common.errors import (
    ContextOverflowError,
    MalformedReplyError,
    PermanentStatusError,
)
from qfarm.common.grounding.prompts import build_prompt
from qfarm.common.models import Evidence, Generation, Mode, Sampling
from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.ops.sim.launch import start_simulator
from qfarm.worker.llm import open_gateway
from qfarm.worker.llm.balancer import Balancer
from qfarm.worker.llm.client import FINISHED_OK, LLMClient, Target
from qfarm.worker.llm.health import HealthPoller

pytestmark = pytest.mark.slow
WINDOW = 2048  # the simulator's max_model_len; the local server's --n_ctx (its default)
SIM_MODEL = "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic"
VLLM, LLAMA = "vllm-simulator", "llama.cpp"


@dataclass(frozen=True)
class Server:
    kind: str
    url: str
    model: str
    simulated: bool


@pytest.fixture(scope="module", params=[VLLM, LLAMA])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    if request.param == LLAMA:
        local = request.getfixturevalue("local_model")
        assert local.n_ctx == WINDOW
        yield Server(LLAMA, local.url, local.model, simulated=False)
        return
    with start_simulator(latency="zero", profile="clean", max_model_len=WINDOW) as sim:
        yield Server(VLLM, sim.url, SIM_MODEL, simulated=True)


def prompt(question: str = "What is the capital of Iceland?") -> str:
    """A farm prompt (quote mode) over one short block: about 200 tokens."""
    text = "Reykjavík is the capital and largest city of Iceland."
    ev = Evidence(id="E1", doc_id="d1", chunk_id="d1#0", title="Iceland", text=text, score=1.0,
                  offset_start=0, offset_end=len(text))  # fmt: skip
    return build_prompt(question, Mode.QUOTE, [ev], Policy()).text


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[LLMClient]:
    c = LLMClient(model=server.model, timeout_s=120, connect_timeout_s=5, max_connections=4)
    yield c
    c.close()


def greedy(max_tokens: int = 16, **kw: object) -> Sampling:
    return Sampling(temperature=0.0, max_tokens=max_tokens, seed=7, **kw)  # type: ignore[arg-type]


def post(server: Server, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/completions", json={"model": server.model, **body},
                      timeout=120)  # fmt: skip


# --------------------------------------------------------------------------- discovery


def test_models_lists_the_served_name(server: Server, client: LLMClient) -> None:
    ids = [m["id"] for m in httpx.get(f"{server.url}/v1/models", timeout=30).json()["data"]]
    assert server.model in ids
    window = client.max_model_len(Target(server.url), 30)
    # vLLM reports max_model_len in /v1/models; llama.cpp's server does not (the gateway is
    # told with QFARM_LLM_CONTEXT_WINDOW, which `--local-model` sets).
    assert window == (WINDOW if server.kind == VLLM else None)


def test_the_gateway_recognises_a_one_slot_server(server: Server) -> None:
    settings = Settings(llm_endpoints=server.url, model=server.model, llm_health_interval_s=0,
                        llm_context_window=WINDOW)  # fmt: skip
    with open_gateway(settings) as gw:
        (state,) = gw.endpoint_states()
    # llama.cpp's Python server runs one request at a time behind a lock: more in flight
    # only wait inside it (and time out there), so the gateway caps it at one.
    if server.kind == LLAMA:
        assert state["server"].startswith("llama.cpp server (llama-cpp-python ")
        assert state["max_inflight"] == 1
    else:
        assert state["server"] is None and state["max_inflight"] == 64
    assert state["max_model_len"] == WINDOW  # reported, or the configured fallback


def test_status_reports_health_server_and_window(server: Server) -> None:
    from qfarm.worker.llm.pool import endpoint_report

    (line,) = endpoint_report(Settings(llm_endpoints=server.url, model=server.model,
                                       llm_context_window=WINDOW), timeout_s=30)  # fmt: skip
    assert f"endpoint {server.url}: healthy" in line
    if server.kind == LLAMA:
        assert "server=llama.cpp server (llama-cpp-python " in line and "one request at a time" in line
        assert f"max_model_len={WINDOW} (QFARM_LLM_CONTEXT_WINDOW)" in line
        assert "load weighting off: /metrics answered 404" in line
    else:
        assert "server=" not in line and f"max_model_len={WINDOW} " in line


def test_runs_name_a_server_that_says_what_it_is(server: Server) -> None:
    from qfarm.producer.api import configured_endpoints

    settings = Settings(llm_endpoints=server.url, model=server.model)
    with configured_endpoints(settings) as eps:
        pass
    # llama.cpp's server titles its /openapi.json "llama.cpp Python API" with its version;
    # the simulator's runs say SIMULATED instead (and vLLM's say "real endpoint(s)").
    if server.kind == LLAMA:
        assert eps.server is not None and eps.server.startswith("llama.cpp server (")
    else:
        assert eps.server is None and eps.simulated


# --------------------------------------------------------------------------- completions


def test_a_completion_is_an_indexed_choice_with_usage(server: Server, client: LLMClient) -> None:
    reply = client.complete(Target(server.url), [prompt()], greedy(8))
    assert list(reply.choices) == [0]
    choice = reply.choices[0]
    assert isinstance(choice.text, str) and choice.finish_reason in FINISHED_OK
    assert reply.usage.prompt_tokens and reply.usage.prompt_tokens > 50
    assert reply.usage.completion_tokens and reply.usage.completion_tokens <= 8
    assert reply.simulated is server.simulated


def test_rows_name_a_recognised_server(server: Server) -> None:
    settings = Settings(llm_endpoints=server.url, model=server.model, llm_health_interval_s=0)
    with open_gateway(settings) as gw:
        gen = gw.generate(prompt(), greedy(4), job_id="j")
    assert gen.simulated is server.simulated
    if server.kind == LLAMA:
        assert gen.server is not None and gen.server.startswith("llama.cpp server (")
    else:
        assert gen.server is None


def test_max_tokens_bounds_the_answer_with_finish_length(server: Server, client: LLMClient) -> None:
    reply = client.complete(Target(server.url), [prompt("Describe Iceland at length.")], greedy(3))
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 3


def test_the_same_seed_gives_the_same_answer(server: Server, client: LLMClient) -> None:
    sampling = Sampling(temperature=0.7, max_tokens=12, seed=11)
    first = client.complete(Target(server.url), [prompt()], sampling).choices[0].text
    again = client.complete(Target(server.url), [prompt()], sampling).choices[0].text
    assert first == again


def test_a_stop_string_ends_the_answer_before_it(server: Server, client: LLMClient) -> None:
    full = client.complete(Target(server.url), [prompt()], greedy(24, stop=())).choices[0].text
    k = len(full) // 2
    stop = full[k : k + 3]
    assert stop.strip(), f"no text to stop at in {full!r}"
    cut = client.complete(Target(server.url), [prompt()], greedy(24, stop=(stop,))).choices[0]
    assert cut.text == full[: full.find(stop)]
    assert cut.finish_reason == "stop"


def test_two_prompts_in_one_request(server: Server) -> None:
    resp = post(server, {"prompt": [prompt(), prompt("Which island is Reykjavík on?")],
                         "max_tokens": 2, "temperature": 0.0})  # fmt: skip
    if server.kind == VLLM:
        assert sorted(c["index"] for c in resp.json()["choices"]) == [0, 1]
    else:
        # llama.cpp's server asserts a list holds at most one prompt: a 500 with an empty
        # message. The gateway never batches for it (the launcher sets batch size 0), and a
        # failed batch is retried one prompt at a time anyway (next test).
        assert resp.status_code == 500 and resp.json()["error"]["message"] == ""


def test_a_batch_the_server_refuses_is_answered_one_prompt_at_a_time(server: Server) -> None:
    settings = Settings(llm_endpoints=server.url, model=server.model, llm_health_interval_s=0,
                        llm_batch_size=2, llm_batch_wait_ms=200, llm_backoff_base_s=0.01,
                        llm_timeout_s=120)  # fmt: skip
    with open_gateway(settings) as gw:
        gens = gw.generate_many([(prompt(), greedy(4), "j1"), (prompt(), greedy(4), "j2")])
    assert [isinstance(g, Generation) and g.finish_reason in FINISHED_OK for g in gens] == [
        True, True]


# --------------------------------------------------------------------------- the window


def test_a_prompt_longer_than_the_window_is_a_context_overflow(
    server: Server, client: LLMClient
) -> None:
    long = prompt("Which city? " + "Reykjavík is in Iceland. " * 500)
    with pytest.raises(ContextOverflowError, match="context overflow"):
        client.complete(Target(server.url), [long], greedy(4))


def test_max_tokens_above_the_window(server: Server, client: LLMClient) -> None:
    sampling = greedy(WINDOW + 100)
    if server.kind == VLLM:
        # vLLM refuses max_tokens above max_model_len outright.
        with pytest.raises(ContextOverflowError):
            client.complete(Target(server.url), [prompt()], sampling)
        return
    # llama.cpp's server lowers it to what the window leaves, as vLLM does for the sum.
    reply = client.complete(Target(server.url), [prompt("Say one word.")], greedy(WINDOW + 100,
                            stop=("\n",)))  # fmt: skip
    assert reply.choices[0].finish_reason in FINISHED_OK
    assert (reply.usage.prompt_tokens or 0) + (reply.usage.completion_tokens or 0) <= WINDOW


def test_a_parameter_out_of_range_is_a_permanent_error(server: Server, client: LLMClient) -> None:
    resp = post(server, {"prompt": "hi", "max_tokens": 2, "top_p": 2.0})
    # vLLM: a 400. llama.cpp's server: a 500 carrying pydantic's "1 validation error" (its
    # route handler turns every exception into a 500); the client knows it is permanent.
    assert resp.status_code == (400 if server.kind == VLLM else 500)
    message, err_type = client_error(resp)
    error = client._http_error(resp.status_code, message, err_type, Target(server.url), "j",
                               None)  # fmt: skip
    assert isinstance(error, PermanentStatusError) and "top_p" in str(error)


def client_error(resp: httpx.Response) -> tuple[str, str | None]:
    from qfarm.worker.llm.client import _error_message

    return _error_message(resp.text)


def test_an_unknown_model_name(server: Server) -> None:
    resp = httpx.post(f"{server.url}/v1/completions", timeout=120,
                      json={"model": "no-such-model", "prompt": "hi", "max_tokens": 2})
    # vLLM: 404 (the gateway's message then names QFARM_MODEL). llama.cpp's server answers
    # with the model it has: a wrong QFARM_MODEL goes unnoticed there, which is why the
    # launcher serves the model under the alias it sets as QFARM_MODEL.
    assert resp.status_code == (404 if server.kind == VLLM else 200)


# --------------------------------------------------------------------------- streaming


def test_a_streamed_answer_is_the_plain_answer(server: Server, client: LLMClient) -> None:
    plain = client.complete(Target(server.url), [prompt()], greedy(10))
    streamed = client.complete(Target(server.url), [prompt()], greedy(10), stream=True)
    assert streamed.choices[0].text == plain.choices[0].text
    assert streamed.choices[0].finish_reason == plain.choices[0].finish_reason
    assert streamed.ttft_ms is not None
    # stream_options.include_usage: vLLM ends with a usage chunk; llama.cpp's server ignores it.
    if server.kind == VLLM:
        assert streamed.usage == plain.usage
    else:
        assert streamed.usage.completion_tokens is None


def test_a_stream_that_fails_before_its_first_token(server: Server, client: LLMClient) -> None:
    long = prompt("Which city? " + "Reykjavík is in Iceland. " * 500)
    if server.kind == VLLM:
        # vLLM checks the window before the stream starts: a plain 400.
        with pytest.raises(ContextOverflowError):
            client.complete(Target(server.url), [long], greedy(4), stream=True)
        return
    # llama.cpp's server answers 200 and ends the stream with no event at all: all the
    # client can say is that (transient, retried); the message says where to look.
    with pytest.raises(MalformedReplyError, match="ended before any event"):
        client.complete(Target(server.url), [long], greedy(4), stream=True)


def test_the_openai_sdk_drives_the_server(server: Server) -> None:
    import openai

    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0) as sdk:
        chat = sdk.chat.completions.create(
            model=server.model, messages=[{"role": "user", "content": prompt()}],
            max_tokens=8, seed=1, temperature=0.0,
        )  # fmt: skip
        assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content
        plain = sdk.completions.create(model=server.model, prompt=prompt(), max_tokens=6,
                                       temperature=0.0, seed=1)  # fmt: skip
        assert plain.choices[0].finish_reason in FINISHED_OK
        stream = sdk.completions.create(model=server.model, prompt=prompt(), max_tokens=6,
                                        temperature=0.0, seed=1, stream=True)  # fmt: skip
        assert "".join(c.choices[0].text for c in stream if c.choices) == plain.choices[0].text


# --------------------------------------------------------------------------- health, load


def test_liveness_is_read_where_the_server_offers_it(server: Server) -> None:
    client = LLMClient(model=server.model, timeout_s=30, connect_timeout_s=5, max_connections=2)
    balancer = Balancer([Target(server.url)], max_inflight=4, breaker_failures=3,
                        breaker_cooldown_s=1)  # fmt: skip
    poller = HealthPoller(client, balancer, interval_s=3600, metrics=True)
    try:
        poller.poll_once()
        poller.poll_once()
    finally:
        poller.close()
        client.close()
    (state,) = balancer.snapshot()
    assert state["healthy"], state["blocked"]
    # vLLM serves /health; llama.cpp's server answers it 404, so /v1/models stands in.
    assert state["health_path"] == ("/health" if server.kind == VLLM else "/v1/models")
    # No vllm:* gauges on llama.cpp's server (no /metrics at all): no load weighting.
    if server.kind == VLLM:
        assert state["weighting"] == "on"
    else:
        assert "/metrics answered 404" in state["weighting"]


def test_concurrent_jobs_never_exceed_what_the_server_serves(server: Server) -> None:
    settings = Settings(llm_endpoints=server.url, model=server.model, llm_health_interval_s=1.0,
                        llm_timeout_s=120, llm_metrics_weighting=False)  # fmt: skip
    peak = 0
    done = threading.Event()
    with open_gateway(settings) as gw:

        def watch() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, int(gw.endpoint_states()[0]["outstanding"]))
                time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            futures = [gw.submit(prompt(), greedy(6), job_id=f"j{i}") for i in range(3)]
            gens = [f.result(timeout=300) for f in futures]
        finally:
            done.set()
            watcher.join()
        (state,) = gw.endpoint_states()
    assert all(g.finish_reason in FINISHED_OK for g in gens)
    assert state["healthy"], state["blocked"]  # the busy server's slow /v1/models is not death
    # llama.cpp's server: one at a time, so never more than one in flight from here (the
    # simulator, at zero latency, may finish before the watcher sees any).
    assert peak <= int(state["max_inflight"])
    if server.kind == LLAMA:
        assert peak == 1


# --------------------------------------------------------------------------- structured output


def mode_prompt(mode: Mode) -> tuple[str, list[str]]:
    """A farm prompt of ``mode`` over two short blocks, and the ids it shows."""
    texts = {"Reykjavík": "Reykjavík is the capital and largest city of Iceland.",
             "Iceland": "Iceland is a Nordic island country in the North Atlantic Ocean."}
    ev = [Evidence(id=f"E{i}", doc_id=f"d{i}", chunk_id=f"d{i}#0", title=title, text=text,
                   score=1.0, offset_start=0, offset_end=len(text))
          for i, (title, text) in enumerate(texts.items(), start=1)]  # fmt: skip
    built = build_prompt("What is the capital of Iceland?", mode, ev, Policy())
    return built.text, [e.id for e in built.evidence]


@pytest.mark.parametrize("mode", list(Mode))
def test_each_modes_grammar_is_what_the_server_writes(server: Server, mode: Mode) -> None:
    """The farm's grammar, sent through the gateway in the field this server reads
    (``structured_outputs.grammar`` for vLLM, ``grammar`` for llama.cpp's server, chosen
    once the server is recognised), bounds what comes back: every answer is a sentence of
    the grammar, so the lattice modes cannot collapse into untagged prose."""
    from qfarm.common.grounding.grammars import answer_grammar
    from qfarm.ops.sim.grammar import parse_grammar

    text, ids = mode_prompt(mode)
    grammar = answer_grammar(mode, ids, max_claims=1, max_ids_per_claim=2)
    assert grammar is not None
    settings = Settings(llm_endpoints=server.url, model=server.model, llm_health_interval_s=0,
                        llm_context_window=WINDOW, llm_timeout_s=300)  # fmt: skip
    with open_gateway(settings) as gw:
        # One claim of at most 240 characters, twice in JSON: 256 tokens always close it.
        gen = gw.generate(text, greedy(256, grammar=grammar), job_id="j")
    assert gen.finish_reason == "stop", gen.text
    assert parse_grammar(grammar).matches(gen.text), gen.text


def test_each_server_ignores_the_others_grammar_field(server: Server) -> None:
    """Why the field is chosen per server: llama.cpp's server ignores vLLM's
    ``structured_outputs`` (and vLLM ignores a top-level ``grammar``), so a grammar sent in
    the wrong field constrains nothing and says nothing."""
    fields = {VLLM: {"grammar": 'root ::= "zq"'}, LLAMA: {"structured_outputs": {"grammar": 'root ::= "zq"'}}}
    ignored = post(server, {"prompt": prompt(), "max_tokens": 4, "temperature": 0,
                            **fields[server.kind]})  # fmt: skip
    honoured = post(server, {"prompt": prompt(), "max_tokens": 4, "temperature": 0,
                             **fields[LLAMA if server.kind == VLLM else VLLM]})  # fmt: skip
    assert ignored.status_code == honoured.status_code == 200, (ignored.text, honoured.text)
    assert ignored.json()["choices"][0]["text"] != "zq"
    assert honoured.json()["choices"][0]["text"] == "zq"
