"""Turning a finished ``JobRecord`` into its telemetry ``Row`` (docs/grounding.md, 'The row')."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from qfarm.common.models import (
    Answerability,
    AnswerabilitySummary,
    GoldCheck,
    Grading,
    JobRecord,
    Row,
    Usage,
    Verification,
)
from qfarm.common.policy import governance_policy_hash, verifier_policy_hash


def summarize_answerability(result: Answerability | None) -> AnswerabilitySummary | None:
    if result is None:
        return None
    return AnswerabilitySummary(
        answerability_fired=True,
        answerability_confidence=result.confidence_class,
        answerability_candidate_count=result.candidate_count,
    )


Part = TypeVar("Part", Grading, GoldCheck)


def _part(part: type[Part], ver: Verification | None) -> Part | None:
    """The row's copy of one part of the verification (which subclasses each part)."""
    if ver is None:
        return None
    fields = ver.model_dump(include=set(part.model_fields))
    for key in ("violation_kinds", "would_fire_kinds"):  # each kind once, in a stable order
        if key in fields:
            fields[key] = sorted(set(getattr(ver, key)))
    return part.model_validate(fields)


def build_row(record: JobRecord) -> Row:
    """Flatten a record; fields a stage did not reach stay None."""
    job = record.job
    pre, ret, gen, ver = record.preflight, record.retrieval, record.generation, record.verification
    q = pre.quantifier if pre else None
    evidence = ret.evidence if ret else ()
    return Row(
        run_id=job.run_id,
        job_id=job.job_id,
        question=job.question.text,
        question_id=job.question.id,
        mode=job.mode,
        sample_index=job.sample_index,
        grading=_part(Grading, ver),
        question_scope=job.question.scope,
        quantifier_intensity=q.intensity if q else None,
        quantifier_matched_token=q.matched_token if q else None,
        quantifier_explicit_count=q.explicit_count if q else None,
        scope_bound_hint=q.scope_bound_hint if q else None,
        claim_cap_applied=pre.claim_cap if pre else None,
        claim_cap_profile=pre.claim_cap_profile if pre else None,
        claim_cap_enforced=pre.cap_enforced if pre else None,
        model_profile_id=job.model,  # the configured model id, verbatim
        model_profile_key=job.model_profile_id,  # the key of the cap profile it resolved to
        model=job.model,
        endpoint=gen.endpoint if gen else None,
        simulated=gen.simulated if gen else None,
        llm_server=gen.server if gen else None,
        retriever=ret.backend if ret else None,
        index_version=ret.index_version if ret else None,
        evidence_ids=[e.id for e in evidence],
        top_doc_titles=list(dict.fromkeys(e.title for e in evidence))[:5],
        top_scores=[round(e.score, 4) for e in evidence],
        evidence_passage_ids=[e.chunk_id for e in evidence],
        answerability=summarize_answerability(record.answerability),
        gold=_part(GoldCheck, ver),
        verifier_policy_hash=verifier_policy_hash(job.policy),
        governance_policy_hash=governance_policy_hash(job.policy),
        cache_hit=record.cache_hit,
        attempts=gen.attempts if gen else 0,
        error=record.error,
        error_kind=record.error_kind,
        timings=record.timings,
        usage=gen.usage if gen else Usage(),
        llm_request=gen.request if gen else None,
        worker=record.worker,
        started_at=record.started_at,
        finished_at=record.finished_at,
        answer=gen.text if (gen and job.keep_answers) else None,
        finish_reason=gen.finish_reason if gen else None,
        truncated=gen.truncated if gen and not record.error else None,
        max_tokens_effective=gen.max_tokens_effective if gen else None,
        response_cache_hit=gen.response_cache_hit if gen else None,
        model_ms_saved=gen.model_ms_saved if gen else None,
        retried_errors=list(job.retried_errors),
    )


def row_attempt(row: dict[str, Any]) -> int:
    """Which attempt wrote a row: how many earlier attempts of its job ended in error."""
    before = row.get("retried_errors")
    return len(before) if isinstance(before, list) else 0


def is_error_row(row: dict[str, Any]) -> bool:
    return bool(row.get("error"))


def is_replaceable(raw: bytes | str | dict[str, Any] | None, attempt: int) -> bool:
    """Whether attempt ``attempt`` of a job may replace its row ``raw``: only an error row
    of an earlier attempt gives way (the rule the row write script applies in Redis)."""
    if raw is None:
        return True
    try:
        row = raw if isinstance(raw, dict) else json.loads(raw)
    except ValueError:
        return False
    return isinstance(row, dict) and is_error_row(row) and row_attempt(row) < attempt


def retry_kinds(row: dict[str, Any]) -> tuple[str, ...]:
    """The ``retried_errors`` a retry of error row ``row`` carries: the row's own, then
    the kind of its error (its ``error_kind``, else the word before the colon)."""
    before = row.get("retried_errors")
    kinds = [str(k) for k in before] if isinstance(before, list) else []
    kind = row.get("error_kind") or str(row.get("error") or "").split(":", 1)[0].strip()
    return (*kinds, str(kind) or "unknown")
