"""The simulator's request ``priority``, as vLLM's: ordered under ``--scheduling-policy
priority``, refused (400) under the default ``fcfs``."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from qfarm.ops.sim.launch import SimulatorHandle, start_simulator

pytestmark = pytest.mark.slow


def gauge(sim: SimulatorHandle, name: str) -> float:
    for line in httpx.get(f"{sim.url}/metrics", timeout=5.0).text.splitlines():
        if line.startswith(f"vllm:num_requests_{name}{{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no vllm:num_requests_{name} in /metrics")


def served_order(sim: SimulatorHandle, sweeps: int) -> list[str]:
    """One request in a slot, ``sweeps`` sweep requests (priority 1) waiting, then an ask
    (priority 0): the names in the order their answers came back."""

    async def run() -> list[str]:
        done: list[str] = []
        async with httpx.AsyncClient(timeout=30.0) as client:

            async def send(name: str, priority: int) -> None:
                body = {"prompt": name, "max_tokens": 4, "priority": priority}
                reply = await client.post(f"{sim.url}/v1/completions", json=body)
                assert reply.status_code == 200, reply.text
                done.append(name)

            tasks = [asyncio.create_task(send("first", 0))]
            await until_async(lambda: gauge(sim, "running") == 1)
            tasks += [asyncio.create_task(send(f"sweep{i}", 1)) for i in range(sweeps)]
            await until_async(lambda: gauge(sim, "waiting") == sweeps)
            tasks.append(asyncio.create_task(send("ask", 0)))
            await asyncio.gather(*tasks)
        return done

    return asyncio.run(run())


async def until_async(condition, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, "the simulator never got there"
        await asyncio.sleep(0.01)


def test_priority_policy_serves_the_waiting_ask_before_the_waiting_sweep() -> None:
    with start_simulator(max_num_seqs=1, ttft_ms=600, tpot_ms=0, latency="zero",
                         scheduling_policy="priority") as sim:  # fmt: skip
        order = served_order(sim, sweeps=3)
    # The sweeps' own order is their arrival's, which concurrent connections do not fix.
    assert order[:2] == ["first", "ask"] and sorted(order[2:]) == ["sweep0", "sweep1", "sweep2"]


def test_fcfs_refuses_a_priority_other_than_0_as_vllm_did() -> None:
    with start_simulator(latency="zero") as sim:
        assert httpx.get(f"{sim.url}/sim/config").json()["scheduling_policy"] == "fcfs"
        ok = httpx.post(f"{sim.url}/v1/completions", json={"prompt": "p", "priority": 0})
        refused = httpx.post(f"{sim.url}/v1/completions", json={"prompt": "p", "priority": 1})
        bad = httpx.post(f"{sim.url}/v1/completions", json={"prompt": "p", "priority": "high"})
    assert ok.status_code == 200
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "message": "Got priority 1 but Priority scheduling is not enabled.",
        "type": "BadRequestError", "param": None, "code": 400,
    }  # fmt: skip
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "priority"
