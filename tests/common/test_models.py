"""Records survive a JSON round trip exactly (they cross process boundaries as JSON)."""

from __future__ import annotations

import json

from qfarm.common.grounding.rows import build_row
from qfarm.common.jobs import expand_jobs, job_from_ref, ref_for
from qfarm.common.models import (
    Answerability,
    CandidateSpan,
    Confidence,
    Evidence,
    Generation,
    JobRecord,
    Mode,
    Question,
    Retrieval,
    Usage,
    Verdict,
    Verification,
    ViolationKind,
)
from qfarm.common.policy import build_policy


def a_job():
    q = Question(id="q1", text="Who painted the Mona Lisa?", answers=("Leonardo da Vinci",))
    policy = build_policy({"top_k": 5, "quantifier_guard_modes": ["claim_lattice"]})
    return next(iter(expand_jobs("r1", [q], [Mode.QUOTE], 1, policy, model="m")))


def a_record() -> JobRecord:
    ev = Evidence(id="E1", doc_id="d", chunk_id="d#0", title="Mona Lisa", text="The Mona Lisa …",
                  score=3.5, offset_start=0, offset_end=15)
    return JobRecord(
        job=a_job(),
        retrieval=Retrieval(evidence=(ev,), index_version="v1", retrieval_ms=1.5),
        prompt="<|im_start|>…",
        generation=Generation(text='"The Mona Lisa" [E1]', endpoint="http://x", attempts=2,
                              usage=Usage(prompt_tokens=10, completion_tokens=5)),
        verification=Verification(n_claims=1, n_verified=1, ratio=1.0),
        answerability=Answerability(
            diagnostic_version="answerability-v2", confidence_class=Confidence.WEAK,
            triggered_clauses=("denial", "extraction_shape", "candidates_in_evidence"),
            denial_pattern_matched="not mentioned", extraction_cue_matched=None,
            extraction_shape="plural", answer_type="title_like", subject_tokens=("mona", "lisa"),
            candidate_count=2, threshold=Confidence.WEAK,
            missed_answer_candidate_spans=(
                CandidateSpan(evidence_id="E1", kind="quoted_string", text="The Mona Lisa",
                              offset_start=0, offset_end=13),
            ),
            denial_patterns_version="d1", extraction_cues_version="c1",
        ),
    )


def test_job_record_round_trips_through_json():
    record = a_record()
    wire = json.dumps(record.model_dump(mode="json"))
    assert JobRecord.model_validate(json.loads(wire)) == record


def test_row_round_trips_and_has_every_documented_field():
    row = build_row(a_record())
    again = type(row).model_validate_json(row.model_dump_json())
    assert again == row
    documented_fields = (
        "run_id job_id question question_id mode sample_index verdict label ratio n_claims "
        "n_verified violation_kinds format_collapsed answer_brackets answer_pointer_count "
        "answer_chars_with_brackets raw_meaningful_line_count quantifier_intensity "
        "quantifier_matched_token quantifier_explicit_count scope_bound_hint claim_cap_applied "
        "model_profile_id endpoint evidence_ids top_doc_titles answerability "
        "verifier_policy_hash governance_policy_hash cache_hit attempts error timings usage "
        "worker started_at finished_at"
    ).split()
    dumped = row.model_dump(mode="json")
    assert set(documented_fields) <= set(dumped)
    assert set(dumped["timings"]) == {
        "queue_wait_ms", "retrieval_ms", "llm_ms", "ttft_ms", "verify_ms", "total_ms"
    }
    assert set(dumped["usage"]) == {"prompt_tokens", "completion_tokens", "estimated"}
    assert "llm_request" in dumped  # the request that answered (None: no model call)
    assert dumped["answerability"]["answerability_confidence"] == "weak"
    assert dumped["answer"] is None  # not kept unless --keep-answers


def test_queue_message_rebuilds_the_same_job():
    from qfarm.common.models import Manifest
    from qfarm.common.policy import governance_policy_hash, verifier_policy_hash

    job = a_job()
    manifest = Manifest(
        run_id="r1", created_at=0.0, question_file="f", question_file_digest="d", n_questions=1,
        modes=(Mode.QUOTE,), n=1, n_jobs=1, policy=job.policy,
        verifier_policy_hash=verifier_policy_hash(job.policy),
        governance_policy_hash=governance_policy_hash(job.policy), model="m",
        model_profile_id=job.model_profile_id,
    )
    ref = ref_for(job)
    wire = json.loads(json.dumps(ref.model_dump(mode="json", exclude_none=True)))
    assert job_from_ref(type(ref).model_validate(wire), manifest) == job
    assert len(json.dumps(wire)) < 300


ROW_KEYS = [
    "schema_version", "run_id", "job_id", "question", "question_id", "mode", "sample_index",
    "verdict", "label", "ratio", "n_claims", "n_verified", "violation_kinds", "would_fire_kinds",
    "format_collapsed",
    "answer_brackets", "answer_pointer_count", "answer_chars_with_brackets",
    "raw_meaningful_line_count", "quote_match_layers", "question_scope", "quantifier_intensity",
    "quantifier_matched_token", "quantifier_explicit_count", "scope_bound_hint",
    "claim_cap_applied", "claim_cap_profile", "claim_cap_enforced", "model_profile_id",
    "model_profile_key", "model",
    "endpoint", "simulated", "llm_server", "retriever", "index_version", "evidence_ids", "top_doc_titles",
    "top_scores", "evidence_passage_ids", "answerability", "gold_in_claims", "gold_in_evidence", "gold_evidence_rank",
    "article_in_evidence", "article_rank", "verifier_policy_hash", "governance_policy_hash",
    "cache_hit", "attempts", "error", "error_kind", "timings", "usage", "llm_request", "worker", "started_at", "finished_at",
    "answer", "finish_reason", "truncated", "max_tokens_effective",
]


def test_a_row_dumps_its_verification_flat_in_the_rows_key_order():
    kinds = (ViolationKind.FORMAT_COLLAPSED, ViolationKind.LAZY_ANCHOR_DEMOTE, ViolationKind.FORMAT_COLLAPSED)
    ver = Verification(verdict=Verdict.HYBRID, n_claims=2, violation_kinds=kinds, gold_in_claims=True)
    row = build_row(a_record().model_copy(update={"verification": ver}))
    dumped = json.loads(row.model_dump_json())
    assert list(dumped) == ROW_KEYS
    assert (dumped["verdict"], dumped["n_claims"], dumped["gold_in_claims"]) == ("HYBRID", 2, True)
    assert dumped["violation_kinds"] == sorted({k.value for k in kinds})
    assert row.model_dump(mode="json") == dumped
    assert type(row).model_validate(dumped) == row  # read back (the cache path) into its parts


def test_an_unverified_row_writes_its_verification_keys_empty():
    row = build_row(a_record().model_copy(update={"verification": None, "error": "llm: down"}))
    dumped = json.loads(row.model_dump_json())
    assert list(dumped) == ROW_KEYS
    assert dumped["violation_kinds"] == []
    assert all(dumped[k] is None for k in ("verdict", "ratio", "quote_match_layers", "article_rank"))
    again = type(row).model_validate(dumped)
    assert again.grading is None and again.gold is None and again == row


def test_a_manifest_derives_its_job_count_hashes_and_profile_and_gives_jobs_its_settings():
    from qfarm.common.models import Manifest
    from qfarm.common.policy import governance_policy_hash, verifier_policy_hash

    policy = build_policy({"top_k": 5})
    man = Manifest(run_id="r1", created_at=1.0, question_file="q.jsonl", question_file_digest="d",
                   n_questions=3, modes=(Mode.QUOTE, Mode.CLAIM_LATTICE), n=2, policy=policy,
                   model="Hermes-3-Llama-3.1-8B", keep_answers=True)
    assert man.n_jobs == 12 and man.model_profile_id == "hermes-3-8b"
    assert man.verifier_policy_hash == verifier_policy_hash(policy)
    assert man.governance_policy_hash == governance_policy_hash(policy)
    # Read back, nothing is derived again: the file's values stand.
    again = Manifest.model_validate({**man.model_dump(mode="json"), "n_jobs": 5})
    assert again.n_jobs == 5
    job = job_from_ref(ref_for(a_job()), man)
    assert (job.policy, job.model, job.model_profile_id, job.keep_answers, job.use_cache) == \
        (policy, man.model, "hermes-3-8b", True, True)
