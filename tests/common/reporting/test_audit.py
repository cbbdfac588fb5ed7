"""The audit line and the claim listing of ``qfarm ask`` (docs/grounding.md, 'Verification')."""

from __future__ import annotations

from qfarm.common.grounding.preflight import rejected_verification, run_preflight
from qfarm.common.grounding.verify import verify_answer
from qfarm.common.models import (
    Claim,
    Evidence,
    Generation,
    Job,
    JobRecord,
    Label,
    Mode,
    Question,
    Timings,
    Verdict,
    Verification,
    ViolationKind,
)
from qfarm.common.policy import build_policy
from qfarm.common.reporting.audit import (
    format_latency,
    render_audit_block,
    render_audit_line,
    render_claims,
)


def make_record(mode: Mode = Mode.CLAIM_LATTICE_POINTER, **fields: object) -> JobRecord:
    job = Job(
        run_id="r1",
        job_id="j1",
        question=Question(id="q1", text="Who were the Beatles?"),
        mode=mode,
    )
    return JobRecord(job=job, **fields)  # type: ignore[arg-type]


def test_audit_line_shape_with_tails_and_latency() -> None:
    ver = Verification(
        n_claims=4,
        n_verified=3,
        ratio=0.75,
        verdict=Verdict.HYBRID,
        label=Label.ANCHOR_WARRANTED,
        tails=("title mismatch", "broad cap 8"),
    )
    line = render_audit_line(make_record(verification=ver, timings=Timings(total_ms=1234.0)))
    assert (
        line
        == "ANCHOR-WARRANTED · via claim_lattice_pointer · title mismatch, broad cap 8  3/4  1.2 s"
    )


def test_audit_line_without_tails_leaves_the_segment_out() -> None:
    ver = Verification(
        n_claims=2, n_verified=2, ratio=1.0, verdict=Verdict.STRICT, label=Label.EVIDENCE_WARRANTED
    )
    line = render_audit_line(
        make_record(Mode.QUOTE, verification=ver, timings=Timings(total_ms=340.4))
    )
    assert line == "EVIDENCE-WARRANTED · via quote  2/2  340 ms"


def test_a_pointer_linked_row_the_broad_cap_trimmed_names_both_labels() -> None:
    kinds = (ViolationKind.BROAD_QUANTIFIER_CAP_APPLIED, ViolationKind.TOO_MANY_CLAIMS)
    ver = Verification(
        verdict=Verdict.HYBRID, label=Label.POINTER_LINKED, violation_kinds=kinds, n_claims=2
    )
    line = render_audit_line(make_record(verification=ver))
    assert line.startswith("BROAD-CAPPED · POINTER-LINKED · via claim_lattice_pointer")
    plain = ver.model_copy(update={"violation_kinds": (ViolationKind.WARRANT_MISSING,)})
    assert render_audit_line(make_record(verification=plain)).startswith("POINTER-LINKED · via")


def test_audit_line_names_the_simulator_and_cache_hits() -> None:
    ver = Verification(
        n_claims=1, n_verified=1, ratio=1.0, verdict=Verdict.STRICT, label=Label.EVIDENCE_WARRANTED
    )
    gen = Generation(text="x", simulated=True)
    line = render_audit_line(make_record(verification=ver, generation=gen, cache_hit=True))
    assert line.endswith("· cache hit, simulated  1/1  -")


def test_audit_line_of_a_failed_job() -> None:
    line = render_audit_line(
        make_record(error="llm: endpoint unreachable", timings=Timings(total_ms=5.0))
    )
    assert line == "ERROR · via claim_lattice_pointer · llm: endpoint unreachable  5 ms"


def test_audit_line_of_a_rejected_broad_question() -> None:
    policy = build_policy({"quantifier_reject_broad": True})
    pre = run_preflight("Tell me about jazz", Mode.CLAIM_LATTICE_POINTER, policy, "default")
    record = make_record(
        preflight=pre, verification=rejected_verification(), timings=Timings(total_ms=2.0)
    )
    assert (
        render_audit_line(record)
        == "BROAD-REJECTED · via claim_lattice_pointer · broad rejected  0/0  2 ms"
    )
    lines = render_claims(record)
    assert len(lines) == 1 and "--allow-broad" in lines[0]


def test_a_rejected_broad_question_prints_the_preflight_header_and_the_reject_audit_line() -> None:
    policy = build_policy({"quantifier_reject_broad": True})
    pre = run_preflight(
        "Which songs did all rock bands record?", Mode.CLAIM_LATTICE_POINTER, policy, "hermes-3-8b"
    )
    record = make_record(
        preflight=pre, verification=rejected_verification(), timings=Timings(total_ms=2.0)
    )
    assert render_audit_block(record) == [
        "BROAD-QUANTIFIER PREFLIGHT REJECTED · scope unbounded",
        'UNGROUNDED · via BROAD_QUANTIFIER_REJECTED · ALL ("all") · cap was 8  0/0  2 ms (preflight)',
    ]
    (advice,) = render_claims(record)
    assert "Narrow the question" in advice and "--allow-broad" in advice


def _answered(question: str, **overrides: object) -> list[str]:
    policy = build_policy(overrides)
    pre = run_preflight(question, Mode.CLAIM_LATTICE_POINTER, policy, "hermes-3-8b")
    ver = Verification(
        n_claims=1, n_verified=1, ratio=1.0, verdict=Verdict.STRICT, label=Label.EVIDENCE_WARRANTED
    )
    return render_audit_block(
        make_record(preflight=pre, verification=ver, timings=Timings(total_ms=5.0))
    )


def test_an_answered_broad_question_prints_the_preflight_line_above_its_audit_line() -> None:
    lines = _answered("List all members of the Beatles", quantifier_guard_apply_caps=True)
    assert lines == [
        'BROAD-QUANTIFIER PREFLIGHT · ALL ("list all") · scope bounded · cap 8 enforced',
        "EVIDENCE-WARRANTED · via claim_lattice_pointer  1/1  5 ms",
    ]
    reported = _answered("List all members of the Beatles")
    assert reported[0].endswith("· cap 8 not enforced")
    exploratory = _answered("Tell me about jazz", allow_broad=True)
    assert exploratory[0] == (
        'BROAD-QUANTIFIER PREFLIGHT · OPEN_REQUEST ("tell me about") · scope unbounded · '
        "cap 12 not enforced · allow-broad: EXPLORATORY"
    )


def test_the_dry_run_names_the_kinds_it_would_fire_on_the_preflight_line() -> None:
    policy = build_policy({})
    pre = run_preflight("Tell me about jazz", Mode.CLAIM_LATTICE_POINTER, policy, "hermes-3-8b")
    ver = Verification(
        verdict=Verdict.STRICT,
        label=Label.EVIDENCE_WARRANTED,
        would_fire_kinds=(ViolationKind.BROAD_QUANTIFIER_SCOPE_UNBOUND,),
    )
    head, narrowing, line = render_audit_block(make_record(preflight=pre, verification=ver))
    assert head.endswith("· cap 5 not enforced · dry run, would fire: broad unbounded")
    assert narrowing.startswith("  no bound on its scope: the answer is a sample")
    assert line.startswith("EVIDENCE-WARRANTED · via claim_lattice_pointer")


def test_an_unbounded_question_answered_in_default_mode_gets_the_narrowing_message() -> None:
    lines = _answered("List all the songs about rain")
    assert len(lines) == 3 and "Narrow the question: name a year, league" in lines[1]
    assert len(_answered("List all members of the Beatles")) == 2  # bounded: no advice
    assert len(_answered("List all the songs about rain", allow_broad=True)) == 2  # EXPLORATORY


def test_no_preflight_line_for_a_narrow_question_or_an_unguarded_mode() -> None:
    assert len(_answered("What is the capital of France?")) == 1
    assert len(_answered("List all members of the Beatles", quantifier_guard_enabled=False)) == 1


def test_audit_line_from_a_real_verification_carries_its_tails() -> None:
    ev = Evidence(
        id="E1",
        doc_id="d",
        chunk_id="d:0",
        title="Liverpool",
        text="Liverpool is known for its football clubs and as the birthplace of the Beatles.",
        score=1.0,
        offset_start=0,
        offset_end=80,
    )
    ver = verify_answer(
        "It is known for its football clubs and as the birthplace. [E1]",
        question="What is the city famous for?",
        mode=Mode.CLAIM_LATTICE_POINTER,
        evidence=[ev],
        policy=build_policy({}),
    )
    line = render_audit_line(make_record(verification=ver, timings=Timings(total_ms=12.0)))
    assert line == "ANCHOR-WARRANTED · via claim_lattice_pointer · title mismatch  1/1  12 ms"


def test_render_claims_marks_verified_ids_problems_and_admission() -> None:
    claims = (
        Claim(
            text="The Beatles formed in Liverpool",
            evidence_ids=("E1", "E3"),
            verified=True,
            anchored=True,
        ),
        Claim(text="Paris is in Germany", evidence_ids=("E2",), problems=("CITATION_MISMATCH",)),
        Claim(text="A quote", evidence_ids=("E1",), verified=True, match_layer="fuzzy"),
        Claim(text="x " * 200, admitted=False, problems=("TOO_MANY_CLAIMS",)),
    )
    ver = Verification(
        n_claims=3,
        n_verified=2,
        ratio=2 / 3,
        verdict=Verdict.HYBRID,
        label=Label.POINTER_LINKED,
        claims=claims,
    )
    lines = render_claims(make_record(verification=ver))
    assert lines[0] == "  ✓ [E1, E3] The Beatles formed in Liverpool"
    assert lines[1] == "  ✗ [E2] Paris is in Germany  (CITATION_MISMATCH)"
    assert lines[2] == "  ✓ [E1] A quote  (fuzzy)"
    assert lines[3].startswith("  ✗ [-] x x") and lines[3].endswith(
        "…  (not admitted, TOO_MANY_CLAIMS)"
    )
    shown = lines[3].removeprefix("  ✗ [-] ").split("  (")[0]
    assert len(shown) == 160


def test_render_claims_without_verification_is_empty() -> None:
    assert render_claims(make_record()) == []


def test_format_latency() -> None:
    assert [format_latency(v) for v in (None, 0.4, 999.4, 1000.0, 61234.0)] == [
        "-",
        "0 ms",
        "999 ms",
        "1.0 s",
        "61.2 s",
    ]
