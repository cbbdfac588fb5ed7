"""The Python API of qfarm: run a sweep, follow one again, or ask a single question.

``qfarm sweep`` and ``qfarm ask`` are thin shells around these functions, and a
notebook calls them the same way::

    result = run_sweep(SweepSpec(questions=["What is jazz?"]), eager=True, settings=settings)
    rows = result.rows()

Eager runs execute every job in this process (an in-memory Redis; the stages run
concurrently, or one job at a time through Celery's eager mode with ``serial=True``);
distributed runs publish the jobs to Redis for ``celery -A worker``
workers and follow the run until every job has a row. Both write the same run
directory (``manifest.json``, ``rows.jsonl``, ``status.json``, ``summary.md``).

Everything that can be wrong with the input is checked before a run directory
exists or a message is sent, in the same order as before this module existed:
questions and modes, then Redis, the index, the LLM endpoints and capacity.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from common import keys
from common.errors import ConfigError, InputError, QfarmError
from common.jobs import check_samples, parse_modes
from common.models import ALL_MODES, Job, JobRecord, Manifest, Mode, Question, Row
from common.policy import Policy
from common.questions import (
    DEFAULT_MAX_QUESTION_CHARS,
    check_question,
    digest_content,
    question_id_for,
    text_problem,
)
from common.settings import Settings, load_settings
from common.vocab import Backend, RunStatus
from producer import interrupts
from producer.aggregator import Aggregator
from producer.capacity import check_plan_fits
from producer.endpoints import probe_endpoints
from producer.lease import FollowerLease
from producer.runs import (
    create_run_dir,
    new_run_id,
    producer_alive,
    read_manifest,
    read_run_status,
    this_process,
    update_run_status,
)
from producer.store import ProducerStore, Progress, connect
from producer.sweep import (
    Follower,
    RedisGone,
    SweepPlan,
    enqueue_jobs,
    load_questions,
    make_manifest,
    missing_jobs,
    reconcile_run,
)

log = logging.getLogger("qfarm.producer")

Say = Callable[[str], None]
OnProgress = Callable[[Progress], None]


@dataclass(frozen=True)
class Endpoints:
    """The LLM endpoints a run uses, and whether they are the qfarm simulator.

    ``server`` names a server the caller started (the manifest and summary carry it, e.g.
    "llama.cpp server (llama-cpp-python 0.3.36), CPU, local"); ``settings`` are the gateway
    settings that server needs (one request in flight, its context window...), applied on
    top of the run's settings while it runs in this process.
    """

    urls: list[str]
    simulated: bool
    server: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def apply(self, settings: Settings) -> Settings:
        """``settings`` pointed at these endpoints, with the server's own settings."""
        return settings.model_copy(update={**self.settings, "llm_endpoints": ",".join(self.urls)})


# Gives the endpoints for a run while the run needs them (a context, so a caller may
# start a server for the run's duration: the CLI starts the simulator when none is set).
EndpointsFor = Callable[[Settings], AbstractContextManager[Endpoints]]


@contextlib.contextmanager
def configured_endpoints(settings: Settings) -> Iterator[Endpoints]:
    """The endpoints of ``settings`` (QFARM_LLM_ENDPOINTS), checked to answer as OpenAI-compatible
    servers of QFARM_MODEL."""
    if not settings.endpoints:
        raise ConfigError(
            "no LLM endpoints: set QFARM_LLM_ENDPOINTS (or Settings(llm_endpoints=...)) to base "
            "URLs such as http://gpu1:8000; start a simulator with `qfarm sim --port 8000`"
        )
    probe = probe_endpoints(settings.endpoints, model=settings.model, api_keys={
        url: settings.api_key_for(url) for url in settings.endpoints})
    server = None if probe.simulated else recognised_server(
        probe.alive[0], settings.api_key_for(probe.alive[0]))
    yield Endpoints(urls=settings.endpoints, simulated=probe.simulated, server=server)


def recognised_server(url: str, api_key: str | None, timeout_s: float = 5.0) -> str | None:
    """The name of a server that says what it is in ``/openapi.json`` (llama.cpp's Python
    server does), for the manifest; None for vLLM and anything not recognised."""
    from worker.llm.client import server_info_from_openapi

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = httpx.get(f"{url}/openapi.json", headers=headers, timeout=timeout_s)
        info = server_info_from_openapi(resp.json()) if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return info.name if info else None


@dataclass(frozen=True)
class QuestionSet:
    """Questions with where they came from and the digest of their source."""

    questions: list[Question]
    source: str
    digest: str

    @classmethod
    def from_file(cls, path: Path, max_chars: int = DEFAULT_MAX_QUESTION_CHARS) -> QuestionSet:
        questions, digest = load_questions(path, max_chars)
        return cls(questions=questions, source=str(path), digest=digest)

    @classmethod
    def from_texts(cls, texts: Sequence[str | Question], source: str = "<python>",
                   max_chars: int = DEFAULT_MAX_QUESTION_CHARS) -> QuestionSet:
        questions = []
        for i, item in enumerate(texts):
            if isinstance(item, Question):
                where = item.source or f"{source}[{i}]"
                check_question(item.text, where, max_chars)
                problem = text_problem(item.id)
                if problem:
                    raise InputError(f"{where}: the id {problem}")
                questions.append(item)
                continue
            text = check_question(item, f"{source}[{i}]", max_chars)
            questions.append(Question(id=question_id_for(text), text=text, source=f"{source}[{i}]"))
        if not questions:
            raise InputError(f"{source}: no questions given")
        digest = digest_content("\n".join(q.model_dump_json() for q in questions))
        return cls(questions=questions, source=source, digest=digest)


@dataclass(frozen=True)
class SweepSpec:
    """What to run: every question in every mode, ``n`` samples each."""

    questions: Path | Sequence[str | Question] | QuestionSet
    modes: Sequence[Mode | str] = ALL_MODES
    n: int = 1
    policy: Policy = field(default_factory=Policy)
    keep_answers: bool = False
    use_cache: bool = True

    def question_set(self, max_chars: int = DEFAULT_MAX_QUESTION_CHARS) -> QuestionSet:
        """The questions, each checked (``max_chars``: QFARM_MAX_QUESTION_CHARS)."""
        if isinstance(self.questions, QuestionSet):
            for q in self.questions.questions:
                check_question(q.text, q.source or self.questions.source, max_chars)
            return self.questions
        if isinstance(self.questions, Path):
            return QuestionSet.from_file(self.questions, max_chars)
        if isinstance(self.questions, str):
            raise InputError("SweepSpec.questions: a str is not a list of questions; pass a Path "
                             "for a question file or a list of question texts")
        return QuestionSet.from_texts(self.questions, max_chars=max_chars)


@dataclass(frozen=True)
class RunResult:
    """How a run ended (as far as this call followed it) and where its files are.

    ``status`` is the run's ``status.json`` status: complete, incomplete, cancelled,
    failed, running (detached on purpose), interrupted (distributed: this process stopped
    following and the run goes on; eager: the run stopped with the rows it had, and
    ``resume_eager`` runs the rest), enqueue interrupted, or detached: Redis unreachable.
    """

    manifest: Manifest
    run_dir: Path
    status: str
    rows_written: int = 0
    error: str | None = None
    summary: Path | None = None
    enqueued: int | None = None
    enqueue_s: float | None = None

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def rows_path(self) -> Path:
        return self.run_dir / "rows.jsonl"

    @property
    def jobs_without_row(self) -> int:
        return max(0, self.manifest.n_jobs - self.rows_written)

    def rows(self) -> list[Row]:
        """The run's rows so far, in the order they landed."""
        if not self.rows_path.exists():
            return []
        with self.rows_path.open(encoding="utf-8") as f:
            return [Row.model_validate_json(line) for line in f if line.strip()]


@dataclass(frozen=True)
class Answer:
    """One question's row, and its full record (claims, sidecar) when one was kept."""

    row: Row
    record: JobRecord | None


def _say_to_log(line: str) -> None:
    log.info("%s", line)


def run_sweep(
    spec: SweepSpec,
    *,
    eager: bool = False,
    detach: bool = False,
    settings: Settings | None = None,
    on_progress: OnProgress | None = None,
    say: Say | None = None,
    endpoints: EndpointsFor = configured_endpoints,
    index_progress: bool = False,
    serial: bool = False,
) -> RunResult:
    """Run a sweep and return when every job has a row (or the run stopped).

    ``eager`` runs the jobs in this process, concurrently (``worker/runner.py``: the
    endpoints' in-flight caps of LLM requests at once), or one at a time with ``serial``
    (for debugging); otherwise they go to Redis workers and this call follows the run
    (``detach``: returns once every job is enqueued).
    ``on_progress`` receives each poll's progress, ``say`` lines for the operator
    (default: the ``qfarm.producer`` log). ``index_progress`` shows the progress of
    building the default index when it does not exist yet.
    """
    settings = settings or load_settings()
    say = say or _say_to_log
    modes = parse_modes([str(m) for m in spec.modes])
    check_samples(spec.n)
    questions = spec.question_set(settings.max_question_chars)
    if eager:
        return _run_eager(spec, questions, modes, settings, endpoints, on_progress, index_progress,
                          serial=serial)
    return _run_distributed(spec, questions, modes, settings, endpoints, on_progress, say,
                            detach=detach, index_progress=index_progress)


def _manifest(spec: SweepSpec, questions: QuestionSet, modes: list[Mode], settings: Settings,
              eps: Endpoints, retriever: Any, *, eager: bool, run_id: str | None = None,
              corpus: str | None = None) -> Manifest:
    return make_manifest(
        run_id=run_id or new_run_id(),
        question_file=questions.source,
        question_file_digest=questions.digest,
        n_questions=len(questions.questions),
        modes=modes,
        n=spec.n,
        policy=spec.policy,
        model=settings.model,
        endpoints=eps.urls,
        simulated=eps.simulated,
        llm_server=eps.server,
        retriever=retriever.backend,
        index_version=retriever.index_version(),
        corpus=corpus,
        eager=eager,
        keep_answers=spec.keep_answers,
        use_cache=spec.use_cache,
    )


def _corpus(retriever: Any) -> str:
    describe: dict[str, Any] = getattr(retriever, "describe", lambda: {})()
    return str(describe.get("corpus") or describe.get("index") or "default")


def _run_eager(spec: SweepSpec, questions: QuestionSet, modes: list[Mode], settings: Settings,
               endpoints: EndpointsFor, on_progress: OnProgress | None,
               index_progress: bool, *, serial: bool = False) -> RunResult:
    # matplotlib takes about a second to import, and only the summary at the end needs it:
    # imported now, beside the run (which leaves the GIL free most of the time), not after.
    threading.Thread(target=_import_plotting, name="qfarm-import-plotting", daemon=True).start()
    retriever = open_local_retriever(settings, progress=index_progress)
    with endpoints(settings) as eps:
        settings = eps.apply(settings)
        plan = SweepPlan(
            manifest=_manifest(spec, questions, modes, settings, eps, retriever, eager=True,
                               corpus=_corpus(retriever)),
            questions=questions.questions,
        )
        check_plan_fits(plan.manifest, settings)
        run_dir = create_run_dir(settings.results_dir, plan.manifest)
        update_run_status(run_dir, status=RunStatus.RUNNING, started_at=time.time(), **this_process())
        return _execute_eager(plan, plan.jobs(), run_dir, settings, eps, retriever, on_progress,
                              serial=serial)


def resume_eager(
    run_id: str,
    *,
    settings: Settings | None = None,
    on_progress: OnProgress | None = None,
    endpoints: EndpointsFor = configured_endpoints,
    serial: bool = False,
) -> RunResult:
    """Run, in this process, the jobs of an eager run that have no row in its rows.jsonl
    (``qfarm sweep --resume RUN --eager``): an interrupted or killed eager run's rows are
    valid, and its job ids are fixed by its manifest and question file."""
    from producer.aggregator import cut_partial_line, file_rows

    settings = settings or load_settings()
    run_dir = settings.results_dir / run_id
    manifest = read_manifest(run_dir)
    if not manifest.eager:
        raise InputError(f"run {run_id} is a distributed run: resume it without --eager "
                         f"(qfarm sweep --resume {run_id})")
    status = read_run_status(run_dir)
    if status.get("status") == RunStatus.RUNNING and producer_alive(status):
        raise InputError(f"run {run_id} is still running (process {status.get('pid')}); "
                         "stop it first or wait for it to end")
    questions, digest = load_questions(Path(manifest.question_file))
    if digest != manifest.question_file_digest:
        raise InputError(
            f"{manifest.question_file}: changed since run {run_id} started "
            f"({digest} != {manifest.question_file_digest}); restore it or start a new sweep"
        )
    plan = SweepPlan(manifest=manifest, questions=questions)
    rows_path = run_dir / "rows.jsonl"
    cut_partial_line(rows_path)  # a line the killed process was writing: its job runs again
    have = {job_id for job_id, _ in file_rows(rows_path)}
    missing = [job for job in plan.jobs() if job.job_id not in have]
    threading.Thread(target=_import_plotting, name="qfarm-import-plotting", daemon=True).start()
    retriever = open_local_retriever(settings, progress=False)
    with endpoints(settings) as eps:
        settings = eps.apply(settings)
        update_run_status(run_dir, status=RunStatus.RUNNING, resumed_at=time.time(),
                          resumed_jobs=len(missing), **this_process())
        return _execute_eager(plan, missing, run_dir, settings, eps, retriever, on_progress,
                              serial=serial)


def _execute_eager(plan: SweepPlan, jobs: Iterable[Job], run_dir: Path, settings: Settings,
                   eps: Endpoints, retriever: Any, on_progress: OnProgress | None, *,
                   serial: bool) -> RunResult:
    """Run ``jobs`` in this process, appending their rows to the run's rows.jsonl. A Ctrl-C
    (or SIGTERM, for the command line) ends the run as interrupted with its rows so far."""
    from worker.celery_app import app  # imported late: Celery is slow to import

    svc, store = eager_services(settings, retriever)
    store.put_manifest(plan.manifest)
    agg = Aggregator(store, plan.manifest.run_id, run_dir / "rows.jsonl")

    def tick() -> None:
        agg.drain()
        if on_progress:
            on_progress(store.progress(plan.manifest.run_id, plan.manifest.n_jobs))

    try:
        try:
            if serial:
                for job in jobs:
                    enqueue_jobs(app, [job])  # Celery eager mode: runs every stage inline
                    tick()
            else:
                from worker.runner import InProcessRunner

                # As many jobs in flight as the endpoints take from one process.
                inflight = len(eps.urls) * max(1, settings.llm_max_inflight_per_endpoint)
                InProcessRunner(svc, max_inflight=inflight, bundle_size=settings.bundle_size).run(
                    jobs, tick=tick
                )
        finally:
            svc.close()
    except KeyboardInterrupt:
        interrupts.handled()
        agg.drain()
        return _finish(plan.manifest, run_dir, agg.written, interrupted=True)
    agg.drain()
    error = store.progress(plan.manifest.run_id, plan.manifest.n_jobs).error
    if error:
        update_run_status(run_dir, status=RunStatus.FAILED, error=error, rows=agg.written)
        return RunResult(plan.manifest, run_dir, RunStatus.FAILED, agg.written, error=error)
    return _finish(plan.manifest, run_dir, agg.written)


def _import_plotting() -> None:
    import matplotlib.figure  # noqa: F401  (the import is the point)


def _run_distributed(spec: SweepSpec, questions: QuestionSet, modes: list[Mode],
                     settings: Settings, endpoints: EndpointsFor, on_progress: OnProgress | None,
                     say: Say, *, detach: bool, index_progress: bool) -> RunResult:
    from worker.celery_app import configure_app  # Celery is slow to import

    require_endpoints_for_workers(settings)
    client = connect(settings.redis_url)
    retriever = open_local_retriever(settings, progress=index_progress)
    with endpoints(settings) as eps:
        pass  # the workers call the endpoints; this only checks they answer
    plan = SweepPlan(
        manifest=_manifest(spec, questions, modes, settings, eps, retriever, eager=False,
                           corpus=_corpus(retriever)),
        questions=questions.questions,
    )
    check_plan_fits(plan.manifest, settings, client)
    app = configure_app(settings)
    store = ProducerStore(client)
    run_dir = create_run_dir(settings.results_dir, plan.manifest)
    store.put_manifest(plan.manifest)
    update_run_status(run_dir, status=RunStatus.ENQUEUEING, started_at=time.time(), **this_process())
    t0 = time.perf_counter()
    try:
        sent = enqueue_counted(app, store, plan.jobs(), bundle_size=settings.bundle_size)
    except KeyboardInterrupt:
        update_run_status(run_dir, status=RunStatus.ENQUEUE_INTERRUPTED)
        return RunResult(plan.manifest, run_dir, RunStatus.ENQUEUE_INTERRUPTED)
    elapsed = time.perf_counter() - t0
    update_run_status(run_dir, status=RunStatus.RUNNING, enqueued=sent)
    say(f"run {plan.manifest.run_id}: enqueued {sent} jobs in {elapsed:.2f}s "
        f"({sent / max(elapsed, 1e-9):,.0f} jobs/s)")
    if detach:
        return RunResult(plan.manifest, run_dir, RunStatus.RUNNING, enqueued=sent, enqueue_s=elapsed)
    result = _follow(store, run_dir, plan.manifest, settings, on_progress, say,
                     reconcile=_reconciler(app, plan, store, settings.bundle_size, say))
    return dataclasses.replace(result, enqueued=sent, enqueue_s=elapsed)


def follow_run(
    run_id: str,
    *,
    resend_missing: bool = False,
    settings: Settings | None = None,
    on_progress: OnProgress | None = None,
    say: Say | None = None,
) -> RunResult:
    """Follow a distributed run again (``qfarm sweep --attach``); with ``resend_missing``
    (``--resume``) first put back rows Redis lost and re-send the jobs without a row."""
    from worker.celery_app import configure_app  # Celery is slow to import

    settings = settings or load_settings()
    say = say or _say_to_log
    run_dir = settings.results_dir / run_id
    if not (run_dir / "manifest.json").exists():
        raise InputError(f"run {run_id}: no {run_dir}/manifest.json; pass --out with the results dir")
    manifest = read_manifest(run_dir)
    if manifest.eager:
        raise InputError(f"run {run_id} was an eager run: resume it in this process with "
                         f"qfarm sweep --resume {run_id} --eager")
    store = ProducerStore(connect(settings.redis_url))
    if not store.has_manifest(run_id):
        store.put_manifest(manifest)  # Redis lost it (restart): restore before re-enqueueing
    app = configure_app(settings)
    plan = None
    try:
        questions, digest = load_questions(Path(manifest.question_file), settings.max_question_chars)
        if digest != manifest.question_file_digest:
            raise InputError(
                f"{manifest.question_file}: changed since run {run_id} started "
                f"({digest} != {manifest.question_file_digest}); restore it or start a new sweep"
            )
        plan = SweepPlan(manifest=manifest, questions=questions)
    except InputError:
        if resend_missing:
            raise
        say(f"warning: {manifest.question_file} is gone or changed; following run {run_id} "
            "without re-sending lost jobs")
    lease = FollowerLease(store.client, run_id)
    recovered = None
    if resend_missing:
        assert plan is not None  # a missing question file raised above
        require_endpoints_for_workers(settings)
        recovered = _recover(store, run_dir, manifest, lease, say)
        sent = enqueue_counted(app, store, missing_jobs(plan, store), bundle_size=settings.bundle_size)
        say(f"run {run_id}: re-enqueued {sent} jobs without a row")
    reconcile = _reconciler(app, plan, store, settings.bundle_size, say) if plan else None
    return _follow(store, run_dir, manifest, settings, on_progress, say, reconcile=reconcile,
                   recovered=recovered, lease=lease)


def _recover(store: ProducerStore, run_dir: Path, manifest: Manifest, lease: FollowerLease,
             say: Say) -> dict[str, int]:
    """Before re-sending jobs: rows only in rows.jsonl go back to Redis (it lost them in a
    restart), rows only in Redis go into rows.jsonl (if no other follower drains the run)."""
    agg = Aggregator(store, manifest.run_id, run_dir / "rows.jsonl")
    from_file = agg.restore_to_redis()
    from_redis = agg.drain() if lease.hold() else 0
    say(f"run {manifest.run_id}: recovered {from_file} rows from rows.jsonl and "
        f"{from_redis} from Redis")
    return {"rows_recovered_from_file": from_file, "rows_recovered_from_redis": from_redis}


def _reconciler(app: Any, plan: SweepPlan, store: ProducerStore, bundle_size: int,
                say: Say) -> Callable[[], int]:
    def reconcile() -> int:
        sent = reconcile_run(app, plan, store, bundle_size=bundle_size)
        if sent:
            say(f"\nrun {plan.manifest.run_id}: {sent} jobs had no row and no message left "
                "(lost with a killed worker or a Redis restart); re-enqueued them")
        return sent

    return reconcile


def _follow(store: ProducerStore, run_dir: Path, manifest: Manifest, settings: Settings,
            on_progress: OnProgress | None, say: Say, *, reconcile: Callable[[], int] | None,
            recovered: dict[str, int] | None = None,
            lease: FollowerLease | None = None) -> RunResult:
    run_id = manifest.run_id
    follower = Follower(store, manifest, run_dir / "rows.jsonl",
                        lease=lease or FollowerLease(store.client, run_id), reconcile=reconcile,
                        say=say, reconnect_s=settings.redis_reconnect_s)
    try:
        prog = follower.run(on_progress=on_progress)
    except KeyboardInterrupt:
        interrupts.handled()
        follower.release()
        return RunResult(manifest, run_dir, RunStatus.INTERRUPTED, _written(follower))
    except RedisGone as exc:
        status = RunStatus.DETACHED
        update_run_status(run_dir, status=status)
        return RunResult(manifest, run_dir, status, _written(follower), error=str(exc))
    written = _written(follower)
    extra: dict[str, object] = dict(recovered or {})
    if follower.restored:
        extra["rows_restored_to_redis"] = follower.restored
    if prog.error:
        follower.release()
        update_run_status(run_dir, status=RunStatus.FAILED, error=prog.error, rows=written, **extra)
        return RunResult(manifest, run_dir, RunStatus.FAILED, written, error=prog.error)
    try:
        return _finish(manifest, run_dir, written, cancelled=prog.cancelled, extra=extra)
    finally:
        follower.release()


def _written(follower: Follower) -> int:
    return follower.aggregator.written if follower.aggregator else 0


def _finish(manifest: Manifest, run_dir: Path, written: int, *, cancelled: bool = False,
            interrupted: bool = False, extra: dict[str, object] | None = None) -> RunResult:
    from producer.reports import write_summary  # matplotlib is slow to import

    total = manifest.n_jobs
    state = (RunStatus.COMPLETE if written >= total else RunStatus.CANCELLED if cancelled
             else RunStatus.INTERRUPTED if interrupted else RunStatus.INCOMPLETE)
    # ``written`` counts distinct job ids: the run is complete when every planned job has a row.
    final = {"status": state, "finished_at": time.time(), "rows": written, **(extra or {})}
    # The summary first: whoever sees the final status (the API, the viewer) finds it.
    summary = write_summary(run_dir, status={**read_run_status(run_dir), **final})
    update_run_status(run_dir, **final)
    return RunResult(manifest, run_dir, state, written, summary=summary)


def ask(
    question: str,
    mode: Mode | str = Mode.CLAIM_LATTICE_POINTER,
    *,
    eager: bool = False,
    policy: Policy | None = None,
    use_cache: bool = True,
    timeout_s: float = 120.0,
    settings: Settings | None = None,
    endpoints: EndpointsFor = configured_endpoints,
) -> Answer:
    """Answer one question in one mode (``qfarm ask``).

    Distributed, the job goes to the ``interactive`` queue so it never waits behind a
    sweep; a QfarmError says so when no worker consumes that queue or no row comes
    within ``timeout_s``.
    """
    settings = settings or load_settings()
    if not question.strip():
        raise InputError("the question is empty; e.g. qfarm ask \"Who were the members of the Beatles?\"")
    text = check_question(question, "", settings.max_question_chars)
    modes = parse_modes(str(mode))
    if len(modes) != 1:
        raise InputError("--mode takes one mode for ask; use qfarm sweep for several")
    if not timeout_s > 0 or not math.isfinite(timeout_s):
        raise InputError(f"--timeout {timeout_s:g}: seconds to wait for the row, a finite number "
                         "above 0, e.g. --timeout 120")
    q = Question(id=question_id_for(text), text=text, source="<command line>")
    if eager:
        return _ask_eager(settings, q, modes, policy or Policy(), use_cache, endpoints)
    return _ask_distributed(settings, q, modes, policy or Policy(), use_cache, timeout_s, endpoints)


def _ask_manifest(settings: Settings, question: Question, modes: list[Mode], policy: Policy,
                  eps: Endpoints, retriever: Any, *, eager: bool, use_cache: bool) -> Manifest:
    """An asked question is a run of one job that keeps its answer."""
    spec = SweepSpec(questions=[question], modes=modes, policy=policy, keep_answers=True,
                     use_cache=use_cache)
    questions = QuestionSet([question], "<command line>", digest_content(question.text))
    return _manifest(spec, questions, modes, settings, eps, retriever, eager=eager,
                     run_id="ask-" + new_run_id())


def _submit(store: ProducerStore, manifest: Manifest, question: Question, app: Any) -> str:
    store.put_manifest(manifest)
    job = next(iter(SweepPlan(manifest=manifest, questions=[question]).jobs()))
    enqueue_counted(app, store, [job], stage=keys.INTERACTIVE)
    return job.job_id


def enqueue_counted(app: Any, store: ProducerStore, jobs: Iterable[Job], *,
                    stage: keys.Stage = keys.RETRIEVE, bundle_size: int = 1) -> int:
    """``enqueue_jobs``, adding the jobs sent per mode to the operator counters (/metrics)."""
    per_mode: Counter[str] = Counter()

    def counted() -> Iterator[Job]:
        for job in jobs:
            per_mode[job.mode.value] += 1
            yield job

    try:
        return enqueue_jobs(app, counted(), stage=stage, bundle_size=bundle_size)
    finally:
        store.count_enqueued(per_mode)


def _ask_eager(settings: Settings, question: Question, modes: list[Mode], policy: Policy,
               use_cache: bool, endpoints: EndpointsFor) -> Answer:
    from worker.celery_app import app  # Celery is slow to import

    retriever = open_local_retriever(settings, progress=False)
    with endpoints(settings) as eps:
        settings = eps.apply(settings)
        svc, store = eager_services(settings, retriever)
        manifest = _ask_manifest(settings, question, modes, policy, eps, retriever, eager=True,
                                 use_cache=use_cache)
        try:
            job_id = _submit(store, manifest, question, app)
        finally:
            svc.close()
    return _fetch(store, manifest.run_id, job_id)


def _ask_distributed(settings: Settings, question: Question, modes: list[Mode], policy: Policy,
                     use_cache: bool, timeout_s: float, endpoints: EndpointsFor) -> Answer:
    ctx = ask_context(settings, endpoints)
    ticket = submit_ask(ctx, question, modes[0], policy, use_cache=use_cache)
    answer = wait_for_answer(ctx.store, ticket, timeout_s)
    if answer is not None:
        return answer
    raise QfarmError(
        f"no answer within {timeout_s:.0f}s (run {ticket.run_id}); is a worker consuming the "
        "interactive queue? start one with: celery -A worker worker -Q interactive -P threads -c 8"
    )


@dataclass(frozen=True)
class AskContext:
    """What every distributed question needs, built once: a long-lived caller (the HTTP
    API) keeps one instead of probing the endpoints and opening the index per question."""

    settings: Settings
    store: ProducerStore
    app: Any
    retriever: Any
    endpoints: Endpoints


@dataclass(frozen=True)
class AskTicket:
    """A submitted question: its one-job run and the job's id."""

    run_id: str
    job_id: str


def ask_context(settings: Settings, endpoints: EndpointsFor = configured_endpoints) -> AskContext:
    """Check and open what distributed questions need: endpoints set and answering, Redis,
    the local index (for the manifest's index version)."""
    from worker.celery_app import configure_app  # Celery is slow to import

    require_endpoints_for_workers(settings)
    store = ProducerStore(connect(settings.redis_url))
    app = configure_app(settings)
    retriever = open_local_retriever(settings, progress=False)
    with endpoints(settings) as eps:
        pass  # the workers call the endpoints; this only checks they answer
    return AskContext(settings, store, app, retriever, eps)


def submit_ask(ctx: AskContext, question: Question | str, mode: Mode | str, policy: Policy,
               *, use_cache: bool = True) -> AskTicket:
    """Send one question to the ``interactive`` queue (after checking a worker consumes it)."""
    if isinstance(question, str):
        text = check_question(question, "", ctx.settings.max_question_chars)
        question = Question(id=question_id_for(text), text=text, source="<command line>")
    else:
        check_question(question.text, question.source or "",
                       ctx.settings.max_question_chars)
    modes = parse_modes(str(mode))
    _require_interactive_worker(ctx.app, ctx.store)
    manifest = _ask_manifest(ctx.settings, question, modes, policy, ctx.endpoints, ctx.retriever,
                             eager=False, use_cache=use_cache)
    return AskTicket(manifest.run_id, _submit(ctx.store, manifest, question, ctx.app))


def poll_pauses(first_s: float = 0.02, factor: float = 1.5, most_s: float = 0.25) -> Iterator[float]:
    """Pauses between polls for a question's row: short first (most answers are quick),
    longer later, so a slow answer costs few Redis reads."""
    pause = first_s
    while True:
        yield pause
        pause = min(pause * factor, most_s)


def wait_for_answer(store: ProducerStore, ticket: AskTicket, timeout_s: float) -> Answer | None:
    """The question's answer, polling until ``timeout_s``; None if it has not come."""
    deadline = time.monotonic() + timeout_s
    for pause in poll_pauses():
        answer = answer_for(store, ticket)
        if answer is not None or time.monotonic() >= deadline:
            return answer
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
    return None


def answer_for(store: ProducerStore, ticket: AskTicket) -> Answer | None:
    """The question's answer once its row exists, else None (one round trip per poll)."""
    pipe = store.client.pipeline(transaction=False)
    pipe.hget(keys.rows_key(ticket.run_id), ticket.job_id)
    pipe.get(keys.detail_key(ticket.run_id, ticket.job_id))
    raw, detail = pipe.execute()
    if raw is None:
        return None
    row = Row.model_validate_json(raw)
    if detail is None and not row.cache_hit and not row.error:
        # The worker stores the full record just after the row: give it a moment.
        time.sleep(0.02)
        detail = store.client.get(keys.detail_key(ticket.run_id, ticket.job_id))
    record = JobRecord.model_validate_json(detail) if detail else None
    return Answer(row=row, record=record)


_interactive_seen_at = 0.0  # monotonic time a heartbeat last showed an interactive worker
HEARTBEAT_TRUST_S = 2.0  # one flush interval: a worker seen this recently is taken as alive


def _require_interactive_worker(app: Any, store: ProducerStore | None = None) -> None:
    # The workers' heartbeats (worker/metrics.py) answer in one round trip; Celery's
    # inspect waits for its whole timeout, so it is asked only when no heartbeat says so.
    global _interactive_seen_at
    if store is not None:
        if time.monotonic() - _interactive_seen_at < HEARTBEAT_TRUST_S:
            return
        if any(keys.INTERACTIVE.queue in w.queues for w in store.live_workers()):
            _interactive_seen_at = time.monotonic()
            return
    replies = app.control.inspect(timeout=1.5).active_queues() or {}
    if not any(q.get("name") == keys.INTERACTIVE.queue for qs in replies.values() for q in qs):
        raise QfarmError(
            "no worker is consuming the interactive queue; start one with: "
            "celery -A worker worker -Q interactive -P threads -c 8  (or use --eager)"
        )


def _fetch(store: ProducerStore, run_id: str, job_id: str) -> Answer:
    raw = store.client.hget(keys.rows_key(run_id), job_id)
    if raw is None:
        raise QfarmError(f"run {run_id}: the job produced no row; see the worker log")
    detail = store.client.get(keys.detail_key(run_id, job_id))
    record = JobRecord.model_validate_json(detail) if detail else None
    return Answer(row=Row.model_validate_json(raw), record=record)


def open_local_retriever(settings: Settings, *, progress: bool = True) -> Any:
    """The retriever this process will use; builds the embedded default index if needed.

    An embedded index with a damaged page is refused here, before any job runs.
    """
    from worker.retrieval import ensure_default_index, open_retriever
    from worker.retrieval.embedded import EmbeddedRetriever, check_index_pages

    if settings.retriever == Backend.EMBEDDED and settings.index_path is None:
        ensure_default_index(settings, progress=progress)
    retriever = open_retriever(settings)
    if isinstance(retriever, EmbeddedRetriever):
        check_index_pages(retriever.path, retriever.describe().get("corpus"))
    return retriever


def eager_services(settings: Settings, retriever: Any) -> tuple[Any, ProducerStore]:
    """In-process services for eager runs: Celery eager mode and an in-memory Redis."""
    import fakeredis  # only eager runs need it

    from worker.celery_app import configure_app
    from worker.services import Services, install_services
    from worker.store import WorkerStore

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    configure_app(settings, eager=True)
    svc = Services(settings=settings, store=WorkerStore(client), worker_name="eager",
                   retriever_factory=lambda: retriever)
    install_services(svc)
    return svc, ProducerStore(client)


def require_endpoints_for_workers(settings: Settings) -> None:
    if not settings.endpoints:
        raise ConfigError(
            "QFARM_LLM_ENDPOINTS is not set: distributed runs need the workers' LLM endpoints "
            "(e.g. QFARM_LLM_ENDPOINTS=http://gpu1:8000; start a simulator with `qfarm sim --port 8000`), "
            "or run with --eager"
        )

