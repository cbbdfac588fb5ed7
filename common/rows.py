"""Turning a finished ``JobRecord`` into its telemetry ``Row`` (docs/grounding.md, 'The row')."""

from __future__ import annotations

from common.models import Answerability, AnswerabilitySummary, JobRecord, Row, Usage
from common.policy import governance_policy_hash, verifier_policy_hash


def summarize_answerability(result: Answerability | None) -> AnswerabilitySummary | None:
    if result is None:
        return None
    return AnswerabilitySummary(
        answerability_fired=True,
        answerability_confidence=result.confidence_class,
        answerability_candidate_count=result.candidate_count,
    )


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
        verdict=ver.verdict if ver else None,
        label=ver.label if ver else None,
        ratio=ver.ratio if ver else None,
        n_claims=ver.n_claims if ver else None,
        n_verified=ver.n_verified if ver else None,
        violation_kinds=sorted({k.value for k in ver.violation_kinds}) if ver else [],
        format_collapsed=ver.format_collapsed if ver else None,
        answer_brackets=ver.answer_brackets if ver else None,
        answer_pointer_count=ver.answer_pointer_count if ver else None,
        answer_chars_with_brackets=ver.answer_chars_with_brackets if ver else None,
        raw_meaningful_line_count=ver.raw_meaningful_line_count if ver else None,
        quote_match_layers=ver.quote_match_layers if ver else None,
        question_scope=job.question.scope,
        quantifier_intensity=q.intensity if q else None,
        quantifier_matched_token=q.matched_token if q else None,
        quantifier_explicit_count=q.explicit_count if q else None,
        scope_bound_hint=q.scope_bound_hint if q else None,
        claim_cap_applied=pre.claim_cap if pre else None,
        claim_cap_profile=pre.claim_cap_profile if pre else None,
        claim_cap_enforced=pre.cap_enforced if pre else None,
        model_profile_id=job.model_profile_id,
        model=job.model,
        endpoint=gen.endpoint if gen else None,
        simulated=gen.simulated if gen else None,
        retriever=ret.backend if ret else None,
        index_version=ret.index_version if ret else None,
        evidence_ids=[e.id for e in evidence],
        top_doc_titles=list(dict.fromkeys(e.title for e in evidence))[:5],
        top_scores=[round(e.score, 4) for e in evidence],
        answerability=summarize_answerability(record.answerability),
        gold_in_claims=ver.gold_in_claims if ver else None,
        gold_in_evidence=ver.gold_in_evidence if ver else None,
        gold_evidence_rank=ver.gold_evidence_rank if ver else None,
        article_in_evidence=ver.article_in_evidence if ver else None,
        article_rank=ver.article_rank if ver else None,
        verifier_policy_hash=verifier_policy_hash(job.policy),
        governance_policy_hash=governance_policy_hash(job.policy),
        cache_hit=record.cache_hit,
        attempts=gen.attempts if gen else 0,
        error=record.error,
        timings=record.timings,
        usage=gen.usage if gen else Usage(),
        worker=record.worker,
        started_at=record.started_at,
        finished_at=record.finished_at,
        answer=gen.text if (gen and job.keep_answers) else None,
        finish_reason=gen.finish_reason if gen else None,
        truncated=gen.truncated if gen and not record.error else None,
        max_tokens_effective=gen.max_tokens_effective if gen else None,
    )
