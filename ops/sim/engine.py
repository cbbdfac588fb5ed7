"""The cost engine behind ``--latency cost``: continuous batching on the event loop.

Each prompt × choice is one sequence, as in vLLM v1, where a request with ``n`` > 1 is
``n`` engine requests sharing the prompt through the prefix cache. A sequence waits for
one of ``max_num_seqs`` places, served by (request ``priority``, arrival) as the slots of
the per-request presets are (all priorities are 0 under ``--scheduling-policy fcfs``:
arrival order); running sequences are never preempted; the engine then runs steps (``cost.CostModel``): a
step admits waiting sequences, looks each one's prompt up in the prefix cache and
caches its blocks (so the second choice of ``n``, admitted in the same step, finds the
first's blocks: the prompt is prefilled once, plus the partial last block and the last
token per further choice, which vLLM recomputes too), charges the uncached prompt tokens
and one decode pass over every running sequence, sleeps that long (× ``time_scale``),
and gives each running sequence its next token. Prefill produces a sequence's first
token. A sequence leaves when it has its completion's tokens.

What it charged is counted in model seconds (``Charged``) and in vLLM's metric names
(``metrics.py``), so a benchmark can read what prefill sharing saved.

Deliberately left out (first order only): chunked prefill and the per-step token
budget (``max_num_batched_tokens``: a large admission is one long step here, the same
total), preemption, and the KV memory of running sequences.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from qfarm.ops.sim.cost import CostModel
from qfarm.ops.sim.metrics import Metrics
from qfarm.ops.sim.prefix_cache import PrefixCache

OnToken = Callable[[Any, float, float], Awaitable[None]]


@dataclass
class Charged:
    """What the engine charged since it started, in model seconds and tokens."""

    busy_s: float = 0.0  # every step's time: the model time the server spent
    prefill_s: float = 0.0  # the uncached prompt tokens' share of it
    steps: int = 0
    prompt_tokens: int = 0  # queried: every sequence's prompt (vllm:prompt_tokens)
    prompt_tokens_computed: int = 0  # prefilled
    prompt_tokens_cached: int = 0  # served from the prefix cache
    generation_tokens: int = 0
    sequences: int = 0

    @property
    def decode_s(self) -> float:
        return self.busy_s - self.prefill_s

    def as_dict(self) -> dict[str, float]:
        return {
            "busy_s": round(self.busy_s, 6),
            "prefill_s": round(self.prefill_s, 6),
            "decode_s": round(self.decode_s, 6),
            "steps": self.steps,
            "prompt_tokens": self.prompt_tokens,
            "prompt_tokens_computed": self.prompt_tokens_computed,
            "prompt_tokens_cached": self.prompt_tokens_cached,
            "generation_tokens": self.generation_tokens,
            "sequences": self.sequences,
        }


@dataclass(eq=False)
class _Running:
    seq: Any  # protocol.Sequence: .completion.completion_tokens, .ttft_s, .e2e_s
    tokens: tuple[str, ...]
    t_arrival: float
    to_generate: int
    generated: int = 0
    t_start: float = 0.0
    first_token: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Engine:
    """One simulated GPU engine: a waiting queue, a running batch, a prefix cache."""

    def __init__(self, cost: CostModel, max_num_seqs: int, metrics: Metrics):
        self.cost = cost
        self.max_num_seqs = max_num_seqs
        self.metrics = metrics
        self.cache = PrefixCache(cost.prefix_cache_blocks, cost.block_size)
        self.charged = Charged()
        self._waiting: list[tuple[int, int, _Running]] = []  # a heap: (priority, arrival, seq)
        self._arrivals = itertools.count()
        self._running: list[_Running] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def run(self, seq: Any, tokens: tuple[str, ...], on_token: OnToken | None = None) -> None:
        """Queue one sequence and return when it has all its tokens (streaming from its
        first token on when ``on_token`` is given)."""
        loop = asyncio.get_running_loop()
        item = _Running(seq, tokens, loop.time(), max(seq.completion.completion_tokens, 1))
        priority = getattr(seq, "priority", 0)
        heapq.heappush(self._waiting, (priority, next(self._arrivals), item))
        self.metrics.waiting += 1
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._loop())
        self._wake.set()
        try:
            if on_token is not None:
                await item.first_token.wait()
                # Stream the rest paced at the current step time: first order, like the rest.
                step = self.cost.step_seconds(0, len(self._running)) * self.cost.time_scale
                await on_token(seq, 0.0, step)
            await item.done.wait()
        except asyncio.CancelledError:
            self._drop(item)
            raise
        self._record(item, loop.time())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _drop(self, item: _Running) -> None:
        """A client that went away: its sequence leaves the engine, as vLLM aborts it."""
        waiting = [entry for entry in self._waiting if entry[2] is not item]
        if len(waiting) < len(self._waiting):
            self._waiting = waiting
            heapq.heapify(self._waiting)
            self.metrics.waiting -= 1
        elif item in self._running:
            self._running.remove(item)
            self.metrics.running -= 1

    def _admit(self, now: float) -> int:
        """Move waiting sequences into free places; return their uncached prompt tokens."""
        prefill = 0
        while self._waiting and len(self._running) < self.max_num_seqs:
            item = heapq.heappop(self._waiting)[2]
            self.metrics.waiting -= 1
            self.metrics.running += 1
            item.t_start = now
            self.metrics.queue.observe(now - item.t_arrival)
            found = self.cache.admit(item.tokens)
            prefill += found.computed
            c = self.charged
            c.sequences += 1
            c.prompt_tokens += found.queried
            c.prompt_tokens_computed += found.computed
            c.prompt_tokens_cached += found.hit
            self.metrics.prompt_tokens += found.queried  # per sequence, as vLLM counts
            self._running.append(item)
        return prefill

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._waiting and not self._running:
                self._wake.clear()
                await self._wake.wait()
                continue
            prefill = self._admit(loop.time())
            step_s = self.cost.step_seconds(prefill, len(self._running))
            await asyncio.sleep(step_s * self.cost.time_scale)
            c = self.charged
            c.steps += 1
            c.busy_s += step_s
            c.prefill_s += self.cost.prefill_seconds(prefill)
            finished = []
            for item in self._running:
                item.generated += 1
                if item.generated == 1:
                    item.seq.ttft_s = loop.time() - item.t_start
                    item.first_token.set()
                if item.generated >= item.to_generate:
                    finished.append(item)
            for item in finished:
                self._running.remove(item)
                self.metrics.running -= 1
                item.done.set()

    def _record(self, item: _Running, now: float) -> None:
        m, seq = self.metrics, item.seq
        seq.e2e_s = now - item.t_arrival
        m.ttft.observe(seq.ttft_s + (item.t_start - item.t_arrival))
        m.e2e.observe(seq.e2e_s)
        n_tokens = seq.completion.completion_tokens
        m.generation_tokens += n_tokens
        self.charged.generation_tokens += n_tokens
        reason = seq.completion.finish_reason
        m.success[reason] = m.success.get(reason, 0) + 1


__all__ = ["Charged", "Engine"]
