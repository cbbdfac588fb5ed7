"""Admission to a gateway's slots: interactive requests first, and a reserve sweeps may not take.

One permit per slot of every endpoint is taken before the balancer is asked for an
endpoint, so requests beyond the slots wait here and a finished request wakes exactly
the one it admits (the balancer's waiters all wake on every change). Waiting requests
are admitted interactive (single questions) first, then sweep requests, each class in
arrival order; sweep requests hold at most ``sweep_limit`` permits, the rest being the
interactive reserve. Runs on the gateway's event loop only.
"""

from __future__ import annotations

import asyncio
from collections import deque
from itertools import chain


class Admission:
    """Permits of two classes of request: ``interactive`` ones may take every permit and
    go ahead of waiting sweep requests; sweep ones at most ``sweep_limit`` of them."""

    def __init__(self, total: int, sweep_limit: int):
        self.total = max(1, total)
        self.sweep_limit = max(1, min(sweep_limit, self.total))
        self.held = 0
        self.sweep_held = 0
        self._waiting: dict[bool, deque[asyncio.Future[None]]] = {True: deque(), False: deque()}

    def _can_take(self, interactive: bool) -> bool:
        if self.held >= self.total:
            return False
        return interactive or self.sweep_held < self.sweep_limit

    def _take(self, interactive: bool) -> None:
        self.held += 1
        if not interactive:
            self.sweep_held += 1

    async def acquire(self, interactive: bool) -> None:
        """Wait for a permit; nobody of the same class that came earlier is passed, and a
        sweep request passes no waiting interactive one."""
        lines = (True,) if interactive else (True, False)
        ahead = chain.from_iterable(self._waiting[line] for line in lines)
        if self._can_take(interactive) and all(f.done() for f in ahead):
            self._take(interactive)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[interactive].append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(interactive)  # admitted as it was cancelled: pass the permit on
            else:
                self._forget(waiter, interactive)
            raise

    def release(self, interactive: bool) -> None:
        """Give a permit back and admit whoever comes next."""
        self.held = max(0, self.held - 1)
        if not interactive:
            self.sweep_held = max(0, self.sweep_held - 1)
        self._admit()

    def _admit(self) -> None:
        for interactive in (True, False):
            queue = self._waiting[interactive]
            while queue and self._can_take(interactive):
                waiter = queue.popleft()
                if waiter.done():  # cancelled while waiting
                    continue
                self._take(interactive)
                waiter.set_result(None)

    def _forget(self, waiter: asyncio.Future[None], interactive: bool) -> None:
        try:
            self._waiting[interactive].remove(waiter)
        except ValueError:
            pass
