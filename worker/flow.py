"""What each queue's task does with a message: store checks around the pipeline stages.

Stage split (queues by role): ``retrieve`` (CPU: preflight, cache lookup,
retrieval, prompt), ``generate`` (I/O: the LLM calls; threads pool),
``verify`` (CPU: verification, sidecar, row write). ``interactive`` runs all
stages of one job in one task so single queries never wait behind a sweep.

Sweep messages carry a *bundle* of jobs (``QFARM_BUNDLE_SIZE``, consecutive jobs
of one run): each stage handles the bundle with one round trip to Redis for its
checks and one for its writes, searches once per distinct question, sends the
bundle's prompts to the gateway together and forwards the survivors as one
message. A job is still the unit of failure: an error in one job becomes that
job's row, and its bundle-mates go on.

The retrieve, generate and interactive handlers check the run's cancel flag and
whether each job already has a row before doing work (the same round trip also
counts the jobs into the stage); verify writes without a check, since the row
write itself is set-if-absent: redelivery or duplicate messages can never
produce a second row. Jobs a cancel stops (at a stage's entry, or inside the
generate step while their requests wait: ``stages``) get no row and join the run's
set of cancelled jobs, so rows + cancelled jobs = the planned jobs.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TypeVar

from pydantic_core import PydanticSerializationError

from qfarm.common import keys
from qfarm.common.errors import ManifestError
from qfarm.common.grounding.names import TitleSet
from qfarm.common.jobs import is_ask_run, job_from_ref
from qfarm.common.logs import job_fields
from qfarm.common.models import Job, JobRecord, JobRef, Row, Timings, Usage
from qfarm.common.policy import governance_policy_hash
from qfarm.common.text import replace_lone_surrogates
from qfarm.common.vocab import ErrorKind
from qfarm.worker import metrics, pipeline, stages, tracing
from qfarm.worker.broker import REDIS_DOWN
from qfarm.worker.encoding import parse_records, payload_items, storable, unserialisable_error
from qfarm.worker.services import Services

log = logging.getLogger("qfarm.worker")

Send = Callable[[keys.Stage, list[JobRecord]], None]
# A job that ends at a link, its record and its row: at the first link's entry (failed its
# preflight, refused by reject-broad, served from the cache), failed in a step that ends
# failed jobs, or finished at the last link.
Ended = tuple[JobRecord, Row]
T = TypeVar("T")

# Redis away (broker.REDIS_DOWN): the task leaves its message for redelivery instead of
# acknowledging work whose result or next stage was not stored.


def _load_job(ref_data: dict, svc: Services) -> Job | None:
    ref = JobRef.model_validate(ref_data)
    try:
        manifest = svc.store.manifest(ref.run_id)
    except ManifestError as exc:
        # Every job of the run would fail the same way: a run-level error the producer
        # and `qfarm status` show, not a row per job nor a redelivery loop.
        log.error("%s; dropping job %s", exc, ref.qid)
        svc.store.set_run_error(ref.run_id, str(exc))
        return None
    if manifest is None:
        log.error("run %s has no manifest in Redis (expired or deleted); dropping job", ref.run_id)
        return None
    return job_from_ref(ref, manifest)


def _each(payloads: Iterable[dict], svc: Services, parse: Callable[[dict], T | None]) -> list[T]:
    """Parse each payload of a bundle; a payload that cannot be parsed ends as an error row."""
    out = []
    for payload in payloads:
        try:
            item = parse(payload)
        except REDIS_DOWN:
            raise
        except Exception as exc:
            log.debug("unusable job in a bundle; writing an error row", exc_info=True)
            internal_error_row(payload, svc, exc)
            continue
        if item is not None:
            out.append(item)
    return out


def _safely(record: JobRecord, step: Callable[[JobRecord], JobRecord]) -> JobRecord:
    """Run one job's stage; a bug in it becomes that job's error, not its bundle's."""
    try:
        return step(record)
    except REDIS_DOWN:
        raise
    except Exception as exc:
        return failed(record, exc)


def failed(record: JobRecord, exc: Exception) -> JobRecord:
    """``record`` ending with ``exc`` as its error (a bug, not a service failure); also the
    in-process runner's (worker/runner.py)."""
    # One line per failed job (its row carries the error); the traceback only at DEBUG,
    # so an eager sweep's terminal is not flooded with them.
    # The row's write logs the error once, with its kind (``write_rows``); here only the
    # traceback, for whoever debugs.
    log.debug("job %s failed (%s: %s)", record.job.job_id, type(exc).__name__, exc,
              exc_info=True, extra=job_fields(record.job.run_id, record.job.job_id))
    if isinstance(exc, PydanticSerializationError):
        return record.model_copy(update={"error": unserialisable_error(exc),
                                         "error_kind": ErrorKind.INTERNAL})
    return record.failed(ErrorKind.INTERNAL, replace_lone_surrogates(f"{type(exc).__name__}: {exc}"))


def _send(send: Send, stage: keys.Stage, records: list[JobRecord], svc: Services) -> None:
    """Forward a bundle; should it not go as a whole (a record that cannot be
    serialised), each job goes alone and the one that cannot becomes its error row."""
    try:
        send(stage, records)
    except REDIS_DOWN:
        raise
    except Exception as exc:
        if len(records) == 1:
            write_rows([pipeline.finish(failed(records[0], exc))], svc)
            return
        for record in records:
            _send(send, stage, [record], svc)


def _live(
    items: Sequence[T], job_of: Callable[[T], Job], svc: Services, stage: keys.Stage
) -> list[T]:
    """The items whose run is not cancelled and whose job has no row yet (one round trip a run)."""
    by_run: dict[str, list[T]] = {}
    for item in items:
        by_run.setdefault(job_of(item).run_id, []).append(item)
    live: list[T] = []
    for run_id, group in by_run.items():
        ids = [job_of(i).job_id for i in group]
        cancelled, has_row = svc.store.enter_stage(
            run_id, ids, stage, [job_of(i).attempt for i in group])
        if cancelled:
            log.info("run %s cancelled; skipping %d job(s)", run_id, len(group))
            svc.store.add_cancelled_jobs(
                run_id, [j for j, done in zip(ids, has_row, strict=True) if not done]
            )
            continue
        live.extend(i for i, done in zip(group, has_row, strict=True) if not done)
    return live


def _cache_digest(job: Job, svc: Services) -> str | None:
    if not job.use_cache:
        return None
    retriever = svc.retriever
    return keys.result_cache_digest(
        question=job.question.text,
        mode=job.mode.value,
        sample_index=job.sample_index,
        governance_hash=governance_policy_hash(job.policy),
        model=job.model,
        index_version=retriever.index_version(),
        retriever_config={"backend": retriever.backend, "index": svc.settings.es_index},
    )


def row_from_cache(cached: dict, record: JobRecord) -> Row:
    """A cached result re-issued for this run: same verdict, this job's identity."""
    job = record.job
    now = time.time()
    total = round((now - (record.started_at or now)) * 1000.0, 3)
    cached.update(
        run_id=job.run_id,
        job_id=job.job_id,
        question=job.question.text,
        question_id=job.question.id,
        question_scope=job.question.scope,
        sample_index=job.sample_index,
        cache_hit=True,
        # A whole row re-issued: no model reply was asked for, cached or not.
        response_cache_hit=None,
        model_ms_saved=None,
        # The sidecar does not run on the cache-hit path: the cached verdict is re-issued as it was.
        answerability=None,
        attempts=0,
        usage=Usage().model_dump(),
        error=None,
        worker=record.worker,
        started_at=record.started_at,
        finished_at=now,
        timings=Timings(queue_wait_ms=record.timings.queue_wait_ms, total_ms=total).model_dump(),
        answer=cached.get("answer") if job.keep_answers else None,
        retried_errors=list(job.retried_errors),
    )
    return Row.model_validate(cached)


def _with_cache_key(record: JobRecord, svc: Services) -> JobRecord:
    try:
        digest = _cache_digest(record.job, svc)
    except Exception as exc:  # an unusable retriever is a row with its error
        return record.failed(ErrorKind.RETRIEVAL, str(exc))
    if digest == record.cache_key:  # no cache for this job: nothing to add, nothing to copy
        return record
    return record.model_copy(update={"cache_key": digest})


def _is_finished(record: JobRecord) -> bool:
    """Failed, or decided by reject-broad: no further stage."""
    return bool(record.error) or record.verification is not None


def _start_many(
    jobs: Sequence[Job], svc: Services
) -> tuple[list[JobRecord], list[tuple[JobRecord, Row]]]:
    """Preflight and cache lookup for a bundle.

    Returns the records that need retrieval, and (record, row) for the jobs already
    finished: failed, decided by reject-broad, or served from the cache.
    """
    titles = _titles(svc)
    records = [
        _safely(pipeline.begin(job, worker=svc.worker_name), partial(_preflight, titles=titles))
        for job in jobs
    ]
    done = [(r, pipeline.finish(r)) for r in records if _is_finished(r)]
    records = [_with_cache_key(r, svc) for r in records if not _is_finished(r)]
    done += [(r, pipeline.finish(r)) for r in records if r.error]
    records = [r for r in records if not r.error]
    keyed = [(r, r.cache_key) for r in records if r.cache_key]
    hits: dict[str, dict] = {}
    cached_many = svc.store.get_cached_many([key for _, key in keyed])
    for (record, _), cached in zip(keyed, cached_many, strict=True):
        if cached is not None:
            hits[record.job.job_id] = cached
    if keyed:
        metrics.count_cache(len(hits), len(keyed) - len(hits))
    done += [(r, _safely_row(r, hits[r.job.job_id])) for r in records if r.job.job_id in hits]
    return [r for r in records if r.job.job_id not in hits], done


def _titles(svc: Services) -> TitleSet | None:
    """The index's titles, for backends that can list them (the embedded index).

    A retriever that cannot open gives None here: its jobs fail at the cache key with
    the retrieval error, which is where that error belongs.
    """
    try:
        title_set = getattr(svc.retriever, "title_set", None)
        found = title_set() if callable(title_set) else None
        return found if isinstance(found, TitleSet) else None
    except Exception:
        log.debug("no title set from the retriever", exc_info=True)
        return None


def _preflight(record: JobRecord, titles: TitleSet | None = None) -> JobRecord:
    """The preflight, once the job's question is known to serialise: one that does not (a
    lone surrogate that got past loading) fails here, in eager runs too, before it is
    searched for or sent to a model (an endpoint answering it 500 would count against
    that endpoint for every job)."""
    record.job.question.model_dump_json()  # PydanticSerializationError: the job's error
    return pipeline.preflight_stage(record, titles)


def _safely_row(record: JobRecord, cached: dict) -> Row:
    try:
        return row_from_cache(cached, record)
    except Exception as exc:  # a cache entry from an older row schema: an error, not a crash
        log.debug("unusable cache entry for job %s", record.job.job_id, exc_info=True)
        return pipeline.finish(record.failed(ErrorKind.INTERNAL, f"cache entry: {exc}"))


def write_rows(
    rows: Sequence[Row], svc: Services, cache_keys: Sequence[str | None] = (),
    records: Sequence[JobRecord] = (),
) -> int:  # fmt: skip
    """Write each row once; results of fresh successful jobs go into the cache. Returns rows written.

    Each row is serialised on its own first (``qfarm.worker.encoding.storable``): one that cannot
    be fails only its job, as an error row, and its bundle-mates' rows are written as they are.
    ``records``, when given, are the rows' records: a question asked alone keeps its own
    beside its row (``_keep_asked``).
    """
    stored = [storable(row) for row in rows]
    rows = [row for row, _ in stored]
    jsons = [raw for _, raw in stored]
    wrote = svc.store.write_rows(rows, jsons)
    tracing.job_spans(rows, jsons, wrote, svc.store.manifest)
    metrics.count_rows(rows, wrote)
    for row, w in zip(rows, wrote, strict=True):
        if w and row.error:
            log_error_row(row)
    keys_ = list(cache_keys) or [None] * len(rows)
    svc.store.put_cached_many([
        (key, raw)
        for row, raw, key, w in zip(rows, jsons, keys_, wrote, strict=True)
        if w and key and not row.error and not row.cache_hit
    ])
    if records:
        _keep_asked(records, rows, wrote, svc)
    return sum(wrote)


def _keep_asked(
    records: Sequence[JobRecord], rows: Sequence[Row], wrote: Sequence[bool], svc: Services
) -> None:
    """A question asked alone (``qfarm ask``, POST /v1/ask) keeps its whole record beside its
    row for a day: its claims, evidence and sidecar output are what the audit line shows.
    Not a record that cannot be serialised: its row says why."""
    for record, row, w in zip(records, rows, wrote, strict=True):
        if not w or not is_ask_run(row.run_id):
            continue
        kept = record.model_copy(update={"prompt": None, "cache_hit": row.cache_hit,
                                         "timings": row.timings, "finished_at": row.finished_at})
        with contextlib.suppress(PydanticSerializationError):
            svc.store.put_detail(kept)


def log_error_row(row: Row) -> None:
    """The one line for a job that ended in an error: logged where its row is written
    (once: the write is set-if-absent), with its kind, not once per layer it crossed."""
    log.warning("job %s ended with an error row [%s]: %s", row.job_id,
                row.error_kind.value if row.error_kind else "unknown", row.error,
                extra=job_fields(row.run_id, row.job_id, row.endpoint, row.error_kind))


# What a link takes: job refs (the first link's message), a later link's message (one
# string, ``encoding.dump_records``), or, in process, the records themselves.
Payload = str | list[dict] | list[JobRecord]


def handle_stage(
    stage: keys.Stage, payload: Payload, svc: Services, send: Send,
    *, counted_as: keys.Stage | None = None,
) -> None:  # fmt: skip
    """One link of the chain (``qfarm.worker.stages.CHAIN``) on a bundle: enter, step,
    leave. Every driver runs this: the Celery task of every link, the interactive task
    (``handle_job``) and the in-process runner's links but the model's, whose halves
    it runs itself (``enter_stage``, the step's ``ask``/``settle``, ``leave``).
    ``counted_as``: the stage the first link counts its jobs into, when they came
    through another queue (the interactive one)."""
    step = stages.step_for(stage)
    records, ended = enter_stage(step, payload, svc, counted_as=counted_as)
    if records or ended:
        leave(step, run_step(step, records, svc), ended, svc, send)


def enter_stage(
    step: stages.Step, payload: Payload, svc: Services, *, counted_as: keys.Stage | None = None
) -> tuple[list[JobRecord], list[Ended]]:
    """A link's entry. Returns the records for its step and the jobs that end here.

    A link that ``loads_jobs`` takes job refs: it loads the jobs, checks them in,
    runs the preflight and serves cache hits. Later links take records and check them
    in (``enter``)."""
    if step.loads_jobs:
        refs: list[dict] = payload  # type: ignore[assignment]
        loaded = _each(refs, svc, lambda d: _load_job(d, svc))
        jobs = _live(loaded, lambda j: j, svc, counted_as or step.stage)
        if not jobs:
            return [], []
        return _start_many(jobs, svc)
    if isinstance(payload, str):
        return enter(load_records(payload, svc), step, svc), []
    return enter(payload, step, svc), []  # type: ignore[arg-type]


def enter(records: list[JobRecord], step: stages.Step, svc: Services) -> list[JobRecord]:
    """A later link's entry check (cancelled run, job already has a row), also the
    in-process runner's (worker/runner.py)."""
    if not step.checks_entry or not records:
        return records
    return _live(records, lambda r: r.job, svc, step.stage)


def run_step(step: stages.Step, records: list[JobRecord], svc: Services) -> list[JobRecord]:
    """The link's step on a bundle; a job that breaks it fails alone."""
    if not records:
        return records
    started = time.time()
    records = _safely_many(records, lambda rs: step.run(rs, svc))
    tracing.stage_spans(step.stage.name, records, started, time.time())
    return records


def leave(
    step: stages.Step, records: list[JobRecord], ended: list[Ended], svc: Services, send: Send
) -> None:
    """What leaves a link: the rows of jobs that end here, the rest to the next link."""
    nxt = stages.after(step)
    if nxt is None:  # the last link: every job's row (fresh results go into the cache)
        ended = ended + [(r, _finished(r)) for r in records]
        _write_ended(ended, svc, [None] * (len(ended) - len(records)) + [r.cache_key for r in records])
        return
    if step.ends_failed:
        ended = ended + [(r, _finished(r)) for r in records if r.error]
        records = [r for r in records if not r.error]
    if ended:
        _write_ended(ended, svc)
    if records:
        _send(send, nxt.stage, records, svc)


def _write_ended(ended: list[Ended], svc: Services, cache_keys: Sequence[str | None] = ()) -> None:
    write_rows([row for _, row in ended], svc, cache_keys, [record for record, _ in ended])


def _finished(record: JobRecord) -> Row:
    """A job's row; a bug building it is that job's error row, not its whole bundle's.

    The error row is built from the bare job: what broke may be in a part the record
    gained later (its evidence, answer or verification)."""
    try:
        return pipeline.finish(record)
    except Exception as exc:
        return pipeline.finish(failed(bare(record), exc))


def bare(record: JobRecord) -> JobRecord:
    """``record`` cut back to its job and timing, for an error row: what broke may be in a
    part it gained later (its evidence, answer or verification). Also the in-process
    runner's (worker/runner.py)."""
    return JobRecord(job=record.job, worker=record.worker,
                     started_at=record.started_at, timings=record.timings)  # fmt: skip


def load_records(payload: str, svc: Services) -> list[JobRecord]:
    """A bundle's records; should one be unusable, the others still run and it ends as a row."""
    try:
        return parse_records(payload)
    except (ValueError, IndexError):
        return _each(payload_items(payload), svc, JobRecord.model_validate)


def _safely_many(
    records: list[JobRecord], step: Callable[[list[JobRecord]], list[JobRecord]]
) -> list[JobRecord]:
    """A bundle step; should it fail as a whole, each job is retried alone so one bad job
    cannot take its bundle-mates down with it."""
    try:
        return step(records)
    except REDIS_DOWN:
        raise
    except Exception as exc:
        if len(records) == 1:
            return [failed(records[0], exc)]
        log.warning("a bundle step failed; running its %d jobs one by one", len(records))
        return [_safely(r, lambda one: step([one])[0]) for r in records]


def handle_job(ref_data: dict, svc: Services) -> None:
    """All links of one job in one task (the interactive queue, so a single question never
    waits behind a sweep): each link as it takes a sweep's bundle (``handle_stage``), the
    next one run here instead of sent; the job is counted in as interactive."""

    def next_link(stage: keys.Stage, records: list[JobRecord]) -> None:
        handle_stage(stage, records, svc, next_link)

    handle_stage(stages.CHAIN[0].stage, [ref_data], svc, next_link, counted_as=keys.INTERACTIVE)


def internal_error_rows(payload: str | list[dict], svc: Services, exc: BaseException) -> None:
    for item in payload_items(payload):
        internal_error_row(item, svc, exc)


def internal_error_row(payload: dict, svc: Services, exc: BaseException) -> None:
    """Last resort for a bug: the job still ends as a row with its error."""
    try:
        if "job" in payload:
            record = JobRecord.model_validate(payload)
        else:
            job = _load_job(payload, svc)
            if job is None:
                return
            record = pipeline.begin(job, worker=svc.worker_name)
        # The write is set-if-absent: a job that already has a row keeps it; one whose
        # row cannot be serialised is written with its text made valid (``write_rows``).
        err = record.failed(ErrorKind.INTERNAL,
                            replace_lone_surrogates(f"{type(exc).__name__}: {exc}"))
        write_rows([pipeline.finish(err)], svc)
    except REDIS_DOWN:
        raise  # the row is not stored: the message must be redelivered, not acknowledged
    except Exception:  # nothing more can be done; the task log has both
        log.exception("could not write the error row")
