"""The gateway's event loop: hand-over from threads, the in-flight cap, closing."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from qfarm.common.errors import TransientServiceError
from qfarm.common.models import Sampling
from qfarm.common.settings import Settings
from qfarm.worker.llm import Gateway

URL = "http://gpu1:8000"


class EchoServer:
    """Answers each prompt with itself after a short wait; counts requests in flight."""

    def __init__(self, delay_s: float = 0.02):
        self.delay_s = delay_s
        self.now = 0
        self.peak = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": []})
        prompt = json.loads(request.content)["prompt"]
        self.now += 1  # every request runs on the gateway's one loop: no lock needed
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.now -= 1
        return httpx.Response(
            200,
            json={
                "choices": [{"index": 0, "text": f"echo {prompt}", "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 2},
            },
        )


def gateway(server: EchoServer, **overrides: object) -> Gateway:
    opts: dict[str, object] = {
        "llm_endpoints": URL,
        "model": "m",
        "llm_health_interval_s": 0.0,
        "llm_max_inflight_per_endpoint": 3,
        **overrides,
    }
    return Gateway(Settings(**opts), transport=httpx.MockTransport(server))  # type: ignore[arg-type]


def test_submit_many_answers_each_prompt_and_keeps_the_cap() -> None:
    server = EchoServer()
    with gateway(server) as gw:
        items = [(f"p{i}", Sampling(max_tokens=4), f"j{i}") for i in range(20)]
        futures = gw.submit_many(items)
        texts = [f.result(timeout=10).text for f in futures]
    assert texts == [f"echo p{i}" for i in range(20)]
    assert 1 < server.peak <= 3  # queued requests waited for a slot; none went over


def test_generate_many_from_many_threads_shares_the_one_loop() -> None:
    from concurrent.futures import ThreadPoolExecutor

    server = EchoServer()
    with gateway(server, llm_max_inflight_per_endpoint=8) as gw:
        with ThreadPoolExecutor(4) as pool:
            batches = list(pool.map(
                lambda t: gw.generate_many([(f"t{t}-{i}", Sampling(), f"t{t}-{i}") for i in range(5)]),
                range(4),
            ))  # fmt: skip
    for t, results in enumerate(batches):
        assert [r.text for r in results] == [f"echo t{t}-{i}" for i in range(5)]  # type: ignore[union-attr]
    assert server.peak <= 8


def test_a_closed_gateway_fails_requests_instead_of_hanging() -> None:
    gw = gateway(EchoServer())
    gw.close()
    (future,) = gw.submit_many([("p", Sampling(), "j")])
    with pytest.raises(TransientServiceError, match="closed"):
        future.result(timeout=5)
    with pytest.raises(TransientServiceError, match="closed"):
        gw.generate("p", Sampling(), job_id="j")


def test_a_blocking_call_on_the_loop_itself_is_refused() -> None:
    with gateway(EchoServer()) as gw:
        async def blocking() -> None:
            gw.submit_many([("p", Sampling(), "j")])

        future = asyncio.run_coroutine_threadsafe(blocking(), gw._loop.loop)
        with pytest.raises(RuntimeError, match="event loop"):
            future.result(timeout=5)
