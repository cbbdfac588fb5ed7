"""The gateway against vLLM 0.33's contract, replayed with httpx.MockTransport.

Each reply below is shaped as vLLM 0.33 sends it (see docs/llm.md, "The vLLM contract"):
error events inside a 200 stream, ``abort``/``length`` finishes, the queue-full 503, a 501,
``max_model_len`` in ``/v1/models``, metrics with an ``engine`` label or none at all.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from qfarm.common.errors import (
    BackPressureError,
    ConfigError,
    PermanentServiceError,
    QueueFullError,
    TransientServiceError,
)
from qfarm.common.grounding.rows import build_row
from qfarm.common.models import Generation, JobRecord, Sampling
from qfarm.common.reporting.report import render_summary
from qfarm.common.settings import Settings, load_settings
from qfarm.worker.llm import Gateway
from qfarm.worker.llm.balancer import Balancer
from qfarm.worker.llm.client import ContextOverflowError, LLMClient, Target, parse_prometheus
from qfarm.worker.llm.dispatch import MAX_COMPLETION_PROMPTS
from qfarm.worker.llm.health import HealthPoller
from qfarm.worker.llm.replies import estimate_tokens
from qfarm.worker.llm.retry import is_transient_status, parse_retry_after

URL = "http://gpu1:8000"
URL2 = "http://gpu2:8000"
MODEL = "m"
QUEUE_FULL = {
    "error": {
        "message": "The engine is currently busy and cannot accept new requests. "
        "Please try again later or on a different instance.",
        "type": "Service Unavailable",
        "param": None,
        "code": 503,
    }
}

Handler = Callable[[httpx.Request], httpx.Response]


def sse(*events: dict | str) -> httpx.Response:
    text = "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)
    return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})


def completion(text: str = "answer", finish: str | None = "stop", prompt_tokens: int = 5):
    return httpx.Response(
        200,
        json={
            "choices": [{"index": 0, "text": text, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 3},
        },
    )


class Server:
    """Routes /v1/models and /v1/completions; ``replies`` are consumed per completion request."""

    def __init__(self, replies: list[httpx.Response | Handler], max_model_len: int | None = None):
        self.replies = list(replies)
        self.max_model_len = max_model_len
        self.bodies: list[dict] = []
        self.hosts: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            card = {"id": MODEL, "object": "model", "owned_by": "vllm"}
            if self.max_model_len is not None:
                card["max_model_len"] = self.max_model_len
            return httpx.Response(200, json={"object": "list", "data": [card]})
        if request.method == "GET":  # /openapi.json, /health...: vLLM's are not replayed here
            return httpx.Response(404, json={"detail": "Not Found"})
        self.bodies.append(json.loads(request.content))
        self.hosts.append(f"http://{request.url.host}:{request.url.port}")
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return reply(request) if callable(reply) else reply


def gateway(server: Server, *urls: str, **overrides: object) -> Gateway:
    opts: dict[str, object] = {
        "llm_endpoints": ",".join(urls or (URL,)),
        "model": MODEL,
        "llm_health_interval_s": 0.0,
        "llm_backoff_base_s": 0.001,
        "llm_backoff_max_s": 0.002,
        "llm_wait_for_endpoint_s": 2.0,
        **overrides,
    }
    return Gateway(Settings(**opts), transport=httpx.MockTransport(server))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- 1: stream errors

STREAM_ERROR = {
    "error": {"message": "Internal server error", "type": "InternalServerError", "code": 500}
}


def test_an_error_event_in_a_stream_is_a_failed_attempt_with_the_servers_message() -> None:
    server = Server([sse({"choices": [{"index": 0, "text": "partial "}]}, STREAM_ERROR, "[DONE]")])
    with gateway(server, llm_stream=True, llm_max_attempts=2) as gw:
        with pytest.raises(TransientServiceError) as info:
            gw.generate("q", Sampling(max_tokens=8), job_id="j")
    assert len(server.bodies) == 2  # retried: a 500 is transient
    message = str(info.value)
    assert "Internal server error" in message and "InternalServerError" in message
    assert "partial" not in message


def test_a_stream_error_event_is_retried_or_not_by_its_code() -> None:
    bad_request = {"error": {"message": "bad json schema", "type": "BadRequestError", "code": 400}}
    server = Server([sse(bad_request, "[DONE]")])
    with gateway(server, llm_stream=True) as gw:
        with pytest.raises(PermanentServiceError, match="bad json schema"):
            gw.generate("q", Sampling(max_tokens=8), job_id="j")
    assert len(server.bodies) == 1

    ok = sse(
        {"choices": [{"index": 0, "text": "fine", "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 1}},
        "[DONE]",
    )
    server = Server([sse(STREAM_ERROR, "[DONE]"), ok])
    with gateway(server, llm_stream=True) as gw:
        gen = gw.generate("q", Sampling(max_tokens=8), job_id="j")
    assert gen.text == "fine" and gen.attempts == 2


# --------------------------------------------------------------------------- 2: finish_reason


@pytest.mark.parametrize("finish", ["abort", "error", None])
def test_a_choice_that_did_not_finish_is_a_failed_attempt(finish: str | None) -> None:
    server = Server([completion("half an ans", finish), completion("whole answer", "stop")])
    with gateway(server) as gw:
        gen = gw.generate("q", Sampling(max_tokens=8), job_id="j")
    assert gen.text == "whole answer" and gen.attempts == 2 and not gen.truncated


def test_an_abort_on_every_attempt_fails_the_job_naming_the_reason() -> None:
    server = Server([completion("x", "abort")])
    with gateway(server, llm_max_attempts=3) as gw:
        with pytest.raises(TransientServiceError, match="finish_reason 'abort'"):
            gw.generate("q", Sampling(max_tokens=8), job_id="j")
    assert len(server.bodies) == 3


def test_a_length_finish_is_kept_and_marked_truncated() -> None:
    server = Server([completion("cut off", "length")])
    with gateway(server) as gw:
        gen = gw.generate("q", Sampling(max_tokens=8), job_id="j")
    assert gen.text == "cut off" and gen.truncated and gen.finish_reason == "length"
    assert gen.attempts == 1


def test_the_batch_path_retries_an_aborted_prompt_alone() -> None:
    def batch(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if isinstance(body["prompt"], list):
            return httpx.Response(
                200,
                json={
                    "choices": [
                        {"index": 0, "text": "a", "finish_reason": "stop"},
                        {"index": 1, "text": "b-part", "finish_reason": "abort"},
                    ],
                    "usage": {"prompt_tokens": 4, "completion_tokens": 2},
                },
            )
        return completion("b-whole", "stop")

    server = Server([batch])
    greedy = Sampling(temperature=0.0, max_tokens=8)
    with gateway(server, llm_batch_size=2, llm_batch_wait_ms=200) as gw:
        results = gw.generate_many([("p0", greedy, "j0"), ("p1", greedy, "j1")])
    assert [r.text for r in results] == ["a", "b-whole"]  # type: ignore[union-attr]


# --------------------------------------------------------------------------- 3: context window


def test_max_model_len_is_read_at_start_up_and_max_tokens_lowered_to_fit() -> None:
    prompt = "x" * 300  # estimated at 101 tokens
    server = Server([completion("short", "length", prompt_tokens=80)], max_model_len=150)
    with gateway(server) as gw:
        assert gw.endpoint_states()[0]["max_model_len"] == 150
        gen = gw.generate(prompt, Sampling(max_tokens=100), job_id="j")
    assert server.bodies[0]["max_tokens"] == 150 - estimate_tokens(prompt)
    assert gen.max_tokens_effective == 150 - estimate_tokens(prompt) and gen.truncated


def test_a_silent_shrink_by_the_server_is_recorded() -> None:
    # The estimate says it fits; the server's own count says it did not: vLLM lowered max_tokens.
    prompt = "word " * 10
    server = Server([completion("cut", "length", prompt_tokens=120)], max_model_len=150)
    with gateway(server) as gw:
        gen = gw.generate(prompt, Sampling(max_tokens=100), job_id="j")
    assert server.bodies[0]["max_tokens"] == 100
    assert gen.max_tokens_effective == 30 and gen.truncated


def test_a_job_that_fits_records_nothing() -> None:
    server = Server([completion("ok", "stop", prompt_tokens=10)], max_model_len=4096)
    with gateway(server) as gw:
        gen = gw.generate("short prompt", Sampling(max_tokens=100), job_id="j")
    assert gen.max_tokens_effective is None and not gen.truncated


def test_a_prompt_longer_than_the_window_is_a_named_permanent_error() -> None:
    too_long = {
        "error": {
            "message": "This model's maximum context length is 150 tokens. However, your prompt "
            "contains 900 input tokens, which exceeds this limit even without any output tokens. "
            "Please reduce the length of the input prompt.",
            "type": "BadRequestError",
            "param": "input_tokens",
            "code": 400,
        }
    }
    server = Server([httpx.Response(400, json=too_long)], max_model_len=150)
    with gateway(server) as gw:
        with pytest.raises(ContextOverflowError, match="context overflow") as info:
            gw.generate("x" * 3000, Sampling(max_tokens=16), job_id="j")
    assert info.value.attempts == 1 and len(server.bodies) == 1
    assert server.bodies[0]["max_tokens"] == 16  # a hopeless estimate is left to the server


# --------------------------------------------------------------------------- 4: overload


def test_queue_full_503_is_back_pressure_and_goes_elsewhere_without_breaker_counts() -> None:
    def route(request: httpx.Request) -> httpx.Response:
        if request.url.host == "gpu1":
            return httpx.Response(503, json=QUEUE_FULL)
        return completion("from gpu2")

    server = Server([route])
    with gateway(server, URL, URL2, llm_breaker_failures=2) as gw:
        for i in range(6):
            gen = gw.generate(f"q{i}", Sampling(max_tokens=8), job_id=f"j{i}")
            assert gen.text == "from gpu2"
        gpu1 = gw.endpoint_states()[0]
    assert gpu1["failed"] >= 1 and gpu1["breaker"] == "closed"
    assert gpu1["consecutive_failures"] == 0 and gpu1["times_opened"] == 0


def test_a_dead_servers_503_still_counts_towards_the_breaker() -> None:
    dead = httpx.Response(503, text="Service Unavailable")  # e.g. a proxy with no upstream
    server = Server([dead])
    with gateway(server, llm_breaker_failures=2, llm_max_attempts=2) as gw:
        with pytest.raises(TransientServiceError):
            gw.generate("q", Sampling(max_tokens=8), job_id="j")
        assert gw.endpoint_states()[0]["breaker"] == "open"


def test_the_queue_full_error_says_it_is_back_pressure() -> None:
    client = LLMClient(
        model=MODEL,
        timeout_s=5,
        connect_timeout_s=1,
        max_connections=1,
        transport=httpx.MockTransport(lambda r: httpx.Response(503, json=QUEUE_FULL)),
    )
    with pytest.raises(TransientServiceError, match="queue full") as info:
        client.complete(Target(URL), ["p"], Sampling(), job_id="j")
    assert isinstance(info.value, QueueFullError)


# --------------------------------------------------------------------------- 5: permanent codes


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (501, {"error": {"message": "not implemented", "type": "NotImplementedError", "code": 501}}),
        (400, {"error": {"message": "max_tokens must be at least 1, got 0.",
                         "type": "BadRequestError", "param": "max_tokens", "code": 400}}),
    ],
)  # fmt: skip
def test_permanent_codes_are_never_retried(status: int, body: dict) -> None:
    server = Server([httpx.Response(status, json=body)])
    with gateway(server, URL, URL2) as gw:
        with pytest.raises(PermanentServiceError, match=body["error"]["message"][:12]):
            gw.generate("q", Sampling(max_tokens=8), job_id="j")
    assert len(server.bodies) == 1
    assert not is_transient_status(status)


# --------------------------------------------------------------------------- 6: metrics

GAUGES_WITH_ENGINE = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 9.0
"""
NO_VLLM_METRICS = "# TYPE python_gc_objects_collected_total counter\npython_info 1.0\n"


def test_gauges_with_an_engine_label_are_summed_over_engines() -> None:
    values = parse_prometheus(GAUGES_WITH_ENGINE)
    assert values == {"vllm:num_requests_running": 7.0, "vllm:num_requests_waiting": 1.0}


def poller_for(metrics_text: str, *urls: str) -> tuple[HealthPoller, Balancer]:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            text = metrics_text if request.url.host == "gpu1" else GAUGES_WITH_ENGINE
            return httpx.Response(200, text=text)
        return httpx.Response(200)

    client = LLMClient(
        model=MODEL,
        timeout_s=5,
        connect_timeout_s=1,
        max_connections=2,
        transport=httpx.MockTransport(handler),
    )
    targets = [Target(u) for u in urls or (URL,)]
    balancer = Balancer(targets, max_inflight=8, breaker_failures=3, breaker_cooldown_s=1)
    poller = HealthPoller(client, balancer, interval_s=3600, metrics=True)
    return poller, balancer


def test_missing_metrics_turn_weighting_off_and_say_so_once(caplog) -> None:
    poller, balancer = poller_for(NO_VLLM_METRICS, URL, URL2)
    try:
        with caplog.at_level(logging.WARNING, logger="qfarm.llm"):
            for _ in range(3):
                poller.poll_once()
    finally:
        poller.close()
    said = [r.getMessage() for r in caplog.records if "load weighting is off" in r.getMessage()]
    assert len(said) == 1 and "gpu1" in said[0] and "--disable-log-stats" in said[0]
    by_url = {s["endpoint"]: s["weighting"] for s in balancer.snapshot()}
    assert by_url[URL].startswith("off: ") and "--disable-log-stats" in by_url[URL]
    assert by_url[URL2] == "on"
    assert balancer.endpoints[1].others_load == 8.0  # engine-labelled gauges were used


def test_weighting_switched_off_by_setting_says_so() -> None:
    balancer = Balancer([Target(URL)], max_inflight=8, breaker_failures=3, breaker_cooldown_s=1,
                        metrics_weighting=False)  # fmt: skip
    assert balancer.snapshot()[0]["weighting"] == "off (QFARM_LLM_METRICS_WEIGHTING=false)"


# --------------------------------------------------------------------------- 7: prompt-list cap


def test_a_batch_size_above_vllms_prompt_list_cap_is_refused_naming_the_setting() -> None:
    """A batch larger than vLLM takes would be a 400 for every request: refused at start-up."""
    assert Settings(llm_batch_size=MAX_COMPLETION_PROMPTS).llm_batch_size == MAX_COMPLETION_PROMPTS
    with pytest.raises(ConfigError, match=rf"QFARM_LLM_BATCH_SIZE: .*less than or equal to {MAX_COMPLETION_PROMPTS}"):
        load_settings(llm_batch_size=MAX_COMPLETION_PROMPTS + 1)


# ---------------------------------------------------------- absurd Retry-After values


@pytest.mark.parametrize("value", ["1000000000", "inf", "1e308", "Infinity"])
def test_absurd_retry_after_values_are_the_cap(value: str) -> None:
    assert parse_retry_after(value, cap_s=60.0) == 60.0


def test_a_retry_after_date_decades_away_is_the_cap() -> None:
    header = email.utils.formatdate(4_102_444_800.0, usegmt=True)  # 2100-01-01
    assert parse_retry_after(header, cap_s=60.0) == 60.0
    assert parse_retry_after("nan", cap_s=60.0) is None
    assert math.isclose(parse_retry_after("12", cap_s=60.0) or 0, 12.0)


def test_the_gateway_caps_a_servers_retry_after_with_the_setting() -> None:
    limited = httpx.Response(429, headers={"Retry-After": "1000000000"}, json={"error": "slow"})
    server = Server([limited, completion("ok")])
    with gateway(server, URL, llm_retry_after_max_s=0.3) as gw:
        gen = gw.generate("q", Sampling(max_tokens=8), job_id="j")  # waits 0.3 s, not 31 years
    assert gen.text == "ok" and gen.attempts == 2


def test_a_passing_health_poll_brings_an_endpoint_back_from_a_retry_after() -> None:
    class Clock:
        now = 100.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    balancer = Balancer([Target(URL)], max_inflight=8, breaker_failures=3, breaker_cooldown_s=1,
                        clock=clock)  # fmt: skip
    ep = balancer.acquire()
    limited = BackPressureError("429", status=429, retry_after_s=60.0)
    balancer.release(ep, ok=False, error=limited)
    assert not balancer.has_available()
    clock.now += 2
    balancer.mark_health(URL, True)  # the first poll after the 429: it rests one interval
    assert not balancer.has_available()
    clock.now += 2
    balancer.mark_health(URL, True)
    assert balancer.has_available()


# --------------------------------------------------------------------------- 2: rows and summary


def test_truncated_rows_are_counted_per_mode_in_the_summary() -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "common" / "reporting"))
    from test_report import make_manifest, make_row

    rows = [
        make_row("q1", "quote", 0, "STRICT", truncated=True, finish_reason="length"),
        make_row("q1", "quote", 1, "STRICT", truncated=False, finish_reason="stop"),
        make_row("q2", "quote", 0, "HYBRID", truncated=True, max_tokens_effective=40),
        make_row("q2", "claim_lattice", 0, "STRICT", truncated=False, max_tokens_effective=90),
    ]
    summary = render_summary(make_manifest(), rows)
    section = summary.split("## Truncated answers", 1)[1].split("\n## ", 1)[0]
    assert "| `quote` | 2 | 1 |" in section
    assert "| `claim_lattice` | 0 | 1 |" in section
    assert "claim_lattice_pointer" not in section
    quiet = render_summary(make_manifest(), [make_row("q1", "quote", 0, "STRICT")])
    assert "## Truncated answers" not in quiet


def test_a_truncated_answer_is_marked_in_its_row() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from test_pipeline import make_job

    gen = Generation(text="cut", finish_reason="length", truncated=True, max_tokens_effective=7)
    row = build_row(JobRecord(job=make_job("Who?"), generation=gen))
    assert row.truncated is True and row.finish_reason == "length"
    assert row.max_tokens_effective == 7


def test_queue_full_waits_without_using_up_the_attempt_budget() -> None:
    server = Server([httpx.Response(503, json=QUEUE_FULL)] * 5 + [completion("finally")])
    with gateway(server, llm_max_attempts=2) as gw:
        gen = gw.generate("q", Sampling(max_tokens=8), job_id="j")
        state = gw.endpoint_states()[0]
    assert gen.text == "finally" and gen.attempts == 6  # six requests, none charged but the last
    assert state["breaker"] == "closed"


def test_queue_full_for_longer_than_the_wait_setting_fails_the_job() -> None:
    server = Server([httpx.Response(503, json=QUEUE_FULL)])
    with gateway(server, llm_max_attempts=2, llm_wait_for_endpoint_s=0.3) as gw:
        with pytest.raises(TransientServiceError, match="queue full"):
            gw.generate("q", Sampling(max_tokens=8), job_id="j")


def test_a_batch_sends_a_prompt_too_tight_for_the_window_alone_with_a_lowered_budget() -> None:
    server = Server([completion("ok")], max_model_len=200)
    greedy = Sampling(temperature=0.0, max_tokens=100)
    tight = "y" * 400  # estimated at 135 tokens: room for 65
    with gateway(server, llm_batch_size=3, llm_batch_wait_ms=200) as gw:
        results = gw.generate_many(
            [("a", greedy, "j0"), (tight, greedy, "j1"), ("b", greedy, "j2")]
        )
    assert all(not isinstance(r, Exception) for r in results)
    alone = [b for b in server.bodies if b["prompt"] == tight]
    assert len(alone) == 1 and alone[0]["max_tokens"] == 200 - estimate_tokens(tight)
    assert ["a", "b"] in [b["prompt"] for b in server.bodies]
    assert results[1].max_tokens_effective == 65  # type: ignore[union-attr]


def test_without_health_polling_weighting_says_it_is_off(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="qfarm.llm"):
        with gateway(Server([completion()])) as gw:  # llm_health_interval_s=0 in gateway()
            state = gw.endpoint_states()[0]
    assert state["weighting"] == "off: no /metrics polling (QFARM_LLM_HEALTH_INTERVAL_S=0)"
    assert any("QFARM_LLM_HEALTH_INTERVAL_S=0" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- other servers
# llama.cpp's Python server (llama-cpp-python 0.3.36), replayed as its source answers; the
# same behaviours against the real server: tests/ops/test_server_contract.py.

LLAMA_OPENAPI = {"openapi": "3.1.0", "info": {"title": "🦙 llama.cpp Python API", "version": "0.3.36"}}
LLAMA_VALIDATION_500 = {"error": {
    "message": "1 validation error:\n  {'type': 'less_than_equal', 'loc': ('body', 'top_p'), "
               "'msg': 'Input should be less than or equal to 1', 'input': 2}",
    "type": "internal_server_error", "param": None, "code": None}}


def llama_cpp(replies: list[httpx.Response | Handler]) -> Server:
    server = Server(replies)
    plain = server.__call__

    def route(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi.json":
            return httpx.Response(200, json=LLAMA_OPENAPI)
        return plain(request)

    server.__call__ = route  # type: ignore[method-assign]
    return server


def llama_gateway(server: Server, **overrides: object) -> Gateway:
    opts: dict[str, object] = {"llm_endpoints": URL, "model": MODEL, "llm_health_interval_s": 0.0,
                               "llm_backoff_base_s": 0.001, "llm_backoff_max_s": 0.002, **overrides}
    settings = Settings(**opts)  # type: ignore[arg-type]
    return Gateway(settings, transport=httpx.MockTransport(lambda r: server.__call__(r)))


def test_llama_cpp_server_is_held_to_one_request_in_flight_and_said_once(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="qfarm.llm"):
        with llama_gateway(llama_cpp([completion()]), llm_context_window=2048) as gw:
            (state,) = gw.endpoint_states()
    assert state["server"] == "llama.cpp server (llama-cpp-python 0.3.36)"
    assert state["max_inflight"] == 1 and state["max_model_len"] == 2048
    said = [r.getMessage() for r in caplog.records if "llama.cpp server" in r.getMessage()]
    assert len(said) == 1 and "one request in flight" in said[0]


def test_a_vllm_server_keeps_the_configured_in_flight_cap() -> None:
    with gateway(Server([completion()]), llm_max_inflight_per_endpoint=32) as gw:
        (state,) = gw.endpoint_states()
    assert state["server"] is None and state["max_inflight"] == 32


def test_the_configured_window_stands_in_only_where_models_reports_none() -> None:
    with gateway(Server([completion()], max_model_len=4096), llm_context_window=2048) as gw:
        assert gw.endpoint_states()[0]["max_model_len"] == 4096  # the server's own figure
    prompt = "x" * 300  # estimated at 101 tokens
    server = llama_cpp([completion()])
    with llama_gateway(server, llm_context_window=150) as gw:
        gw.generate(prompt, Sampling(max_tokens=100), job_id="j")
    assert server.bodies[0]["max_tokens"] == 150 - estimate_tokens(prompt)


def test_a_500_carrying_a_validation_error_is_permanent_and_not_retried() -> None:
    server = llama_cpp([httpx.Response(500, json=LLAMA_VALIDATION_500)])
    with llama_gateway(server, llm_max_attempts=4) as gw:
        with pytest.raises(PermanentServiceError, match="refused a request parameter"):
            gw.generate("q", Sampling(max_tokens=8), job_id="j")
    assert len(server.bodies) == 1
    # Any other 500 is still a server failure, retried.
    other = llama_cpp([httpx.Response(500, json={"error": {"message": "", "type": "x"}})])
    with llama_gateway(other, llm_max_attempts=2) as gw:
        with pytest.raises(TransientServiceError):
            gw.generate("q", Sampling(max_tokens=8), job_id="j")
    assert len(other.bodies) == 2


def test_a_stream_that_ends_before_any_event_says_so() -> None:
    server = llama_cpp([httpx.Response(200, text="", headers={"content-type": "text/event-stream"})])
    with llama_gateway(server, llm_stream=True, llm_max_attempts=1) as gw:
        with pytest.raises(TransientServiceError, match="ended before any event"):
            gw.generate("q", Sampling(max_tokens=8), job_id="j")


def not_found(request: httpx.Request) -> httpx.Response:
    return httpx.Response(404, json={"detail": "Not Found"})


def liveness_poller(models: Handler, health: Handler = not_found) -> tuple[HealthPoller, Balancer]:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return models(request)
        return health(request)  # /health, /metrics

    client = LLMClient(model=MODEL, timeout_s=5, connect_timeout_s=1, max_connections=2,
                       transport=httpx.MockTransport(handler))  # fmt: skip
    balancer = Balancer([Target(URL)], max_inflight=8, breaker_failures=3, breaker_cooldown_s=1)
    return HealthPoller(client, balancer, interval_s=3600, metrics=False), balancer


def test_a_llama_cpp_server_without_metrics_is_said_once_with_weighting_on(caplog) -> None:
    server = llama_cpp([completion()])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path in ("/health", "/metrics"):
            return httpx.Response(404, json={"detail": "Not Found"})
        return server.__call__(request)

    settings = Settings(llm_endpoints=URL, model=MODEL, llm_health_interval_s=0.05)
    with caplog.at_level(logging.INFO, logger="qfarm.llm"):
        with Gateway(settings, transport=httpx.MockTransport(handler)) as gw:
            deadline = time.monotonic() + 5
            while gw.endpoint_states()[0]["weighting"] == "on" and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.3)  # several more polls
            (state,) = gw.endpoint_states()
    assert state["healthy"] and "/metrics answered 404" in state["weighting"]
    said = [r.getMessage() for r in caplog.records if "metrics" in r.getMessage()]
    assert len(said) == 1, said


def test_a_server_without_health_is_asked_v1_models_instead_said_once(caplog) -> None:
    poller, balancer = liveness_poller(lambda r: httpx.Response(200, json={"data": []}))
    try:
        with caplog.at_level(logging.WARNING, logger="qfarm.llm"):
            for _ in range(3):
                poller.poll_once()
    finally:
        poller.close()
    (state,) = balancer.snapshot()
    assert state["healthy"] and state["health_path"] == "/v1/models"
    said = [r.getMessage() for r in caplog.records if "has no /health" in r.getMessage()]
    assert len(said) == 1


def test_a_slow_poll_never_writes_a_stale_down_over_a_live_server_without_health() -> None:
    # The poller's own loop and a caller can poll together. The first /health answer
    # (404) comes late: by then another poll has moved the endpoint to /v1/models and
    # found it alive, and the late poll must not then mark it down.
    health_calls: list[float] = []

    def health(request: httpx.Request) -> httpx.Response:
        health_calls.append(time.monotonic())
        if len(health_calls) == 1:
            time.sleep(0.3)
        return not_found(request)

    poller, balancer = liveness_poller(lambda r: httpx.Response(200, json={"data": []}), health)
    try:
        polls = [threading.Thread(target=poller.poll_once) for _ in range(2)]
        for t in polls:
            t.start()
            time.sleep(0.05)
        for t in polls:
            t.join()
    finally:
        poller.close()
    (state,) = balancer.snapshot()
    assert state["healthy"], state
    assert state["health_path"] == "/v1/models"


def test_a_v1_models_timeout_is_busy_while_our_request_runs_and_down_otherwise() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("the model lock is held", request=request)

    poller, balancer = liveness_poller(slow)
    try:
        poller.poll_once()
        assert not balancer.snapshot()[0]["healthy"]  # idle and silent: down
        balancer.mark_health(URL, True)
        endpoint = balancer.acquire(wait_s=1)  # one of our requests is in flight
        poller.poll_once()
        assert balancer.snapshot()[0]["healthy"]  # busy serving it, not dead
        balancer.release(endpoint, ok=True)
    finally:
        poller.close()
