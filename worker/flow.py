"""What each queue's task does with a message: store checks around the pipeline stages.

Stage split (queues by role): ``retrieve`` (CPU: preflight, cache lookup,
retrieval, prompt), ``generate`` (I/O: the LLM call; threads pool),
``verify`` (CPU: verification, sidecar, row write). ``interactive`` runs all
stages in one task so single queries never wait behind a sweep.

The retrieve, generate and interactive handlers check the run's cancel flag and
whether the job already has a row before doing work (one Redis round trip that
also counts the job into the stage); verify writes without a check, since the
row write itself is set-if-absent: redelivery or duplicate messages can never
produce a second row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from common import keys
from common.jobs import job_from_ref
from common.models import Job, JobRecord, JobRef, Row, Timings, Usage
from common.policy import governance_policy_hash
from worker import pipeline
from worker.services import Services

log = logging.getLogger("qfarm.worker")

Send = Callable[[str, JobRecord], None]


def _load_job(ref_data: dict, svc: Services) -> Job | None:
    ref = JobRef.model_validate(ref_data)
    manifest = svc.store.manifest(ref.run_id)
    if manifest is None:
        log.error("run %s has no manifest in Redis (expired or deleted); dropping job", ref.run_id)
        return None
    return job_from_ref(ref, manifest)


def _should_skip(job: Job, svc: Services, stage: str) -> bool:
    cancelled, has_row = svc.store.enter_stage(job.run_id, job.job_id, stage)
    if cancelled:
        log.info("run %s cancelled; skipping job %s", job.run_id, job.job_id)
    return cancelled or has_row


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
        sample_index=job.sample_index,
        cache_hit=True,
        answerability=None,  # the sidecar does not run on the cache-hit path (SPEC §8)
        attempts=0,
        usage=Usage().model_dump(),
        error=None,
        worker=record.worker,
        started_at=record.started_at,
        finished_at=now,
        timings=Timings(queue_wait_ms=record.timings.queue_wait_ms, total_ms=total).model_dump(),
        answer=cached.get("answer") if job.keep_answers else None,
    )
    return Row.model_validate(cached)


def write_row(row: Row, svc: Services, cache_key: str | None = None) -> bool:
    wrote = svc.store.write_row(row)
    if wrote and cache_key and not row.error and not row.cache_hit:
        svc.store.put_cached(cache_key, row)
    return wrote


def _start(job: Job, svc: Services) -> tuple[JobRecord, str | None, Row | None]:
    """Preflight and cache lookup; returns a finished row when no further stage is needed."""
    record = pipeline.preflight_stage(pipeline.begin(job, worker=svc.worker_name))
    if record.verification is not None:  # reject-broad decided it
        return record, None, pipeline.finish(record)
    try:
        digest = _cache_digest(job, svc)
    except Exception as exc:  # an unusable retriever is a row with its error
        return record, None, pipeline.finish(record.model_copy(update={"error": f"retrieval: {exc}"}))
    if digest:
        cached = svc.store.get_cached(digest)
        if cached is not None:
            return record, digest, row_from_cache(cached, record)
    return record.model_copy(update={"cache_key": digest}), digest, None


def handle_retrieve(ref_data: dict, svc: Services, send: Send) -> None:
    job = _load_job(ref_data, svc)
    if job is None or _should_skip(job, svc, "retrieve"):
        return
    record, digest, row = _start(job, svc)
    if row is not None:
        write_row(row, svc)
        return
    record = pipeline.retrieval_stage(record, svc.retriever)
    if record.error:
        write_row(pipeline.finish(record), svc)
        return
    send("generate", record)


def handle_generate(record_data: dict, svc: Services, send: Send) -> None:
    record = JobRecord.model_validate(record_data)
    if _should_skip(record.job, svc, "generate"):
        return
    record = pipeline.generation_stage(record, svc.gateway)
    send("verify", record)


def handle_verify(record_data: dict, svc: Services) -> None:
    # No pre-check: verification is cheap and the row write is set-if-absent anyway.
    record = JobRecord.model_validate(record_data)
    record = pipeline.verification_stage(record)
    write_row(pipeline.finish(record), svc, record.cache_key)


def handle_job(ref_data: dict, svc: Services) -> None:
    """All stages in one task (the interactive queue)."""
    job = _load_job(ref_data, svc)
    if job is None or _should_skip(job, svc, "interactive"):
        return
    record, digest, row = _start(job, svc)
    if row is None:
        record = pipeline.retrieval_stage(record, svc.retriever)
        record = pipeline.generation_stage(record, svc.gateway)
        record = pipeline.verification_stage(record)
        row = pipeline.finish(record)
        record = record.model_copy(update={"timings": row.timings, "finished_at": row.finished_at})
    else:
        record = record.model_copy(update={"cache_hit": True, "timings": row.timings})
    if write_row(row, svc, digest):
        # Single queries keep their claims and sidecar output for the audit line.
        svc.store.put_detail(record.model_copy(update={"prompt": None}))


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
        # The write is set-if-absent: a job that already has a row keeps it.
        err = record.model_copy(update={"error": f"internal: {type(exc).__name__}: {exc}"})
        svc.store.write_row(pipeline.finish(err))
    except Exception:  # noqa: BLE001 - nothing more can be done; the task log has both
        log.exception("could not write the error row")
