"""The simulator's HTTP server (aiohttp): the subset of vLLM's API the farm uses.

Routes: ``GET /health``, ``GET /v1/models``, ``POST /v1/completions`` (prompt
string or list, ``n``, ``max_tokens`` (default 16, as vLLM), ``temperature``,
``seed``, ``stop``, ``stream``, ``response_format``/``structured_outputs``,
the grammar, regex or schema honoured as ``constraints.py`` says),
``POST /v1/chat/completions`` (one conversation, rendered as ChatML),
``GET /metrics``; and the simulator's own control routes ``GET|POST
/sim/faults``, ``GET /sim/stats``, ``GET /sim/config``, ``POST /sim/reset``.

Each prompt × choice is one *sequence*: it waits for one of ``max_num_seqs``
slots (in arrival order, or by the request's ``priority`` first under
``--scheduling-policy priority``; the wait is ``vllm:num_requests_waiting``), holds it for TTFT +
(tokens − 1) × per-token time, and frees it. Choices come back with
``index = prompt_i * n + j`` and ``usage`` summed over the request, as vLLM
does; ``--shuffle-choices`` returns them out of order to test clients that
map by position. One event loop holds hundreds of connections.

Under ``--latency cost`` the slots give way to the cost engine (``engine.py``): steps
that charge prefill per uncached prompt token and batch decode across the running
sequences, with a prefix cache; ``/metrics`` and ``GET /sim/stats`` (``charged``) say
what it charged, and ``POST /sim/reset`` empties its prefix cache.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import logging
import math
import random
import time
from collections import deque
from typing import Any

from aiohttp import web

from qfarm.common.vocab import SIMULATOR_HEADER
from qfarm.ops.sim import SIMULATOR_OWNER, behaviour
from qfarm.ops.sim.config import SimConfig, describe
from qfarm.ops.sim.engine import Engine
from qfarm.ops.sim.faults import ARRIVAL_FAULTS, HUGE_ANSWER_BYTES, FaultInjector
from qfarm.ops.sim.metrics import Metrics
from qfarm.ops.sim.prefix_cache import tokenize
from qfarm.ops.sim.protocol import (
    QUEUE_FULL_MESSAGE,
    RequestError,
    Sequence,
    check_context,
    error_body,
    error_response,
    parse_params,
    parse_prompts,
    render_messages,
    response_body,
)

log = logging.getLogger("qfarm.sim")
STATE: web.AppKey[SimState] = web.AppKey("sim_state")
ENTRY: web.RequestKey[dict[str, Any]] = web.RequestKey("sim_entry", dict)  # the request log's line
LOG_SIZE = 50_000


class Slots:
    """``max_num_seqs`` slots; waiting sequences take them by (priority, arrival), as vLLM's
    priority request queue orders them (all priorities are 0 under fcfs: arrival order).
    Running sequences are never preempted (vLLM's priority scheduler preempts the
    lowest-priority one only when KV-cache blocks run out, which the simulator does not
    model)."""

    def __init__(self, count: int):
        self.free = count
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    async def acquire(self, priority: int = 0) -> None:
        if self.free > 0 and not self._waiting:
            self.free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (priority, next(self._arrivals), waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted as the client went away: pass the slot on
            raise  # a waiter cancelled in the heap is skipped by release

    def release(self) -> None:
        while self._waiting:
            _, _, waiter = heapq.heappop(self._waiting)
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1


class SimState:
    """Everything one simulator process keeps; touched only from its event loop."""

    def __init__(self, config: SimConfig):
        self.config = config
        self.metrics = Metrics()
        self.faults = FaultInjector(
            rates=dict(config.fault_rates),
            retry_after_s=config.retry_after_s,
            hang_s=config.hang_s,
            seed=config.seed,
        )
        self.rng = random.Random(config.seed)
        self.slots = Slots(config.max_num_seqs)
        self.log: deque[dict[str, Any]] = deque(maxlen=LOG_SIZE)
        self.ids = itertools.count(1)
        self.started = time.time()
        # --latency cost: one engine charges per token and batches decode (engine.py).
        self.engine = (
            Engine(config.cost, config.max_num_seqs, self.metrics) if config.cost else None
        )


# --------------------------------------------------------------------------- generation


async def hold_slot(state: SimState, seq: Sequence, on_token: Any = None) -> None:
    """Queue for a slot, then spend the modelled time generating (optionally streaming)."""
    m = state.metrics
    loop = asyncio.get_running_loop()
    t_arrival = loop.time()
    m.waiting += 1
    try:
        await state.slots.acquire(seq.priority)
    finally:
        m.waiting -= 1
    m.running += 1
    try:
        t_start = loop.time()
        m.queue.observe(t_start - t_arrival)
        ttft, tpot = state.config.latency.sample(state.rng)
        n_tokens = seq.completion.completion_tokens
        if on_token is None:
            if ttft or tpot:
                await asyncio.sleep(ttft + max(n_tokens - 1, 0) * tpot)
            seq.ttft_s = ttft
        else:
            await on_token(seq, ttft, tpot)
        seq.e2e_s = loop.time() - t_arrival
    finally:
        m.running -= 1
        state.slots.release()
    m.ttft.observe(seq.ttft_s + (t_start - t_arrival))
    m.e2e.observe(seq.e2e_s)
    m.generation_tokens += n_tokens
    reason = seq.completion.finish_reason
    m.success[reason] = m.success.get(reason, 0) + 1


async def run_sequences(
    state: SimState, seqs: list[Sequence], prompts: list[str], n: int, on_token: Any = None
) -> None:
    """Generate every sequence of a request: the cost engine's steps, or a slot each."""
    if state.engine is None:
        await asyncio.gather(*(hold_slot(state, s, on_token) for s in seqs))
        return
    tokens = [tokenize(p) for p in prompts]
    await asyncio.gather(*(state.engine.run(s, tokens[s.index // n], on_token) for s in seqs))


def build_sequences(
    prompts: list[str], budgets: list[int], params: dict[str, Any], state: SimState
) -> list[Sequence]:
    seqs = []
    n = params["n"]
    for i, prompt in enumerate(prompts):
        for j in range(n):
            # vLLM's parallel sampling runs choice j as a request seeded seed + j
            # (vllm/v1/engine/parallel_sampling.py): choice j equals a lone request's answer
            # with that seed, which the farm's shared samples rely on.
            comp = behaviour.complete(
                prompt,
                seed=params["seed"] + j,
                choice_index=0,
                temperature=params["temperature"],
                max_tokens=budgets[i],
                stop=params["stop"],
                rates=state.config.rates,
                constraint=params["constraint"],
            )
            seqs.append(Sequence(i * n + j, comp, params["priority"]))
    return seqs


# --------------------------------------------------------------------------- faults


async def arrival_fault(kind: str, request: web.Request, state: SimState) -> web.StreamResponse:
    if kind == "queue_full":  # vLLM's QueueOverflowError, exactly as its error handler renders it
        return error_response(503, QUEUE_FULL_MESSAGE, "Service Unavailable")
    if kind == "429":
        retry = max(1, math.ceil(state.faults.retry_after_s))  # delay-seconds is an integer
        resp = error_response(429, "Too many requests (simulated rate limit)", "RateLimitError")
        resp.headers["Retry-After"] = str(retry)
        return resp
    if kind == "503":
        return error_response(503, "Service unavailable (simulated)", "ServiceUnavailableError")
    if kind == "timeout":
        await asyncio.sleep(state.faults.hang_s)
        return error_response(504, "Gateway timeout (simulated hang)", "TimeoutError")
    # drop: close the connection with no response at all.
    if request.transport is not None:
        request.transport.abort()
    raise asyncio.CancelledError


def post_fault(kind: str, req_id: str) -> web.Response:
    if kind == "stream_error":  # without streaming vLLM answers a failed generation with a 500
        return error_response(500, "Internal server error", "InternalServerError")
    if kind == "malformed":
        text = f'{{"id": "{req_id}", "object": "text_completion", "choices": [{{"index": 0, "text": "trunc'
        return web.Response(text=text, content_type="application/json")
    if kind == "huge":
        return web.json_response(
            {"id": req_id, "object": "text_completion", "created": int(time.time()),
             "choices": [{"index": 0, "text": "x" * HUGE_ANSWER_BYTES, "finish_reason": "stop"}]}
        )  # fmt: skip
    return web.json_response(
        {"id": req_id, "object": "text_completion", "created": int(time.time()), "choices": [],
         "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
    )  # fmt: skip


# --------------------------------------------------------------------------- handlers


async def generate(request: web.Request, chat: bool) -> web.StreamResponse:
    state = request.app[STATE]
    entry = request[ENTRY]
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RequestError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    params = parse_params(body, state.config, state.rng, chat)
    prompts = [render_messages(body)] if chat else parse_prompts(body)
    entry["n_prompts"] = len(prompts)
    entry["seed"] = body.get("seed")
    param = "max_completion_tokens" if chat and body.get("max_completion_tokens") else "max_tokens"
    fitted = check_context(prompts, params["max_tokens"], state.config.max_model_len, param)
    prompt_counts = [count for count, _ in fitted]
    fault = state.faults.draw()
    if fault:
        entry["fault"] = fault
        state.metrics.count_fault(fault)
        if fault in ARRIVAL_FAULTS:
            return await arrival_fault(fault, request, state)
    if state.engine is None:  # the cost engine counts per sequence, as vLLM does
        state.metrics.prompt_tokens += sum(prompt_counts)
    seqs = build_sequences(prompts, [budget for _, budget in fitted], params, state)
    if fault == "abort":
        for seq in seqs:
            seq.completion = behaviour.aborted(seq.completion)
    req_id = f"{'chatcmpl' if chat else 'cmpl'}-sim-{entry['id']}"
    if params["stream"]:
        return await stream(request, state, seqs, params, req_id, sum(prompt_counts), chat, fault,
                            prompts=prompts)  # fmt: skip
    await run_sequences(state, seqs, prompts, params["n"])
    if fault and fault != "abort":
        return post_fault(fault, req_id)
    body = response_body(
        req_id,
        params["model"],
        seqs,
        sum(prompt_counts),
        chat,
        state.rng if state.config.shuffle_choices else None,
    )
    if state.config.omit_usage:
        del body["usage"]
    return web.json_response(body)


def _pieces(text: str, interval: int) -> list[str]:
    """Split text into streamed deltas: the first token, then ``interval`` tokens at a time."""
    ends = [m.end() for m in behaviour.TOKEN_RE.finditer(text)]
    if not ends:
        return [text] if text else []
    cuts = [ends[0], *ends[interval::interval]]
    cuts = [c for c in cuts if c < len(text)] + [len(text)]
    out, prev = [], 0
    for c in cuts:
        if c > prev:
            out.append(text[prev:c])
            prev = c
    return out


async def stream(
    request: web.Request,
    state: SimState,
    seqs: list[Sequence],
    params: dict[str, Any],
    req_id: str,
    prompt_tokens: int,
    chat: bool,
    fault: str | None,
    prompts: list[str] | None = None,
) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            SIMULATOR_HEADER: "1",
        }
    )
    await resp.prepare(request)
    lock = asyncio.Lock()
    obj = "chat.completion.chunk" if chat else "text_completion"
    interval = state.config.stream_interval

    async def send(payload: dict[str, Any] | str) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        async with lock:
            await resp.write(f"data: {data}\n\n".encode())

    def chunk(index: int, delta: str, finish: str | None, role: bool = False) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index, "finish_reason": finish, "logprobs": None}
        if chat:
            # vLLM opens each chat choice with a chunk carrying only the role.
            choice["delta"] = {"role": "assistant", "content": ""} if role else {"content": delta}
        else:
            choice["text"] = delta
        return {"id": req_id, "object": obj, "created": int(time.time()), "model": params["model"],
                "system_fingerprint": SIMULATOR_OWNER, "choices": [choice]}  # fmt: skip

    async def on_token(seq: Sequence, ttft: float, tpot: float) -> None:
        pieces = _pieces(seq.completion.text, interval) or [""]
        t0 = asyncio.get_running_loop().time()
        if ttft:
            await asyncio.sleep(ttft)
        seq.ttft_s = asyncio.get_running_loop().time() - t0
        if fault in ("malformed", "empty", "huge"):
            # A body cut mid-JSON, no event at all, or one event far past max_tokens.
            broken: dict[str, list[str | dict[str, Any]]] = {
                "malformed": ['{"id": "' + req_id + '", "choices": [{"text": "tru'],
                "empty": [], "huge": [chunk(seq.index, "x" * HUGE_ANSWER_BYTES, "stop")]}
            for event in broken[fault]:
                await send(event)
            return
        if chat:
            await send(chunk(seq.index, "", None, role=True))
        if fault == "stream_error":
            await send(chunk(seq.index, pieces[0], None))
            await send(error_body(500, "Internal server error", "InternalServerError"))
            return
        for k, piece in enumerate(pieces):
            if k and tpot:
                await asyncio.sleep(tpot * len(behaviour.TOKEN_RE.findall(piece)))
            last = k == len(pieces) - 1
            await send(chunk(seq.index, piece, seq.completion.finish_reason if last else None))

    await run_sequences(state, seqs, prompts or [], params["n"], on_token)
    if params["include_usage"] and fault in (None, "abort") and not state.config.omit_usage:
        completion_tokens = sum(s.completion.completion_tokens for s in seqs)
        await send({"id": req_id, "object": obj, "created": int(time.time()),
                    "model": params["model"], "choices": [],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                              "total_tokens": prompt_tokens + completion_tokens}})  # fmt: skip
    await send("[DONE]")
    await resp.write_eof()
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    return await generate(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await generate(request, chat=True)


async def health(request: web.Request) -> web.Response:
    if request.app[STATE].faults.down:
        return web.Response(status=503)
    return web.Response(status=200)


async def models(request: web.Request) -> web.Response:
    cfg = request.app[STATE].config
    data = [
        {"id": name, "object": "model", "created": int(request.app[STATE].started),
         "owned_by": SIMULATOR_OWNER, "root": cfg.model, "parent": None,
         "max_model_len": cfg.max_model_len}
        for name in sorted(cfg.accepted_models())
    ]  # fmt: skip
    return web.json_response({"object": "list", "data": data})


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    text = state.metrics.render(
        state.config.model,
        state.config.max_num_seqs,
        vllm_series=not state.config.disable_log_stats,
        charged=state.engine.charged.as_dict() if state.engine else None,
    )
    return web.Response(text=text, content_type="text/plain", charset="utf-8")


async def faults(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if request.method == "POST":
        try:
            payload = await request.json()
            state.faults.update(payload if isinstance(payload, dict) else {})
        except (ValueError, TypeError) as exc:
            raise RequestError(400, f"/sim/faults: {exc}") from None
    return web.json_response(state.faults.snapshot())


async def stats(request: web.Request) -> web.Response:
    state = request.app[STATE]
    since = int(request.query.get("since", "0"))
    log = [e for e in state.log if e["id"] > since and e["path"].startswith("/v1/")]
    m = state.metrics
    return web.json_response(
        {
            "simulated": True,
            "running": m.running,
            "waiting": m.waiting,
            "max_concurrent_requests": m.max_concurrent_requests,
            "http_requests": m.http_requests,
            "faults": m.faults,
            "generation_tokens": m.generation_tokens,
            "prompt_tokens": m.prompt_tokens,
            "requests": log,
            # --latency cost: model seconds and tokens charged (SIMULATED), else null.
            "charged": state.engine.charged.as_dict() if state.engine else None,
        }
    )


async def config_view(request: web.Request) -> web.Response:
    cfg = request.app[STATE].config
    return web.json_response(
        {
            "simulated": True,
            "model": cfg.model,
            "max_num_seqs": cfg.max_num_seqs,
            "scheduling_policy": cfg.scheduling_policy,
            "max_model_len": cfg.max_model_len,
            "ttft_ms": list(cfg.latency.ttft_ms),
            "tpot_ms": list(cfg.latency.tpot_ms),
            "profile": cfg.profile,
            "rates": cfg.rates.as_dict(),
            "shuffle_choices": cfg.shuffle_choices,
            "requires_api_key": cfg.api_key is not None,
            "cost": cfg.cost.as_dict() if cfg.cost else None,
        }
    )


async def reset(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.log.clear()
    if state.engine is not None:
        state.engine.cache.clear()
    state.faults.update({"rates": {}, "clear_next": True, "down": False})
    return web.json_response({"ok": True})


# --------------------------------------------------------------------------- app


@web.middleware
async def bookkeeping(request: web.Request, handler: Any) -> web.StreamResponse:
    """Request log, auth, the simulator header and vLLM-style errors on every route."""
    state = request.app[STATE]
    m = state.metrics
    entry: dict[str, Any] = {"id": next(state.ids), "path": request.path, "t_arrival": time.time(),
                             "status": None, "fault": None}  # fmt: skip
    request[ENTRY] = entry
    m.open_requests += 1
    m.max_concurrent_requests = max(m.max_concurrent_requests, m.open_requests)
    try:
        key = state.config.api_key
        if request.path.startswith("/v1/") and key is not None:
            entry["auth_ok"] = request.headers.get("Authorization") == f"Bearer {key}"
            if not entry["auth_ok"]:
                resp: web.StreamResponse = web.json_response({"error": "Unauthorized"}, status=401)
                return _finish(resp, entry, state)
        try:
            resp = await handler(request)
        except RequestError as exc:
            resp = error_response(exc.status, str(exc), exc.err_type, exc.param)
        return _finish(resp, entry, state)
    finally:
        m.open_requests -= 1
        if entry["status"] is None:  # dropped or cancelled
            entry["status"] = 0
            entry["t_done"] = time.time()
        state.log.append(entry)


def _finish(resp: web.StreamResponse, entry: dict[str, Any], state: SimState) -> web.StreamResponse:
    if not resp.prepared:
        resp.headers[SIMULATOR_HEADER] = "1"
    entry["status"] = resp.status
    entry["t_done"] = time.time()
    state.metrics.count_http(resp.status)
    if state.config.log_requests:
        log.info("[simulated] %s %s fault=%s", entry["path"], resp.status, entry["fault"])
    return resp


def create_app(config: SimConfig) -> web.Application:
    app = web.Application(middlewares=[bookkeeping], client_max_size=64 * 1024**2)
    app[STATE] = SimState(config)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/sim/faults", faults)
    app.router.add_get("/sim/stats", stats)
    app.router.add_get("/sim/config", config_view)
    app.router.add_post("/sim/reset", reset)
    app.on_cleanup.append(_close_engine)
    return app


async def _close_engine(app: web.Application) -> None:
    engine = app[STATE].engine
    if engine is not None:
        await engine.close()


async def serve(config: SimConfig, stop: asyncio.Event | None = None) -> None:
    """Run until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is None)."""
    import signal

    app = create_app(config)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port, backlog=4096, reuse_address=True)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://{config.host}:{port}"
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    log.info("qfarm vLLM SIMULATOR (answers are simulated, not from a model) at %s: %s",
             url, describe(config))
    if config.port_file:
        from pathlib import Path

        tmp = Path(config.port_file + ".tmp")
        tmp.write_text(str(port))
        tmp.replace(config.port_file)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        log.info("qfarm vLLM SIMULATOR stopped")


def run(config: SimConfig) -> None:
    asyncio.run(serve(config))
