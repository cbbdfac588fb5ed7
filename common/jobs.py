"""Expanding a sweep into jobs with deterministic ids and seeds."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence

from pydantic import ValidationError

from qfarm.common.errors import InputError, ManifestError, first_validation_error
from qfarm.common.models import ALL_MODES, Job, JobRef, Manifest, Mode, Question, RunSettings
from qfarm.common.policy import Policy
from qfarm.common.profiles import profile_id_for_model
from qfarm.common.traces import job_traceparent


def parse_modes(text: str | Sequence[str]) -> list[Mode]:
    items = text.split(",") if isinstance(text, str) else list(text)
    modes: list[Mode] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        try:
            mode = Mode(item)
        except ValueError:
            names = ", ".join(m.value for m in ALL_MODES)
            raise InputError(f"unknown mode {item!r}; choose from {names}") from None
        if mode not in modes:
            modes.append(mode)
    if not modes:
        raise InputError("no modes given; e.g. --modes quote,claim_lattice_pointer,claim_lattice")
    return modes


# A single question (`qfarm ask`, POST /v1/ask) is a run of one job whose id starts with
# this: lists (the viewer's, GET /v1/runs, the compare picker) keep them apart from sweeps,
# and the LLM gateway serves its request ahead of sweep requests
# (docs/llm.md, 'Interactive requests first').
ASK_RUN_PREFIX = "ask-"


def is_ask_run(run_id: str) -> bool:
    return run_id.startswith(ASK_RUN_PREFIX)


def make_job_id(question_id: str, mode: Mode | str, sample_index: int) -> str:
    """Deterministic from (question id, mode, sample index): resubmission is idempotent."""
    raw = f"{question_id}\x1f{Mode(mode).value}\x1f{sample_index}"
    return hashlib.sha256(raw.encode()).hexdigest()[:20]


def seed_for(
    question_id: str, mode: Mode | str, sample_index: int, *, shared: bool = False
) -> int:
    """A job's seed. Each sample has its own hash, unless the policy's ``share_samples`` is
    on: then sample i is seed ``shared_seed_base(question, mode) + i``, the seed vLLM gives
    choice i of a request with the base seed and ``n`` > i (its parallel sampling seeds
    child j with seed + j), so a sample's answer does not depend on how samples were
    grouped into requests (docs/llm.md, 'Shared samples')."""
    if shared:
        return shared_seed_base(question_id, mode) + sample_index
    raw = f"seed\x1f{question_id}\x1f{Mode(mode).value}\x1f{sample_index}"
    return int.from_bytes(hashlib.sha256(raw.encode()).digest()[:4], "big") & 0x7FFFFFFF


def shared_seed_base(question_id: str, mode: Mode | str) -> int:
    """The seed of sample 0 of (question, mode) under ``share_samples``: 30 bits, so the
    base plus any sample index stays a positive 31-bit integer."""
    raw = f"shared-seed\x1f{question_id}\x1f{Mode(mode).value}"
    return int.from_bytes(hashlib.sha256(raw.encode()).digest()[:4], "big") & 0x3FFFFFFF


def check_samples(n: int) -> None:
    """Refuse a sample count below 1 (``-n``; the API's ``n``), before anything starts."""
    if n < 1:
        raise InputError(f"-n {n}: the number of samples per question and mode must be at least 1")


def expand_jobs(
    run_id: str,
    questions: Sequence[Question],
    modes: Sequence[Mode],
    n: int,
    policy: Policy,
    *,
    model: str,
    keep_answers: bool = False,
    use_cache: bool = True,
) -> Iterator[Job]:
    """Yield question × mode × n jobs, lazily so 100k-job sweeps stay small in memory."""
    settings = RunSettings(policy=policy, model=model, model_profile_id=profile_id_for_model(model),
                           keep_answers=keep_answers, use_cache=use_cache)
    return plan_jobs(run_id, questions, modes, n, settings)


def plan_jobs(run_id: str, questions: Sequence[Question], modes: Sequence[Mode], n: int,
              settings: RunSettings) -> Iterator[Job]:
    """``expand_jobs`` for a run whose settings are known (its manifest is a ``RunSettings``)."""
    check_samples(n)
    shared = settings.run_settings()
    for q in questions:
        for mode in modes:
            for i in range(n):
                yield Job(
                    run_id=run_id,
                    job_id=make_job_id(q.id, mode, i),
                    question=q,
                    mode=mode,
                    sample_index=i,
                    seed=seed_for(q.id, mode, i, shared=settings.policy.share_samples),
                    **shared,
                )


def bundle_label(first: Job, size: int) -> str:
    """How a bundle is named in task listings (Flower, logs): its run, first job, and how many more."""
    more = f" +{size - 1}" if size > 1 else ""
    return f"{first.run_id}/{first.job_id}{more}"


def ref_for(job: Job) -> JobRef:
    """The compact queue message for a job."""
    return JobRef(
        run_id=job.run_id,
        qid=job.question.id,
        q=job.question.text,
        mode=job.mode,
        i=job.sample_index,
        answers=job.question.answers,
        t=job.enqueued_at,
        scope=job.question.scope,
        title=job.question.title,
        r=job.retried_errors or None,
    )


def job_from_ref(ref: JobRef, manifest: Manifest) -> Job:
    """Rebuild the full Job from its queue message and the run's manifest (which says
    whether the run is traced live: a sampled job gets its trace context here, the same
    on every delivery of its message)."""
    job_id = make_job_id(ref.qid, ref.mode, ref.i)
    return Job(
        run_id=ref.run_id,
        job_id=job_id,
        question=Question(
            id=ref.qid, text=ref.q, answers=ref.answers, scope=ref.scope, title=ref.title
        ),
        mode=ref.mode,
        sample_index=ref.i,
        seed=seed_for(ref.qid, ref.mode, ref.i, shared=manifest.policy.share_samples),
        enqueued_at=ref.t,
        retried_errors=ref.r or (),
        traceparent=job_traceparent(manifest, job_id, len(ref.r or ())),
        **manifest.run_settings(),
    )


def manifest_from_json(run_id: str, raw: str | bytes) -> Manifest:
    """A run's manifest as stored in Redis, or a ManifestError naming the bad field."""
    try:
        return Manifest.model_validate_json(raw)
    except ValidationError as exc:
        where, msg = first_validation_error(exc, "manifest")
        raise ManifestError(
            f"run {run_id}: workers cannot read its manifest ({where}: {msg}); "
            "no job of it can run. Start a new sweep with valid --policy values, with "
            "workers of the same qfarm version as the producer"
        ) from exc


def bundles(jobs: Iterable[Job], size: int) -> Iterator[list[Job]]:
    """Consecutive jobs in lists of at most ``size`` (the last may be shorter); lazily. The
    samples and modes of a question are consecutive in a plan, so a bundle's jobs share their
    search (one message a bundle on the farm, one hand-over in the in-process runner).

    Under the policy's ``share_samples`` a bundle ends before the samples of a question x
    mode it would cut (unless they alone fill it): the samples a bundle holds together are
    one request (docs/llm.md, 'Shared samples')."""
    bundle: list[Job] = []
    for job in jobs:
        if len(bundle) >= size:  # held back (share_samples) to see whether job continues a group
            cut = _group_start(bundle) if _same_group(bundle[-1], job) else len(bundle)
            yield bundle[:cut]
            bundle = bundle[cut:]
        bundle.append(job)
        if len(bundle) >= size and not job.policy.share_samples:
            yield bundle
            bundle = []
    if bundle:
        yield bundle


def _same_group(a: Job, b: Job) -> bool:
    return (a.question.id, a.mode) == (b.question.id, b.mode)


def _group_start(bundle: list[Job]) -> int:
    """Where the trailing samples of one question x mode begin, or the bundle's length when
    they are all of it (a group larger than a bundle is cut)."""
    start = len(bundle)
    while start > 0 and _same_group(bundle[start - 1], bundle[-1]):
        start -= 1
    return start or len(bundle)
