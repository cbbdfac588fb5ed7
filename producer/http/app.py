"""The ASGI app of ``qfarm serve``: ``create_app(settings)``.

Every route is a thin adapter over the run API the CLI uses (``qfarm.producer.api``), beside
the producer's Redis store and run directories. Blocking work (Redis, planning and
enqueueing, reading rows files) runs in Starlette's thread pool: sync routes do
that by themselves, and ``POST /v1/ask`` waits for its row with ``asyncio.sleep``
between short Redis reads, so a waiting question holds no thread.

Sweeps submitted here are followed by a thread of this process (it drains rows into
``rows.jsonl`` and writes ``summary.md``), under the run's follower lease, so a second
follower (``qfarm sweep --attach``, a resume) is safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import (
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from fastapi_offline import FastAPIOffline
from redis.exceptions import RedisError

from qfarm.common.errors import QfarmError
from qfarm.common.settings import Settings
from qfarm.common.vocab import ErrorKind, RunStatus, error_text
from qfarm.producer.api import (
    AskContext,
    AskTicket,
    Endpoints,
    EndpointsFor,
    answer_for,
    ask,
    ask_context,
    cancel_run,
    configured_endpoints,
    describe_run,
    follow_run,
    list_runs,
    live_cost,
    poll_pauses,
    retry_errors,
    run_sweep,
    submit_ask,
    summary_data,
)
from qfarm.producer.http import auth
from qfarm.producer.http.errors import ApiError, install_errors, problem
from qfarm.producer.http.middleware import BodyLimit
from qfarm.producer.http.requests import NDJSON, modes_of, policy_of, question_text, sweep_spec
from qfarm.producer.http.runs import (
    check_run_id,
    compare_json,
    created_body,
    file_rows_response,
    redis_rows_response,
    row_filter,
    run_dir_of,
)
from qfarm.producer.http.schemas import AskRequest, ErrorBody, SweepRequest, answer_payload
from qfarm.producer.rundir import is_ask_run, read_manifest, read_status
from qfarm.producer.store import ProducerStore, connect

log = logging.getLogger("qfarm.api")

ROWS_PAGE_MAX = 1000
DOCS_STATIC = "/static-docs"  # Swagger UI's and ReDoc's files (open to all: public code)
THREADS = 100
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorBody} for s in (400, 401, 403, 404, 409, 413, 422, 503)
}


@dataclass
class Followers:
    """Threads following the runs submitted (or resumed) through this process."""

    settings: Settings
    threads: dict[str, threading.Thread] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, run_id: str, *, resend_missing: bool = False) -> None:
        # A sweep posted before its workers start is the server's to finish: its follower
        # logs which queues have no worker and waits for one, without a bound
        # (QFARM_WAIT_FOR_WORKERS_S bounds a follow someone watches from a terminal).
        settings = self.settings.model_copy(update={"wait_for_workers_s": 0.0})

        def follow() -> None:
            try:
                result = follow_run(run_id, resend_missing=resend_missing, settings=settings)
                log.info("run %s: %s (%d rows)", run_id, result.status, result.rows_written)
            except QfarmError as exc:
                self.errors[run_id] = str(exc)
                log.warning("run %s: following stopped: %s", run_id, exc)
            except Exception as exc:  # a thread's crash must leave a trace for GET /v1/runs/{id}
                self.errors[run_id] = error_text(ErrorKind.INTERNAL, type(exc).__name__)
                log.exception("run %s: following crashed", run_id)

        with self.lock:
            self.errors.pop(run_id, None)
            for done in [r for r, t in self.threads.items() if not t.is_alive()]:
                del self.threads[done]  # a long-lived server must not keep every run's thread
            thread = threading.Thread(target=follow, name=f"follow-{run_id}", daemon=True)
            self.threads[run_id] = thread
        thread.start()

    def adopt(self, store: ProducerStore) -> list[str]:
        """Follow again the runs under the results directory that a follower left running
        (this server restarted while following them) and that Redis still holds; the
        follower lease makes this safe when another process follows one of them already."""
        adopted = []
        results = self.settings.results_dir
        for run_dir in sorted(results.iterdir()) if results.is_dir() else []:
            if not (run_dir / "manifest.json").is_file():
                continue
            if read_status(run_dir).status not in (RunStatus.RUNNING, RunStatus.INTERRUPTED):
                continue
            try:
                if read_manifest(run_dir).eager:
                    continue  # an eager run lived and died with its process
            except QfarmError:
                continue
            if store.has_manifest(run_dir.name):
                self.start(run_dir.name)
                adopted.append(run_dir.name)
        return adopted

    def is_following(self, run_id: str) -> bool:
        thread = self.threads.get(run_id)
        return thread is not None and thread.is_alive()


class Farm:
    """What the routes share: settings, the Redis store, the ask context (built once)."""

    def __init__(self, settings: Settings, *, eager: bool, endpoints: EndpointsFor):
        self.settings = settings
        self.eager = eager
        self.endpoints = endpoints
        self.tokens = auth.Tokens.from_settings(settings)
        self._store: ProducerStore | None = None
        self._ctx: AskContext | None = None
        self._lock = threading.Lock()
        self.followers = Followers(settings)

    @property
    def store(self) -> ProducerStore:
        if self.eager:
            raise ApiError(409, "this server runs eagerly (no Redis): runs are read from disk only")
        with self._lock:
            if self._store is None:
                self._store = ProducerStore(connect(self.settings.redis_url))
            return self._store

    def store_or_none(self) -> ProducerStore | None:
        return None if self.eager else self.store

    def ask_context(self) -> AskContext:
        with self._lock:
            if self._ctx is None:
                self._ctx = ask_context(self.settings, self.endpoints)
            return self._ctx

    def endpoints_once(self) -> EndpointsFor:
        """The endpoints checked when the ask context was built, reused per sweep."""
        eps: Endpoints = self.ask_context().endpoints
        return lambda _settings: contextlib.nullcontext(eps)


# ---------------------------------------------------------------- the app

def create_app(settings: Settings, *, eager: bool = False,
               endpoints: EndpointsFor = configured_endpoints) -> FastAPI:
    """The ASGI app. ``eager`` runs questions and sweeps in this process (no Redis, no
    workers: tests and demos); otherwise they go through Redis to the workers."""
    from qfarm.producer.viewer.router import Viewer

    farm = Farm(settings, eager=eager, endpoints=endpoints)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> Any:
        import anyio.to_thread

        # Sync routes and Redis reads share this pool; Starlette's default of 40 threads
        # would queue requests behind a few slow sweeps' planning.
        anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS
        if not eager:
            try:
                adopted = await anyio.to_thread.run_sync(farm.followers.adopt, farm.store)
            except (RedisError, QfarmError) as exc:  # the server starts anyway (routes
                # that need Redis answer 503 until it is back); POST .../resume later
                log.warning("could not look for runs to follow again: Redis: %s", exc)
            else:
                if adopted:
                    log.info("following again %d run(s) left running: %s", len(adopted),
                             ", ".join(adopted))
        yield

    # /docs and /redoc load Swagger UI and ReDoc from files this package ships, not from a
    # CDN: the farm's hosts often have no internet, and the page was blank there.
    app = FastAPIOffline(
        static_url=DOCS_STATIC,
        lifespan=lifespan,
        title="qfarm", version="1",
        description="The farm's HTTP front door: questions, sweeps, runs, metrics (docs/api.md).",
    )
    app.state.farm = farm
    collector = None if eager else _register_collector(farm)

    install_errors(app)
    app.add_middleware(BodyLimit, limit=settings.api_max_body_bytes, collector=collector,
                       tokens=farm.tokens)

    def need(scope: str) -> Callable[[Request], str | None]:
        def check(request: Request) -> str | None:
            if not farm.tokens.required:
                return auth.ADMIN
            presented = auth.bearer(request.headers.get("authorization"))
            granted = farm.tokens.scope_of(presented)
            if granted is None:
                raise ApiError(401, "a valid bearer token is required (Authorization: Bearer "
                                    "TOKEN; tokens come from QFARM_API_TOKENS)")
            if not auth.allows(granted, scope):
                raise ApiError(403, f"this token has scope {granted!r}; this needs {scope!r}")
            return granted
        return check

    asker, admin = Depends(need(auth.ASK)), Depends(need(auth.ADMIN))
    _ops_routes(app, farm, asker, collector)
    _ask_routes(app, farm, asker)
    _sweep_routes(app, farm, asker, admin)
    _run_routes(app, farm, asker, admin)
    _retry_route(app, farm, admin)
    # The viewer lists runs in the farm's Redis too (a Redis-only run, one in progress);
    # an eager server has no Redis to show.
    _viewer_route(app, farm, Viewer(settings.results_dir,
                                    redis_url=None if eager else settings.redis_url,
                                    index_path=settings.embedded_index_path()))
    return app


def _ops_routes(app: FastAPI, farm: Farm, asker: Any, collector: Any) -> None:
    eager = farm.eager

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict[str, Any]:
        """Open to all: is the process up, and does Redis answer."""
        if eager:
            return {"ok": True, "redis": None, "eager": True}
        try:
            farm.store.client.ping()
            return {"ok": True, "redis": True}
        except Exception:
            return {"ok": False, "redis": False}

    @app.get("/metrics", tags=["ops"], dependencies=[asker], response_class=PlainTextResponse)
    def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        if collector is None:
            raise ApiError(409, "an eager server has no farm metrics")
        return Response(generate_latest(collector.registry), media_type=CONTENT_TYPE_LATEST)


def _ask_routes(app: FastAPI, farm: Farm, asker: Any) -> None:
    settings, eager, endpoints = farm.settings, farm.eager, farm.endpoints

    @app.post("/v1/ask", tags=["ask"], dependencies=[asker], responses=ERRORS)
    async def post_ask(body: AskRequest) -> JSONResponse:
        """Answer one question through the interactive queue: 200 with the answer within
        ``wait_s``, else 202 with the job's URL."""
        text = question_text(body.question, settings.max_question_chars, "question")
        (mode,) = modes_of([body.mode], "mode")
        policy = policy_of(body.policy)
        if body.wait_s > settings.api_max_wait_s:
            raise ApiError(422, f"wait_s: {body.wait_s:g}; at most {settings.api_max_wait_s:g} "
                                "(QFARM_API_MAX_WAIT_S)", "wait_s")
        if eager:
            answer = await run_in_threadpool(
                ask, text, mode, eager=True, policy=policy, use_cache=not body.burn,
                settings=settings, endpoints=endpoints)
            return JSONResponse(answer_payload(answer))
        ctx = await run_in_threadpool(farm.ask_context)
        ticket = await run_in_threadpool(submit_ask, ctx, text, mode, policy,
                                         use_cache=not body.burn)
        answer = await _wait_answer(ctx.store, ticket, body.wait_s)
        if answer is not None:
            return JSONResponse(answer_payload(answer))
        url = f"/v1/jobs/{ticket.run_id}"
        return JSONResponse({"state": "pending", "job_id": ticket.run_id, "url": url},
                            status_code=202, headers={"Location": url})

    @app.get("/v1/jobs/{job_id}", tags=["ask"], dependencies=[asker], responses=ERRORS)
    def get_job(job_id: str) -> JSONResponse:
        """A question submitted with POST /v1/ask: 202 while pending, 200 with the answer."""
        store = farm.store
        if not is_ask_run(job_id) or store.manifest(job_id) is None:
            raise ApiError(404, f"job {job_id}: not found (job ids come from POST /v1/ask)")
        _, first = store.log_head(job_id)  # an ask run has one job: its row, once written
        if first is None:
            return JSONResponse({"state": "pending", "job_id": job_id}, status_code=202)
        answer = answer_for(store, AskTicket(job_id, first.decode()))
        assert answer is not None
        return JSONResponse(answer_payload(answer))


def _sweep_routes(app: FastAPI, farm: Farm, asker: Any, admin: Any) -> None:
    settings, eager, endpoints = farm.settings, farm.eager, farm.endpoints

    @app.post("/v1/sweeps", tags=["sweeps"], dependencies=[admin], status_code=201,
              responses=ERRORS, openapi_extra={"requestBody": {"content": {
                  "application/json": {"schema": SweepRequest.model_json_schema()},
                  NDJSON: {"schema": {"type": "string", "description":
                           "a JSONL question file; options in the query string"}}}}})
    async def post_sweep(request: Request) -> JSONResponse:
        """Plan and enqueue a sweep (the same producer code as `qfarm sweep`); 201 with
        its run id. JSON body (SweepRequest), or a JSONL question file with
        ``Content-Type: application/x-ndjson`` and ``?modes=&n=&policy=&keep_answers=``."""
        spec = await sweep_spec(request, settings)
        if eager:
            result = await run_in_threadpool(run_sweep, spec, eager=True, settings=settings,
                                             endpoints=endpoints)
            return JSONResponse(created_body(result.run_id, result.status, result.manifest.n_jobs),
                                status_code=201)
        eps = await run_in_threadpool(farm.endpoints_once)
        result = await run_in_threadpool(run_sweep, spec, detach=True, settings=settings,
                                         endpoints=eps)
        if result.status != RunStatus.RUNNING:
            raise ApiError(503, f"run {result.run_id}: {result.status}; resume it with "
                                f"POST /v1/runs/{result.run_id}/resume")
        farm.followers.start(result.run_id)
        body = created_body(result.run_id, RunStatus.RUNNING, result.manifest.n_jobs)
        body["enqueued"] = result.enqueued
        return JSONResponse(body, status_code=201, headers={"Location": body["url"]})


def _run_routes(app: FastAPI, farm: Farm, asker: Any, admin: Any) -> None:
    settings = farm.settings

    @app.get("/v1/runs", tags=["runs"], dependencies=[asker], responses=ERRORS)
    def get_runs(limit: int = Query(20, ge=1, le=200),
                 cursor: int = Query(0, ge=0, description="next_cursor of the previous page"),
                 kind: str = Query("sweep", pattern="^(sweep|ask|all)$",
                                   description="sweeps, single questions (ask), or all")
                 ) -> dict[str, Any]:
        """Runs newest first, a page at a time: sweeps, unless ``kind`` says otherwise."""
        items, nxt = list_runs(settings, farm.store_or_none(), offset=cursor, limit=limit,
                               kind=kind)
        return {"runs": items, "next_cursor": nxt}

    @app.get("/v1/runs/{run_id}", tags=["runs"], dependencies=[asker], responses=ERRORS)
    def get_run(run_id: str) -> dict[str, Any]:
        """Manifest, state, progress per stage, ETA and what the run has cost so far
        (tokens, model time, GPU-hours, price: docs/reports.md) from Redis or the run's files."""
        check_run_id(run_id)
        info = describe_run(run_id, settings, farm.store_or_none())
        info["cost"] = live_cost(run_id, settings, farm.store_or_none())
        info["following"] = farm.followers.is_following(run_id)
        info["follower_error"] = farm.followers.errors.get(run_id)
        return info

    @app.get("/v1/runs/{run_id}/rows", tags=["runs"], dependencies=[asker], responses=ERRORS)
    def get_rows(run_id: str, mode: str | None = None, verdict: str | None = None,
                 kind: str | None = None, cursor: str = Query("0", pattern=r"^r?\d{1,15}$"),
                 limit: int = Query(100, ge=1, le=ROWS_PAGE_MAX),
                 stream: bool = Query(False, description="every matching row from cursor as NDJSON")
                 ) -> Response:
        """Rows in landing order, filtered. For a run with a directory here they are read
        from ``rows.jsonl`` and ``cursor`` is a byte offset; for a run only in Redis (one
        another host follows) they are read from Redis and the cursor is ``r`` + a row
        log position. Either way pass the previous page's ``next_cursor`` as it is: a page
        never rescans what earlier pages read."""
        match = row_filter(mode, verdict, kind)
        check_run_id(run_id)
        if (not (settings.results_dir / run_id / "manifest.json").exists() and not farm.eager
                and farm.store.has_manifest(run_id)):
            return redis_rows_response(farm.store, run_id, int(cursor.removeprefix("r")),
                                       match, limit, stream=stream)
        return file_rows_response(run_dir_of(settings, run_id), cursor, match, limit,
                                  stream=stream,
                                  following=farm.followers.is_following(run_id))

    @app.get("/v1/runs/{run_id}/summary", tags=["runs"], dependencies=[asker], responses=ERRORS)
    def get_summary(run_id: str, format: str = Query("json", pattern="^(json|md)$")) -> Response:
        """The run's summary: ``format=md`` is summary.md, ``json`` its figures."""
        run_dir = run_dir_of(settings, run_id)
        if format == "md":
            path = run_dir / "summary.md"
            if not path.exists():
                raise ApiError(404, f"run {run_id}: no summary.md yet (written when the run ends)")
            return PlainTextResponse(path.read_text(encoding="utf-8"),
                                     media_type="text/markdown; charset=utf-8")
        return JSONResponse(summary_data(run_dir))

    @app.post("/v1/runs/{run_id}/cancel", tags=["runs"], dependencies=[admin], responses=ERRORS)
    def cancel(run_id: str) -> dict[str, Any]:
        """Set the cancel flag and purge the run's queued messages (`qfarm cancel`)."""
        check_run_id(run_id)
        done = cancel_run(farm.store, run_id, settings.results_dir)
        return {"run_id": run_id, "state": RunStatus.CANCELLED, "purged_messages": done.purged,
                "purged_messages_total": done.purged_total, "cancels": done.cancels,
                "cancelled_jobs": done.cancelled_jobs, "done": done.done, "total": done.total}

    @app.post("/v1/runs/{run_id}/resume", tags=["runs"], dependencies=[admin], status_code=202,
              responses=ERRORS)
    def resume(run_id: str) -> JSONResponse:
        """Re-send the jobs without a row and follow the run (`qfarm sweep --resume`)."""
        run_dir = run_dir_of(settings, run_id)
        manifest = read_manifest(run_dir)
        if manifest.eager:
            raise ApiError(409, f"run {run_id} was an eager run; eager runs cannot be resumed")
        farm.store.client.ping()
        farm.followers.start(run_id, resend_missing=True)
        url = f"/v1/runs/{run_id}"
        return JSONResponse({"run_id": run_id, "state": "resuming", "url": url},
                            status_code=202, headers={"Location": url})

    @app.get("/v1/compare", tags=["runs"], dependencies=[asker], responses=ERRORS)
    def compare(a: str, b: str, floor: float = 5.0) -> dict[str, Any]:
        """A/B comparison of two finished runs (`qfarm compare`): per mode and metric A, B,
        delta with its 95% interval and signal or noise; also as markdown."""
        return compare_json(settings, a, b, floor)


def _retry_route(app: FastAPI, farm: Farm, admin: Any) -> None:
    settings = farm.settings

    @app.post("/v1/runs/{run_id}/retry-errors", tags=["runs"], dependencies=[admin],
              responses=ERRORS)
    async def retry(run_id: str) -> dict[str, Any]:
        """Run again, in the same run, the jobs whose row is an error (`qfarm sweep
        --retry-errors`), under the run's policy, model and index; answers when the retry has
        ended, with the run's state and how many rows were replaced."""
        run_dir = run_dir_of(settings, run_id)
        if farm.followers.is_following(run_id):
            raise ApiError(409, f"run {run_id} is still being followed; retry its errors once "
                                "it has ended")
        result = await run_in_threadpool(retry_errors, run_id, eager=farm.eager,
                                         settings=settings, endpoints=farm.endpoints)
        retries = read_status(run_dir).retries
        return {"run_id": run_id, "state": result.status, "rows": result.rows_written,
                "retry": retries[-1].model_dump(mode="json") if retries else {}}


def _viewer_route(app: FastAPI, farm: Farm, viewer: Any) -> None:
    from qfarm.producer.viewer.login import gate, wants_html

    # The viewer's pages, last: /v1, /metrics and /healthz above take precedence.
    @app.get("/{path:path}", include_in_schema=False)
    def view(path: str, request: Request) -> Response:
        pairs = list(request.query_params.multi_items())
        h = request.headers
        refused = gate(farm.tokens, request.url.path, pairs, cookie=h.get("cookie"),
                       authorization=h.get("authorization"), accept=h.get("accept"),
                       secure=request.url.scheme == "https")  # fmt: skip
        if refused is not None and refused.status == 401 and not wants_html(h.get("accept")):
            return problem(401, refused.body.decode().strip())  # a script: the API's error shape
        resp = refused or viewer.handle("/" + path, {k: v for k, v in pairs if k != "token"})
        headers = {"Cache-Control": "no-store", **resp.headers}
        if resp.stream is not None:  # an export of the rows table, read as it is sent
            return StreamingResponse(iter(resp.stream), status_code=resp.status,
                                     media_type=resp.content_type, headers=headers)
        return Response(resp.body, status_code=resp.status, media_type=resp.content_type,
                        headers=headers)


async def _wait_answer(store: ProducerStore, ticket: AskTicket, wait_s: float) -> Any:
    """Poll for the row until ``wait_s``; each poll is one short Redis read in the thread
    pool and the waits between them hold no thread."""
    deadline = time.monotonic() + wait_s
    for pause in poll_pauses():  # the schedule of qfarm.producer.api.wait_for_answer
        answer = await run_in_threadpool(answer_for, store, ticket)
        if answer is not None or time.monotonic() >= deadline:
            return answer
        await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
    return None



def _register_collector(farm: Farm) -> Any:
    from prometheus_client import CollectorRegistry

    from qfarm.producer.http.metrics import FarmCollector

    class LazyStore:
        """Redis is connected at the first scrape, not when the app is built."""

        def __getattr__(self, name: str) -> Any:
            return getattr(farm.store, name)

    collector = FarmCollector(LazyStore())  # type: ignore[arg-type]
    collector.registry = CollectorRegistry(auto_describe=False)  # type: ignore[attr-defined]
    collector.registry.register(collector)  # type: ignore[attr-defined]
    return collector


__all__ = ["create_app"]
