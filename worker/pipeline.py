"""The pipeline as plain functions: preflight → retrieve → prompt → generate → verify → row.

Each stage takes the job record and returns a copy with its part added; none
of them knows about Celery, so the eager path, the distributed path and the
tests all call the same code. A stage that fails puts its error in the record
(``record.error``) instead of raising: a failed job becomes a row, never a
crashed sweep.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, wait
from typing import Protocol, cast

from qfarm.common import profiles
from qfarm.common.errors import QfarmError, ServiceError, TransientServiceError
from qfarm.common.grounding.gold import match_gold
from qfarm.common.grounding.grammars import answer_grammar, max_claims_for
from qfarm.common.grounding.names import TitleSet
from qfarm.common.grounding.preflight import rejected_verification, run_preflight
from qfarm.common.grounding.prompts import STOP, build_prompt
from qfarm.common.grounding.rows import build_row
from qfarm.common.grounding.sidecar import assess_answerability, demote_for_missed_evidence
from qfarm.common.grounding.verify import verify_answer
from qfarm.common.jobs import is_ask_run
from qfarm.common.logs import log_context
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


def _with_timing(
    record: JobRecord, update: dict[str, object] | None = None, **timings: float | None
) -> JobRecord:
    """The record with ``update``'s fields and these timings: one copy of it, not one a part."""
    return record.model_copy(
        update={**(update or {}), "timings": record.timings.model_copy(update=timings)}
    )


# Preflight depends only on the question, mode, policy and model profile (and the rule
# tables): the n samples of a question x mode share one result (a frozen model, so sharing
# it is safe). Keyed by the policy's JSON, which names every field's value, and by the
# profile table's identity; bounded by a reset, as a process sees a few runs' questions
# at a time.
_PREFLIGHT_MEMO_SIZE = 1024
_preflight_memo: dict[tuple[str, str, str, str, int, str], Preflight] = {}


def _preflight(job: Job, titles: TitleSet | None) -> Preflight:
    key = (job.question.text, job.mode.value, job.policy.model_dump_json(), job.model_profile_id,
           id(profiles.MODEL_PROFILES), titles.digest if titles else "")
    found = _preflight_memo.get(key)
    if found is None:
        if len(_preflight_memo) >= _PREFLIGHT_MEMO_SIZE:
            _preflight_memo.clear()
        found = _preflight_memo[key] = run_preflight(
            job.question.text, job.mode, job.policy, job.model_profile_id, titles
        )
    return found


def preflight_stage(record: JobRecord, titles: TitleSet | None = None) -> JobRecord:
    """Classify and cap; ``titles`` (the index's titles, when it has them) mark names."""
    job = record.job
    pre = _preflight(job, titles)
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
    samples of one question) share one search. Each job's ``retrieval_ms`` is its own
    share: the batch's search time divided by the distinct questions it searched, plus
    its own prompt fitting (not the whole batch's search, which a bundle of many
    questions would otherwise give every one of its jobs).
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
            ms = round(_ms_since(t0) / len(texts), 3)
            for i in members:
                failed = records[i].failed(ErrorKind.RETRIEVAL, str(exc))
                out[i] = _with_timing(failed, retrieval_ms=ms)
            continue
        search_ms = _ms_since(t0) / len(texts)
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
    return _with_timing(record, {"retrieval": retrieval}, retrieval_ms=ms)


def sampling_for(record: JobRecord) -> Sampling:
    """The job's sampling parameters, with its answer grammar when ``structured_output`` is on:
    built from the blocks its prompt shows and the claims its contract admits."""
    job = record.job
    grammar = None
    if job.policy.structured_output:
        preflight = record.preflight
        # The blocks the prompt shows (the context budget and, for broad questions, the
        # claim cap cut the retrieved list), not every block retrieved.
        evidence = record.retrieval.evidence if record.retrieval else ()
        shown = build_prompt(job.question.text, job.mode, evidence, job.policy, preflight).evidence
        grammar = answer_grammar(
            job.mode,
            [ev.id for ev in shown],
            max_claims=max_claims_for(
                job.policy.claim_lattice_max_claims_per_answer,
                preflight.claim_cap if preflight else None,
                preflight.cap_enforced if preflight else False,
            ),
            max_ids_per_claim=job.policy.max_evidence_ids_per_claim,
        )
    return Sampling(
        temperature=job.policy.temperature,
        max_tokens=job.policy.max_tokens,
        seed=job.seed,
        stop=tuple(STOP),
        grammar=grammar,
        interactive=is_ask_run(job.run_id),
        share_samples=job.policy.share_samples,
        cache=job.response_cache,
    )


def render_prompt(record: JobRecord) -> str:
    """The exact prompt of this job: its question, mode, policy and selected evidence."""
    job = record.job
    evidence = record.retrieval.evidence if record.retrieval else ()
    return build_prompt(job.question.text, job.mode, evidence, job.policy, record.preflight).text


# How often a bundle waiting for its model answers checks whether its run was cancelled.
CANCEL_POLL_S = 0.5


class CancellableGateway(Gateway, Protocol):
    """A gateway whose started prompts can be abandoned (``qfarm.worker.llm.Gateway``)."""

    def submit_many(self, items: list[tuple[str, Sampling, str]]) -> list[Future[Generation]]: ...

    def cancel_many(self, futures: list[Future[Generation]]) -> None: ...


def generation_stage(
    records: Sequence[JobRecord],
    gateway: Gateway,
    *,
    cancelled_runs: Callable[[Sequence[str]], set[str]] | None = None,
) -> list[JobRecord]:
    """The model calls of a bundle: its prompts go to the gateway together, so they are in
    flight at the same time (and share a micro-batch when batching is on). Jobs that
    failed earlier or have no evidence yet pass through untouched.

    With ``cancelled_runs`` (which of these run ids are cancelled) and a gateway that can
    abandon prompts, the bundle checks its run every ``CANCEL_POLL_S`` while answers are
    out: once cancelled, the prompts not answered yet are abandoned and their jobs come
    back failed with ``ErrorKind.CANCELLED`` (no row: the caller counts them). Each job's
    ``llm_ms`` is its own request's time, a failed one's included.
    """
    out = list(records)
    asks = [(i, generation_request(r)) for i, r in enumerate(records)]
    todo = [i for i, item in asks if item is not None]
    if not todo:
        return out
    t0 = time.perf_counter()
    items = [item for _, item in asks if item is not None]
    # The gateway's lines about these requests name their run (a worker serves several).
    with log_context(run_id=one_run_id(records[i] for i in todo)):
        if not hasattr(gateway, "submit_many") or not hasattr(gateway, "cancel_many"):
            for i, result in zip(todo, gateway.generate_many(items), strict=True):
                out[i] = with_generation(records[i], result, t0)
            return out
        cancellable = cast(CancellableGateway, gateway)
        futures = cancellable.submit_many(items)
    ended: dict[Future[Generation], float] = {}

    def settled(future: Future[Generation]) -> None:
        ended.setdefault(future, time.perf_counter())

    for future in futures:
        future.add_done_callback(settled)
    owners = [records[i].job.run_id for i in todo]
    stopped = _await_answers(futures, cancellable, owners, cancelled_runs)
    for i, future in zip(todo, futures, strict=True):
        outcome = _outcome(future)
        if records[i].job.run_id in stopped and not isinstance(outcome, Generation):
            out[i] = records[i].failed(ErrorKind.CANCELLED, "the run was cancelled before "
                                       "the model answered; the request was abandoned")
            continue
        out[i] = with_generation(records[i], outcome, t0, ended=ended.get(future))
    return out


def _await_answers(
    futures: list[Future[Generation]],
    gateway: CancellableGateway,
    owners: list[str],
    cancelled_runs: Callable[[Sequence[str]], set[str]] | None,
) -> set[str]:
    """Wait for every answer (``owners``: each future's run); returns the runs found
    cancelled meanwhile, whose prompts not answered yet were abandoned."""
    pending = set(futures)
    runs = list(dict.fromkeys(owners))
    owner = dict(zip(futures, owners, strict=True))
    stopped: set[str] = set()
    while pending:
        _, pending = wait(pending, timeout=CANCEL_POLL_S if cancelled_runs else None)
        if not pending or cancelled_runs is None or stopped:
            continue
        stopped = cancelled_runs(runs)
        if stopped:
            gateway.cancel_many([f for f in pending if owner[f] in stopped])
    return stopped


def _outcome(future: Future[Generation]) -> Generation | ServiceError | None:
    """A settled future's answer or failure; None when it was cancelled before it started."""
    if future.cancelled():
        return None
    exc = future.exception()
    if exc is None:
        return future.result()
    if isinstance(exc, ServiceError):
        return exc
    raise exc


def one_run_id(records: Iterable[JobRecord]) -> str | None:
    """The run of these records when they share one (a bundle's always do), else None."""
    runs = {r.job.run_id for r in records}
    return runs.pop() if len(runs) == 1 else None


def generation_request(record: JobRecord) -> tuple[str, Sampling, str] | None:
    """What the gateway is asked for this job (prompt, sampling, job id); None when the
    job failed earlier or has no evidence (it passes the generation stage untouched)."""
    if record.retrieval is None or record.error:
        return None
    return render_prompt(record), sampling_for(record), record.job.job_id


def with_generation(
    record: JobRecord,
    result: Generation | ServiceError | None,
    t0: float,
    *,
    ended: float | None = None,
) -> JobRecord:
    """The record with the gateway's answer (or its failure) for a request sent at ``t0``
    (and, for a failure, settled at ``ended``, else now)."""
    if result is None:  # abandoned before it started
        result = TransientServiceError("the request was abandoned before it was sent",
                                       job_id=record.job.job_id)
    if isinstance(result, ServiceError):
        ms = round(((ended if ended is not None else time.perf_counter()) - t0) * 1000.0, 3)
        failed = Generation(
            text="",
            endpoint=result.endpoint,
            attempts=int(getattr(result, "attempts", 1) or 1),
            llm_ms=ms,
        )
        return _with_timing(
            record.failed(ErrorKind.LLM, str(result), generation=failed),
            llm_ms=failed.llm_ms,
        )
    # A model's text is sanitised where the worker receives it: one lone surrogate would
    # otherwise fail every serialisation of the record (and its bundle's message).
    result = result.model_copy(update={"text": replace_lone_surrogates(result.text)})
    return _with_timing(
        record, {"generation": result}, llm_ms=result.llm_ms, ttft_ms=result.ttft_ms
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
    gold: dict[str, object] = {}  # the gold-answer fields, added in one copy
    if job.question.answers:
        in_claims, in_evidence = match_gold(job.question.answers, verification.claims, evidence)
        gold.update(gold_in_claims=in_claims, gold_in_evidence=in_evidence)
    if job.question.answers or job.question.title:
        ranks = judge(job.question, job.question.title, evidence)
        gold.update(
            gold_evidence_rank=ranks.answer_rank,
            article_in_evidence=ranks.article_rank is not None if ranks.has_title else None,
            article_rank=ranks.article_rank,
        )
    if gold:
        verification = verification.model_copy(update=gold)
    answerability = assess_answerability(
        job.question.text,
        answer,
        evidence,
        job.policy,
        record.preflight.quantifier if record.preflight else None,
    )
    verification = demote_for_missed_evidence(verification, answerability, job.policy)
    return _with_timing(
        record, {"verification": verification, "answerability": answerability},
        verify_ms=_ms_since(t0),
    )


# The stages a job is worked on; their sum is its ``total_ms``.
WORK_STAGES = ("retrieval_ms", "llm_ms", "verify_ms")


def own_total_ms(timings: Timings) -> float | None:
    """The job's own time: the sum of its stages' times, None when it reached none."""
    parts = [getattr(timings, key) for key in WORK_STAGES]
    if all(p is None for p in parts):
        return None
    return round(sum(p for p in parts if p is not None), 3)


def finish(record: JobRecord) -> Row:
    """The job's row. ``total_ms`` is the sum of its own stage times (retrieval, LLM,
    verify), never the time from its first stage to its row: on the farm that span holds
    the waits between queues and for the bundle's other jobs (every row of a bundle got
    its bundle's wall time), in process it holds none of those, and a latency table must
    mean the same in both. ``started_at``/``finished_at`` keep the wall-clock span. A job
    that ended before any stage (preflight rejection, a cache hit, an early failure)
    takes that span, which is then its own work only."""
    now = time.time()
    total = own_total_ms(record.timings)
    if total is None and record.started_at is not None:
        total = round((now - record.started_at) * 1000.0, 3)
    record = _with_timing(record, {"finished_at": now}, total_ms=total)
    return build_row(record)

