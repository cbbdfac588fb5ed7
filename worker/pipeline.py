"""The pipeline as plain functions: preflight → retrieve → prompt → generate → verify → row.

Each stage takes the job record and returns a copy with its part added; none
of them knows about Celery, so the eager path, the distributed path and the
tests all call the same code. A stage that fails puts its error in the record
(``record.error``) instead of raising: a failed job becomes a row, never a
crashed sweep.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from qfarm.common import profiles
from qfarm.common.errors import QfarmError, ServiceError
from qfarm.common.grounding.gold import match_gold
from qfarm.common.grounding.preflight import rejected_verification, run_preflight
from qfarm.common.grounding.prompts import STOP, build_prompt
from qfarm.common.grounding.rows import build_row
from qfarm.common.grounding.sidecar import assess_answerability
from qfarm.common.grounding.verify import verify_answer
from qfarm.common.models import (
    Evidence,
    Generation,
    Job,
    JobRecord,
    Preflight,
    Retrieval,
    Row,
    Sampling,
    Timings,
)
from qfarm.common.retrieval.evaluation import judge
from qfarm.common.text import replace_lone_surrogates
from qfarm.common.vocab import ErrorKind
from qfarm.worker.retrieval.base import Retriever


class Gateway(Protocol):
    """What the pipeline needs of ``qfarm.worker.llm.Gateway`` (tests pass canned ones)."""

    def generate_many(
        self, items: list[tuple[str, Sampling, str]]
    ) -> list[Generation | ServiceError]:
        """Several prompts at once, results in input order; failures returned, not raised."""
        ...


def _ms_since(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


def begin(job: Job, *, worker: str | None = None) -> JobRecord:
    now = time.time()
    wait = None
    if job.enqueued_at is not None:
        wait = round(max(0.0, now - job.enqueued_at) * 1000.0, 3)
    return JobRecord(job=job, worker=worker, started_at=now, timings=Timings(queue_wait_ms=wait))


def _with_timing(record: JobRecord, **timings: float | None) -> JobRecord:
    return record.model_copy(update={"timings": record.timings.model_copy(update=timings)})


# Preflight depends only on the question, mode, policy and model profile (and the rule
# tables): the n samples of a question x mode share one result (a frozen model, so sharing
# it is safe). Keyed by the policy's JSON, which names every field's value, and by the
# profile table's identity; bounded by a reset, as a process sees a few runs' questions
# at a time.
_PREFLIGHT_MEMO_SIZE = 1024
_preflight_memo: dict[tuple[str, str, str, str, int], Preflight] = {}


def _preflight(job: Job) -> Preflight:
    key = (job.question.text, job.mode.value, job.policy.model_dump_json(), job.model_profile_id,
           id(profiles.MODEL_PROFILES))
    found = _preflight_memo.get(key)
    if found is None:
        if len(_preflight_memo) >= _PREFLIGHT_MEMO_SIZE:
            _preflight_memo.clear()
        found = _preflight_memo[key] = run_preflight(
            job.question.text, job.mode, job.policy, job.model_profile_id
        )
    return found


def preflight_stage(record: JobRecord) -> JobRecord:
    job = record.job
    pre = _preflight(job)
    record = record.model_copy(update={"preflight": pre})
    if pre.rejected:
        # Reject-broad: no retrieval and no model call; the verdict is decided here.
        record = record.model_copy(update={"verification": rejected_verification()})
    return record


def retrieval_stage(records: Sequence[JobRecord], retriever: Retriever) -> list[JobRecord]:
    """Retrieve evidence for a bundle and keep the blocks that fit each mode's context cap.

    The prompt text itself is rebuilt (deterministically) where it is sent, so
    the messages between stages carry the evidence once, not twice.

    One ``search_many`` per distinct search: jobs that ask the same question with the same search settings (the modes and
    samples of one question) share one search. Each job's ``retrieval_ms`` is
    what it waited for its evidence: the shared search plus its own prompt fitting.
    """
    out = list(records)
    groups: dict[tuple[int, float], list[int]] = {}
    for i, record in enumerate(records):
        policy = record.job.policy
        groups.setdefault((policy.top_k, policy.title_boost), []).append(i)
    for (top_k, title_boost), members in groups.items():
        texts = list(dict.fromkeys(records[i].job.question.text for i in members))
        t0 = time.perf_counter()
        try:
            found = retriever.search_many(texts, top_k=top_k, title_boost=title_boost)
            version = retriever.index_version()
        except QfarmError as exc:
            ms = _ms_since(t0)
            for i in members:
                failed = records[i].failed(ErrorKind.RETRIEVAL, str(exc))
                out[i] = _with_timing(failed, retrieval_ms=ms)
            continue
        search_ms = _ms_since(t0)
        hits = dict(zip(texts, found, strict=True))
        for i in members:
            out[i] = _fit_evidence(
                records[i], hits[records[i].job.question.text], retriever.backend, version, search_ms
            )
    return out


def _fit_evidence(
    record: JobRecord, hits: Sequence[Evidence], backend: str, version: str, search_ms: float
) -> JobRecord:
    job = record.job
    t0 = time.perf_counter()
    built = build_prompt(job.question.text, job.mode, hits, job.policy, record.preflight)
    ms = round(search_ms + _ms_since(t0), 3)
    retrieval = Retrieval(
        evidence=built.evidence, backend=backend, index_version=version, retrieval_ms=ms
    )
    return _with_timing(record.model_copy(update={"retrieval": retrieval}), retrieval_ms=ms)


def sampling_for(job: Job) -> Sampling:
    response_format = None
    if job.policy.structured_output and job.mode.value == "claim_lattice":
        from qfarm.common.grounding.schemas import claim_lattice_response_format

        response_format = claim_lattice_response_format()
    return Sampling(
        temperature=job.policy.temperature,
        max_tokens=job.policy.max_tokens,
        seed=job.seed,
        stop=tuple(STOP),
        response_format=response_format,
    )


def render_prompt(record: JobRecord) -> str:
    """The exact prompt of this job: its question, mode, policy and selected evidence."""
    job = record.job
    evidence = record.retrieval.evidence if record.retrieval else ()
    return build_prompt(job.question.text, job.mode, evidence, job.policy, record.preflight).text


def generation_stage(records: Sequence[JobRecord], gateway: Gateway) -> list[JobRecord]:
    """The model calls of a bundle: its prompts go to the gateway together, so they are in
    flight at the same time (and share a micro-batch when batching is on). Jobs that
    failed earlier or have no evidence yet pass through untouched."""
    out = list(records)
    todo = [i for i, r in enumerate(records) if r.retrieval is not None and not r.error]
    if not todo:
        return out
    t0 = time.perf_counter()
    results = gateway.generate_many(
        [(render_prompt(records[i]), sampling_for(records[i].job), records[i].job.job_id) for i in todo]
    )
    for i, result in zip(todo, results, strict=True):
        out[i] = with_generation(records[i], result, t0)
    return out


def generation_request(record: JobRecord) -> tuple[str, Sampling, str] | None:
    """What the gateway is asked for this job (prompt, sampling, job id); None when the
    job failed earlier or has no evidence (it passes the generation stage untouched)."""
    if record.retrieval is None or record.error:
        return None
    return render_prompt(record), sampling_for(record.job), record.job.job_id


def with_generation(record: JobRecord, result: Generation | ServiceError, t0: float) -> JobRecord:
    """The record with the gateway's answer (or its failure) for a request sent at ``t0``."""
    if isinstance(result, ServiceError):
        failed = Generation(
            text="",
            endpoint=result.endpoint,
            attempts=int(getattr(result, "attempts", 1) or 1),
            llm_ms=_ms_since(t0),
        )
        return _with_timing(
            record.failed(ErrorKind.LLM, str(result), generation=failed),
            llm_ms=failed.llm_ms,
        )
    # A model's text is sanitised where the worker receives it: one lone surrogate would
    # otherwise fail every serialisation of the record (and its bundle's message).
    result = result.model_copy(update={"text": replace_lone_surrogates(result.text)})
    return _with_timing(
        record.model_copy(update={"generation": result}), llm_ms=result.llm_ms, ttft_ms=result.ttft_ms
    )


def verification_stage(record: JobRecord) -> JobRecord:
    """Verify the answer, run the answerability sidecar and the gold-answer check."""
    if record.error or record.generation is None or record.verification is not None:
        return record
    job = record.job
    t0 = time.perf_counter()
    evidence = record.retrieval.evidence if record.retrieval else ()
    answer = record.generation.text
    verification = verify_answer(
        answer,
        question=job.question.text,
        mode=job.mode,
        evidence=evidence,
        policy=job.policy,
        preflight=record.preflight,
    )
    if job.question.answers:
        in_claims, in_evidence = match_gold(job.question.answers, verification.claims, evidence)
        verification = verification.model_copy(
            update={"gold_in_claims": in_claims, "gold_in_evidence": in_evidence}
        )
    if job.question.answers or job.question.title:
        ranks = judge(job.question, job.question.title, evidence)
        verification = verification.model_copy(update={
            "gold_evidence_rank": ranks.answer_rank,
            "article_in_evidence": ranks.article_rank is not None if ranks.has_title else None,
            "article_rank": ranks.article_rank,
        })
    answerability = assess_answerability(
        job.question.text,
        answer,
        evidence,
        job.policy,
        record.preflight.quantifier if record.preflight else None,
    )
    return _with_timing(
        record.model_copy(update={"verification": verification, "answerability": answerability}),
        verify_ms=_ms_since(t0),
    )


def finish(record: JobRecord) -> Row:
    now = time.time()
    total = None
    if record.started_at is not None:
        total = round((now - record.started_at) * 1000.0, 3)
    record = _with_timing(record.model_copy(update={"finished_at": now}), total_ms=total)
    return build_row(record)

