"""Interactive requests (single questions) at the gateway: ahead of waiting sweep requests,
into a reserve of slots the sweep may not take, and with vLLM's ``priority`` when enabled."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import httpx
import pytest

from qfarm.common.models import Job, JobRecord, Question, Sampling
from qfarm.common.settings import Settings
from qfarm.worker.llm import Gateway
from qfarm.worker.llm.client import LLAMA_CPP, build_body

URL = "http://gpu1:8000"
SWEEP = Sampling(max_tokens=4)
ASK = Sampling(max_tokens=4, interactive=True)


class GatedServer:
    """Holds every sweep prompt until ``open`` is set; answers asks at once. Records the
    order prompts arrived in and every request body."""

    def __init__(self) -> None:
        self.open = False
        self.arrived: list[str] = []
        self.bodies: list[dict] = []
        self.now = 0
        self.peak = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": []})
        body = json.loads(request.content)
        self.bodies.append(body)
        prompt = body["prompt"]
        self.arrived.append(prompt)
        self.now += 1  # every request runs on the gateway's one loop: no lock needed
        self.peak = max(self.peak, self.now)
        try:
            while prompt.startswith("sweep") and not self.open:
                await asyncio.sleep(0.005)
        finally:
            self.now -= 1
        return httpx.Response(200, json={
            "choices": [{"index": 0, "text": f"echo {prompt}", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2},
        })  # fmt: skip


def gateway(server: GatedServer, **overrides: object) -> Gateway:
    opts: dict[str, object] = {
        "llm_endpoints": URL,
        "model": "m",
        "llm_health_interval_s": 0.0,
        **overrides,
    }
    return Gateway(Settings(**opts), transport=httpx.MockTransport(server))  # type: ignore[arg-type]


def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the gateway never got there"
        time.sleep(0.005)


def settle(gw: Gateway) -> None:
    """Let the gateway's loop run every step already scheduled on it."""

    async def spin() -> None:
        for _ in range(20):
            await asyncio.sleep(0)

    gw._loop.run(spin())


def sweep(n: int) -> list[tuple[str, Sampling, str]]:
    return [(f"sweep{i}", SWEEP, f"s{i}") for i in range(n)]


def test_an_ask_is_served_at_once_while_a_sweep_holds_every_slot_it_may() -> None:
    """The sweep fills the endpoint's slots but the reserve, and keeps more waiting; the
    ask goes straight to the reserved slot and is answered before any sweep prompt."""
    server = GatedServer()
    with gateway(server, llm_max_inflight_per_endpoint=3) as gw:
        held = gw.submit_many(sweep(8))
        until(lambda: server.now >= 2)
        settle(gw)  # the sweep has taken every slot it may: 2 of 3, 1 kept for asks
        ask = gw.submit_many([("ask", ASK, "a")])[0]
        assert ask.result(timeout=5).text == "echo ask"
        assert not any(f.done() for f in held)
        server.open = True
        assert [f.result(timeout=10).text for f in held] == [f"echo sweep{i}" for i in range(8)]
    assert server.peak == 3


def test_an_ask_goes_ahead_of_the_sweep_requests_already_waiting() -> None:
    """A one-slot endpoint keeps no reserve (the sweep could never run): the ask waits for
    the request in flight, and only for it."""
    server = GatedServer()
    with gateway(server, llm_max_inflight_per_endpoint=1, llm_interactive_reserve=1) as gw:
        held = gw.submit_many(sweep(5))
        until(lambda: server.arrived == ["sweep0"])
        ask = gw.submit_many([("ask", ASK, "a")])[0]
        until(ask.running)
        settle(gw)  # the ask now waits for a slot, behind four sweep prompts
        server.open = True
        assert ask.result(timeout=10).text == "echo ask"
        for f in held:
            f.result(timeout=10)
    assert server.arrived == ["sweep0", "ask", "sweep1", "sweep2", "sweep3", "sweep4"]


def test_the_sweep_uses_every_slot_but_the_reserve() -> None:
    server = GatedServer()
    with gateway(server, llm_max_inflight_per_endpoint=4, llm_interactive_reserve=2) as gw:
        held = gw.submit_many(sweep(6))
        until(lambda: server.now >= 2)
        settle(gw)
        assert server.now == 2
        assert gw.endpoint_states()[0]["sweep_max_inflight"] == 2
        server.open = True
        for f in held:
            f.result(timeout=10)
    assert server.peak == 2


def test_requests_carry_priority_only_when_the_farm_enables_it() -> None:
    server = GatedServer()
    server.open = True
    with gateway(server) as gw:
        gw.generate_many([("sweep", SWEEP, "s"), ("ask", ASK, "a")])
    assert all("priority" not in body for body in server.bodies)

    server = GatedServer()
    server.open = True
    with gateway(server, llm_priority=True) as gw:
        gw.generate_many([("sweep", SWEEP, "s")])
        gw.generate_many([("ask", ASK, "a")])
    assert [(b["prompt"], b["priority"]) for b in server.bodies] == [("sweep", 1), ("ask", 0)]


def test_priority_is_vllms_field_and_never_sent_to_llama_cpp() -> None:
    assert "priority" not in build_body("m", ["p"], ASK, stream=False)
    assert build_body("m", ["p"], ASK, stream=False, priority=True)["priority"] == 0
    assert build_body("m", ["p"], SWEEP, stream=False, priority=True)["priority"] == 1
    assert "priority" not in build_body("m", ["p"], SWEEP, stream=False, priority=True,
                                        dialect=LLAMA_CPP)


@pytest.mark.parametrize(("run_id", "interactive"), [("ask-20261207-1", True), ("run-1", False)])
def test_an_ask_runs_requests_are_interactive(run_id: str, interactive: bool) -> None:
    from qfarm.worker.pipeline import sampling_for

    job = Job(run_id=run_id, job_id="j", question=Question(id="q", text="Who?"),
              mode="quote", sample_index=0, seed=1)  # fmt: skip
    assert sampling_for(JobRecord(job=job)).interactive is interactive


def test_a_server_without_priority_scheduling_says_how_to_fix_it() -> None:
    """vLLM's engines before V1 (and the simulator under fcfs) refuse a priority other
    than 0: every job fails at once, with the fix in its error."""
    from qfarm.common.errors import PermanentServiceError

    def refuse(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": []})
        return httpx.Response(400, json={"error": {
            "message": "Got priority 1 but Priority scheduling is not enabled.",
            "type": "BadRequestError", "param": None, "code": 400}})  # fmt: skip

    settings = Settings(llm_endpoints=URL, model="m", llm_health_interval_s=0.0,
                        llm_priority=True)  # fmt: skip
    with Gateway(settings, transport=httpx.MockTransport(refuse)) as gw:
        with pytest.raises(PermanentServiceError, match="--scheduling-policy priority, or unset "
                           "QFARM_LLM_PRIORITY") as caught:  # fmt: skip
            gw.generate("sweep", SWEEP, job_id="s")
    assert caught.value.attempts == 1
