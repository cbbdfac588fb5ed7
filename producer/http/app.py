"""The ASGI app of ``qfarm serve``: ``create_app(settings)``.

Every route is a thin adapter over the run API the CLI uses (``producer.api``,
``producer.control``, ``producer.reports``). Blocking work (Redis, planning and
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
import hashlib
import http.cookies
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import (
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from common.errors import ConfigError, InputError, ManifestError, PolicyError, QfarmError
from common.jobs import parse_modes
from common.models import Question
from common.policy import policy_from_mapping
from common.questions import parse_questions
from common.settings import Settings
from common.vocab import Verdict
from producer import control
from producer.api import (
    AskContext,
    AskTicket,
    Endpoints,
    EndpointsFor,
    QuestionSet,
    SweepSpec,
    answer_for,
    ask,
    ask_context,
    configured_endpoints,
    follow_run,
    poll_pauses,
    run_sweep,
    submit_ask,
)
from producer.http import auth
from producer.http.schemas import MAX_N, AskRequest, ErrorBody, SweepRequest, answer_payload
from producer.reports import iter_rows
from producer.runs import read_manifest
from producer.store import ProducerStore, connect, redact_url

log = logging.getLogger("qfarm.api")

NDJSON = "application/x-ndjson"
ROWS_PAGE_MAX = 1000
THREADS = 100
DOC_PATHS = ("/openapi.json", "/docs", "/redoc", "/docs/oauth2-redirect")
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorBody} for s in (400, 401, 403, 404, 409, 413, 422, 503)
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


def _problem(status: int, message: str, field: str | None = None,
             headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "field": field, "message": message}},
                        status_code=status, headers=headers)


@dataclass
class Followers:
    """Threads following the runs submitted (or resumed) through this process."""

    settings: Settings
    threads: dict[str, threading.Thread] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, run_id: str, *, resend_missing: bool = False) -> None:
        def follow() -> None:
            try:
                result = follow_run(run_id, resend_missing=resend_missing, settings=self.settings)
                log.info("run %s: %s (%d rows)", run_id, result.status, result.rows_written)
            except QfarmError as exc:
                self.errors[run_id] = str(exc)
                log.warning("run %s: following stopped: %s", run_id, exc)
            except Exception as exc:  # a thread's crash must leave a trace for GET /v1/runs/{id}
                self.errors[run_id] = f"internal: {type(exc).__name__}"
                log.exception("run %s: following crashed", run_id)

        with self.lock:
            self.errors.pop(run_id, None)
            thread = threading.Thread(target=follow, name=f"follow-{run_id}", daemon=True)
            self.threads[run_id] = thread
        thread.start()

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


# ---------------------------------------------------------------- validation

def _question_text(text: str, limit: int, where: str) -> str:
    text = text.strip()
    if not text:
        raise ApiError(422, f"{where}: the question is empty", where)
    if len(text) > limit:
        raise ApiError(422, f"{where}: {len(text)} characters; at most {limit} "
                            "(QFARM_API_MAX_QUESTION_CHARS)", where)
    return text


def _modes(values: list[str], where: str) -> list[Any]:
    try:
        return parse_modes(values)
    except InputError as exc:
        raise ApiError(422, f"{where}: {exc}", where) from None


def _policy(data: dict[str, Any]) -> Any:
    try:
        return policy_from_mapping(data)
    except PolicyError as exc:
        where = str(exc).split(":", 1)[0]
        raise ApiError(422, str(exc), where) from None


def _check_plan(settings: Settings, n_questions: int, n_modes: int, n: int) -> None:
    jobs = n_questions * n_modes * n
    if jobs > settings.api_max_jobs:
        raise ApiError(
            422,
            f"{n_questions} questions x {n_modes} modes x n={n} is {jobs} jobs; at most "
            f"{settings.api_max_jobs} per sweep through the API (QFARM_API_MAX_JOBS); split "
            "the sweep or use `qfarm sweep` on a farm host",
            "n",
        )


def _upload_questions(settings: Settings, questions: list[Question]) -> Path:
    """Write the sweep's questions where a resume can read them again (the run's
    ``question_file``); content-addressed, so the same set is one file."""
    body = "".join(json.dumps({"id": q.id, "question": q.text}, ensure_ascii=False) + "\n"
                   for q in questions).encode()
    folder = settings.data_dir / "uploads"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(body).hexdigest()[:24]}.jsonl"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(body)
        tmp.replace(path)
    return path


# ---------------------------------------------------------------- the app

def create_app(settings: Settings, *, eager: bool = False,
               endpoints: EndpointsFor = configured_endpoints) -> FastAPI:
    """The ASGI app. ``eager`` runs questions and sweeps in this process (no Redis, no
    workers: tests and demos); otherwise they go through Redis to the workers."""
    from producer.viewer.pages import Viewer

    farm = Farm(settings, eager=eager, endpoints=endpoints)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> Any:
        import anyio.to_thread

        # Sync routes and Redis reads share this pool; Starlette's default of 40 threads
        # would queue requests behind a few slow sweeps' planning.
        anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS
        yield

    app = FastAPI(
        lifespan=lifespan,
        title="qfarm", version="1",
        description="The farm's HTTP front door: questions, sweeps, runs, metrics (docs/api.md).",
    )
    app.state.farm = farm
    collector = None if eager else _register_collector(farm)

    _install_errors(app)
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
    _viewer_route(app, farm, Viewer(settings.results_dir))
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
        text = _question_text(body.question, settings.api_max_question_chars, "question")
        (mode,) = _modes([body.mode], "mode")
        policy = _policy(body.policy)
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
        if not job_id.startswith("ask-") or store.manifest(job_id) is None:
            raise ApiError(404, f"job {job_id}: not found (job ids come from POST /v1/ask)")
        ids: list[bytes] = store.client.hkeys(_rows_key(job_id))  # type: ignore[assignment]
        if not ids:
            return JSONResponse({"state": "pending", "job_id": job_id}, status_code=202)
        answer = answer_for(store, AskTicket(job_id, ids[0].decode()))
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
        spec = await _sweep_spec(request, settings)
        if eager:
            result = await run_in_threadpool(run_sweep, spec, eager=True, settings=settings,
                                             endpoints=endpoints)
            return JSONResponse(_created(result.run_id, result.status, result.manifest.n_jobs),
                                status_code=201)
        eps = await run_in_threadpool(farm.endpoints_once)
        result = await run_in_threadpool(run_sweep, spec, detach=True, settings=settings,
                                         endpoints=eps)
        if result.status != "running":
            raise ApiError(503, f"run {result.run_id}: {result.status}; resume it with "
                                f"POST /v1/runs/{result.run_id}/resume")
        farm.followers.start(result.run_id)
        body = _created(result.run_id, "running", result.manifest.n_jobs)
        body["enqueued"] = result.enqueued
        return JSONResponse(body, status_code=201, headers={"Location": body["url"]})


def _run_routes(app: FastAPI, farm: Farm, asker: Any, admin: Any) -> None:
    settings = farm.settings

    @app.get("/v1/runs", tags=["runs"], dependencies=[asker], responses=ERRORS)
    def get_runs(limit: int = Query(20, ge=1, le=200),
                 cursor: int = Query(0, ge=0, description="next_cursor of the previous page")
                 ) -> dict[str, Any]:
        """Runs newest first, a page at a time."""
        items, nxt = control.list_runs(settings, farm.store_or_none(), offset=cursor, limit=limit)
        return {"runs": items, "next_cursor": nxt}

    @app.get("/v1/runs/{run_id}", tags=["runs"], dependencies=[asker], responses=ERRORS)
    def get_run(run_id: str) -> dict[str, Any]:
        """Manifest, state, progress per stage and ETA (from Redis, or the run's files)."""
        _check_run_id(run_id)
        info = control.describe_run(run_id, settings, farm.store_or_none())
        info["following"] = farm.followers.is_following(run_id)
        info["follower_error"] = farm.followers.errors.get(run_id)
        return info

    @app.get("/v1/runs/{run_id}/rows", tags=["runs"], dependencies=[asker], responses=ERRORS)
    def get_rows(run_id: str, mode: str | None = None, verdict: str | None = None,
                 kind: str | None = None, cursor: int = Query(0, ge=0),
                 limit: int = Query(100, ge=1, le=ROWS_PAGE_MAX),
                 stream: bool = Query(False, description="every matching row from cursor as NDJSON")
                 ) -> Response:
        """Rows of ``rows.jsonl`` in landing order, filtered; ``cursor`` is a byte offset
        (``next_cursor`` of the previous page), so paging a 1M-row run never rescans it."""
        run_dir = _run_dir(settings, run_id)
        match = _row_filter(mode, verdict, kind)
        rows_path = run_dir / "rows.jsonl"
        if stream:
            return StreamingResponse(_stream_rows(rows_path, cursor, match), media_type=NDJSON)
        rows, offset, eof = _page_rows(rows_path, cursor, match, limit)
        finished = (run_dir / "summary.md").exists() and not farm.followers.is_following(run_id)
        nxt = offset if not eof or not finished else None
        return JSONResponse({"rows": rows, "next_cursor": nxt})

    @app.get("/v1/runs/{run_id}/summary", tags=["runs"], dependencies=[asker], responses=ERRORS)
    def get_summary(run_id: str, format: str = Query("json", pattern="^(json|md)$")) -> Response:
        """The run's summary: ``format=md`` is summary.md, ``json`` its figures."""
        run_dir = _run_dir(settings, run_id)
        if format == "md":
            path = run_dir / "summary.md"
            if not path.exists():
                raise ApiError(404, f"run {run_id}: no summary.md yet (written when the run ends)")
            return PlainTextResponse(path.read_text(encoding="utf-8"),
                                     media_type="text/markdown; charset=utf-8")
        return JSONResponse(control.summary_data(run_dir))

    @app.post("/v1/runs/{run_id}/cancel", tags=["runs"], dependencies=[admin], responses=ERRORS)
    def cancel(run_id: str) -> dict[str, Any]:
        """Set the cancel flag and purge the run's queued messages (`qfarm cancel`)."""
        _check_run_id(run_id)
        done = control.cancel_run(farm.store, run_id, settings.results_dir)
        return {"run_id": run_id, "state": "cancelled", "purged_messages": done.purged,
                "done": done.done, "total": done.total}

    @app.post("/v1/runs/{run_id}/resume", tags=["runs"], dependencies=[admin], status_code=202,
              responses=ERRORS)
    def resume(run_id: str) -> JSONResponse:
        """Re-send the jobs without a row and follow the run (`qfarm sweep --resume`)."""
        run_dir = _run_dir(settings, run_id)
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
        return _compare(settings, a, b, floor)


def _viewer_route(app: FastAPI, farm: Farm, viewer: Any) -> None:
    # The viewer's pages, last: /v1, /metrics and /healthz above take precedence.
    @app.get("/{path:path}", include_in_schema=False)
    def view(path: str, request: Request) -> Response:
        query = dict(request.query_params)
        token = query.pop("token", None)
        if farm.tokens.required:
            if token is not None:
                return _login(farm, request, token)
            presented = (request.cookies.get(auth.COOKIE)
                         or auth.bearer(request.headers.get("authorization")))
            if farm.tokens.scope_of(presented) is None:
                return _problem(401, "the viewer needs a token: open /?token=TOKEN once "
                                     "(a cookie keeps it) or send Authorization: Bearer TOKEN")
        resp = viewer.handle("/" + path, query)
        return Response(resp.body, status_code=resp.status, media_type=resp.content_type,
                        headers={"Cache-Control": "no-store"})


def _login(farm: Farm, request: Request, token: str) -> Response:
    """``?token=T``: a cookie for the viewer's pages, then the same page without the token."""
    if farm.tokens.scope_of(token) is None:
        return _problem(401, "that token is not valid")
    query = "&".join(f"{k}={v}" for k, v in request.query_params.multi_items() if k != "token")
    target = request.url.path + (f"?{query}" if query else "")
    resp = RedirectResponse(target, status_code=303)
    resp.set_cookie(auth.COOKIE, token, httponly=True, samesite="strict",
                    secure=request.url.scheme == "https", path="/")
    return resp


async def _wait_answer(store: ProducerStore, ticket: AskTicket, wait_s: float) -> Any:
    """Poll for the row until ``wait_s``; each poll is one short Redis read in the thread
    pool and the waits between them hold no thread."""
    deadline = time.monotonic() + wait_s
    for pause in poll_pauses():  # the schedule of producer.api.wait_for_answer
        answer = await run_in_threadpool(answer_for, store, ticket)
        if answer is not None or time.monotonic() >= deadline:
            return answer
        await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
    return None


def _rows_key(run_id: str) -> str:
    from common import keys

    return keys.rows_key(run_id)


def _check_run_id(run_id: str) -> None:
    # Run ids name directories: nothing that could leave the results directory.
    if not run_id or "/" in run_id or "\\" in run_id or run_id.startswith("."):
        raise ApiError(404, f"run {run_id!r}: not a run id")


def _run_dir(settings: Settings, run_id: str) -> Path:
    _check_run_id(run_id)
    run_dir = settings.results_dir / run_id
    if not (run_dir / "manifest.json").exists():
        raise ApiError(404, f"run {run_id}: no run directory here (the server that followed "
                            "it has its files; GET /v1/runs lists runs)")
    return run_dir


def _row_filter(mode: str | None, verdict: str | None,
                kind: str | None) -> Callable[[dict[str, Any]], bool]:
    if mode is not None:
        _modes([mode], "mode")
    allowed_verdicts = (*(v.value for v in Verdict), "none")
    if verdict is not None and verdict not in allowed_verdicts:
        raise ApiError(422, f"verdict: {verdict!r}; choose from {', '.join(allowed_verdicts)} "
                            "(none: rows with an error)", "verdict")

    def match(row: dict[str, Any]) -> bool:
        if mode is not None and row.get("mode") != mode:
            return False
        if verdict is not None:
            got = "none" if row.get("error") or not row.get("verdict") else row.get("verdict")
            if got != verdict:
                return False
        return kind is None or kind in (row.get("violation_kinds") or ())

    return match


def _compare(settings: Settings, a: str, b: str, floor: float) -> dict[str, Any]:
    from common.compare import headline, render_compare
    from producer.reports import check_floor, compare_dirs

    try:
        check_floor(floor)
    except InputError as exc:
        raise ApiError(422, str(exc), "floor") from None
    cmp = compare_dirs(_run_dir(settings, a), _run_dir(settings, b), floor)
    return {
        "a": a, "b": b, "floor": floor,
        "headline": headline(cmp),
        "warnings": cmp.warnings,
        "deltas": [_jsonable(d) for d in cmp.deltas],
        "markdown": render_compare(cmp),
    }


def _page_rows(path: Path, cursor: int, match: Callable[[dict[str, Any]], bool],
               limit: int) -> tuple[list[dict[str, Any]], int, bool]:
    """Up to ``limit`` matching rows from byte ``cursor``; (rows, next offset, reached the end)."""
    rows: list[dict[str, Any]] = []
    offset = cursor
    for line in iter_rows(path, cursor):
        if not line.complete:
            break  # the follower is writing it: the next page starts here
        offset = line.end
        if line.row is not None and match(line.row):
            rows.append(line.row)
            if len(rows) >= limit:
                return rows, offset, False
    return rows, offset, True


def _stream_rows(path: Path, cursor: int, match: Callable[[dict[str, Any]], bool]) -> Iterator[bytes]:
    for line in iter_rows(path, cursor):
        if not line.complete:
            break
        if line.row is not None and match(line.row):
            yield (json.dumps(line.row, ensure_ascii=False) + "\n").encode()


def _created(run_id: str, state: str, n_jobs: int) -> dict[str, Any]:
    return {"run_id": run_id, "state": state, "jobs": n_jobs, "url": f"/v1/runs/{run_id}"}


def _jsonable(obj: Any) -> Any:
    import dataclasses
    import enum

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


async def _sweep_spec(request: Request, settings: Settings) -> SweepSpec:
    """A SweepSpec from a JSON body or a JSONL upload, every part checked before anything
    is written or sent."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    raw = await request.body()
    if ctype in (NDJSON, "application/jsonl", "application/json-lines"):
        q = request.query_params
        try:
            policy_data = json.loads(q.get("policy", "{}"))
        except json.JSONDecodeError as exc:
            raise ApiError(422, f"policy: not a JSON object ({exc.msg})", "policy") from None
        if not isinstance(policy_data, dict):
            raise ApiError(422, "policy: not a JSON object", "policy")
        try:
            text = raw.decode("utf-8")
            questions = parse_questions("upload", text)
        except UnicodeDecodeError:
            raise ApiError(422, "questions: the upload is not UTF-8 text", "questions") from None
        except InputError as exc:
            raise ApiError(422, str(exc), "questions") from None
        try:
            n = int(q.get("n", "1"))
        except ValueError:
            raise ApiError(422, f"n: {q.get('n')!r} is not an integer", "n") from None
        body: dict[str, Any] = {"modes": q.get("modes", ",".join(m.value for m in _all_modes())).split(","),
                "n": n, "policy": policy_data,
                "keep_answers": q.get("keep_answers", "false").lower() in ("1", "true", "yes"),
                "burn": q.get("burn", "false").lower() in ("1", "true", "yes")}
    elif ctype in ("application/json", ""):
        try:
            data = json.loads(raw or b"{}")
            req = SweepRequest.model_validate(data)
        except json.JSONDecodeError as exc:
            raise ApiError(422, f"body: not JSON ({exc.msg})") from None
        except Exception as exc:
            raise _from_validation(exc) from None
        for i, text in enumerate(req.questions):
            _question_text(text, settings.api_max_question_chars, f"questions[{i}]")
        questions = QuestionSet.from_texts(req.questions, source="request").questions
        body = req.model_dump(exclude={"questions"})
    else:
        raise ApiError(415, f"Content-Type {ctype!r}: send application/json or {NDJSON}")
    for q_ in questions:
        _question_text(q_.text, settings.api_max_question_chars, f"questions[{q_.id}]")
    if not 1 <= body["n"] <= MAX_N:
        raise ApiError(422, f"n: {body['n']}; allowed 1 <= n <= {MAX_N}", "n")
    modes = _modes(body["modes"], "modes")
    policy = _policy(body["policy"])
    _check_plan(settings, len(questions), len(modes), body["n"])
    path = await run_in_threadpool(_upload_questions, settings, questions)
    return SweepSpec(questions=QuestionSet.from_file(path), modes=modes, n=body["n"],
                     policy=policy, keep_answers=body["keep_answers"], use_cache=not body["burn"])


def _all_modes() -> tuple[Any, ...]:
    from common.models import ALL_MODES

    return ALL_MODES


def _from_validation(exc: Exception) -> ApiError:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return _first_error(exc.errors())
    return ApiError(422, f"body: {exc}")


def _first_error(errors: Any) -> ApiError:
    first = list(errors)[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    where = ".".join(loc) or "body"
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        msg = "unknown field"
    return ApiError(422, f"{where}: {msg}", where)


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _problem(exc.status, exc.message, exc.field,
                        headers={"WWW-Authenticate": "Bearer"} if exc.status == 401 else None)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = _first_error(exc.errors())
        return _problem(err.status, err.message, err.field)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _problem(exc.status_code, str(exc.detail))

    @app.exception_handler(QfarmError)
    async def qfarm_error(_: Request, exc: QfarmError) -> JSONResponse:
        # Input errors are the caller's (4xx); the rest are the farm's state: no worker,
        # no endpoints, Redis down (503). Messages are qfarm's own one-liners, which
        # never carry a secret (Redis URLs are redacted where they are made).
        if isinstance(exc, ManifestError):
            return _problem(409, str(exc))
        if isinstance(exc, InputError):
            status = 404 if "not found" in str(exc) or "no such" in str(exc) else 422
            return _problem(status, str(exc))
        if isinstance(exc, ConfigError):
            return _problem(503, str(exc))
        return _problem(503, str(exc))


class BodyLimit:
    """ASGI middleware: request bodies over ``limit`` bytes get a 413, whether announced
    by Content-Length (refused before reading) or chunked (refused once the count passes
    the limit while the route reads); also counts requests per route for /metrics."""

    def __init__(self, app: Any, limit: int, collector: Any, tokens: auth.Tokens) -> None:
        self.app, self.limit, self.collector, self.tokens = app, limit, collector, tokens

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if scope["path"] in DOC_PATHS and not self._may_read_docs(headers):
            await _problem(401, "the API's schema needs a token too (a bearer header, or the "
                                "viewer's cookie: open /?token=TOKEN first)")(scope, receive, send)
            return
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            resp = _problem(413, f"request body of {int(length)} bytes; at most {self.limit} "
                                 "(QFARM_API_MAX_BODY_BYTES)")
            await resp(scope, receive, send)
            self._count(scope, 413)
            return
        seen = 0
        status = [500]

        async def limited() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise ApiError(413, f"request body over {self.limit} bytes "
                                        "(QFARM_API_MAX_BODY_BYTES)")
            return message

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        await self.app(scope, limited, sending)
        self._count(scope, status[0])

    def _may_read_docs(self, headers: dict[bytes, bytes]) -> bool:
        if not self.tokens.required:
            return True
        presented = auth.bearer(headers.get(b"authorization", b"").decode(errors="replace"))
        if presented is None:
            cookies = http.cookies.SimpleCookie(headers.get(b"cookie", b"").decode(errors="replace"))
            morsel = cookies.get(auth.COOKIE)
            presented = morsel.value if morsel else None
        return self.tokens.scope_of(presented) is not None

    def _count(self, scope: dict[str, Any], status: int) -> None:
        if self.collector is not None:
            route = scope.get("route")
            self.collector.count_request(getattr(route, "path", "other"), status)


def _register_collector(farm: Farm) -> Any:
    from prometheus_client import CollectorRegistry

    from producer.http.metrics import FarmCollector

    class LazyStore:
        """Redis is connected at the first scrape, not when the app is built."""

        def __getattr__(self, name: str) -> Any:
            return getattr(farm.store, name)

    collector = FarmCollector(LazyStore())  # type: ignore[arg-type]
    collector.registry = CollectorRegistry(auto_describe=False)  # type: ignore[attr-defined]
    collector.registry.register(collector)  # type: ignore[attr-defined]
    return collector


__all__ = ["create_app", "redact_url"]
