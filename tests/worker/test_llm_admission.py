"""The gateway's admission (``worker/llm/admission.py``) on its own: order, reserve, and
requests abandoned while they wait (a cancelled run, the gateway closing)."""

from __future__ import annotations

import asyncio

from qfarm.worker.llm.admission import Admission


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_waiting_asks_go_first_and_sweeps_leave_the_reserve() -> None:
    async def run() -> list[str]:
        gate = Admission(total=3, sweep_limit=2)
        order: list[str] = []

        async def take(name: str, interactive: bool) -> None:
            await gate.acquire(interactive)
            order.append(name)

        await take("s0", False)
        await take("s1", False)
        tasks = [asyncio.create_task(take(f"s{i}", False)) for i in (2, 3)]
        await settle()
        assert order == ["s0", "s1"]  # the third permit is the reserve
        tasks.append(asyncio.create_task(take("a0", True)))
        await settle()
        assert order == ["s0", "s1", "a0"]  # straight into the reserve
        tasks.append(asyncio.create_task(take("a1", True)))
        await settle()
        for _ in range(4):
            gate.release(interactive=False)
            await settle()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(run()) == ["s0", "s1", "a0", "a1", "s2", "s3"]


def test_a_request_abandoned_while_waiting_keeps_no_permit() -> None:
    async def run() -> None:
        gate = Admission(total=1, sweep_limit=1)
        await gate.acquire(False)
        gone = asyncio.create_task(gate.acquire(False))
        await settle()
        gone.cancel()
        gate.release(False)  # in the same turn of the loop, before ``gone`` has run again
        await asyncio.wait_for(gate.acquire(False), timeout=5)
        assert gone.cancelled()

    asyncio.run(run())


def test_a_request_abandoned_as_it_was_admitted_passes_its_permit_on() -> None:
    async def run() -> None:
        gate = Admission(total=1, sweep_limit=1)
        await gate.acquire(False)
        first = asyncio.create_task(gate.acquire(False))
        second = asyncio.create_task(gate.acquire(False))
        await settle()
        gate.release(False)  # admits ``first``, which has not run yet...
        first.cancel()  # ...and is abandoned before it does
        await asyncio.wait_for(second, timeout=5)

    asyncio.run(run())
