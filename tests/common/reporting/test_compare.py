"""A/B verdicts: the 5-point floor, the interval, pairing, warnings, mixed effects."""

from __future__ import annotations

from typing import Any

import pytest

from qfarm.common.errors import InputError
from qfarm.common.models import Manifest
from qfarm.common.policy import Policy, build_policy, governance_policy_hash, verifier_policy_hash
from qfarm.common.reporting.compare import (
    METRICS,
    classify_delta,
    compare_metric,
    compare_runs,
    render_compare,
)
from qfarm.common.reporting.phase import cycle_lines, decide_cycle, phase_line, render_cycle
from qfarm.common.reporting.runstats import RunStats, accumulate

STRICT = next(m for m in METRICS if m.key == "strict")
UNGROUNDED = next(m for m in METRICS if m.key == "ungrounded")
RATIO = next(m for m in METRICS if m.key == "ratio")


def manifest(run_id: str, policy: Policy | None = None, **overrides: Any) -> Manifest:
    policy = policy or Policy()
    data: dict[str, Any] = dict(
        run_id=run_id,
        created_at=0.0,
        question_file="bench/questions/general.jsonl",
        question_file_digest="sha256:aaaa",
        n_questions=1,
        modes=("quote", "claim_lattice"),
        n=1,
        n_jobs=0,
        policy=policy,
        verifier_policy_hash=verifier_policy_hash(policy),
        governance_policy_hash=governance_policy_hash(policy),
        model="adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic",
        model_profile_id="hermes-3-8b",
        index_version="idx-1",
    )
    data.update(overrides)
    return Manifest(**data)


def run(
    n_strict: int,
    n: int,
    *,
    mode: str = "quote",
    prefix: str = "q",
    kinds: dict[int, list[str]] | None = None,
) -> RunStats:
    """``n`` questions × 1 sample in ``mode``; questions 0..n_strict-1 are STRICT, the rest UNGROUNDED."""
    rows = (
        {
            **base_row(k, mode, k < n_strict, prefix),
            "violation_kinds": (kinds or {}).get(k, []),
            "gold_in_claims": k < n_strict,
        }
        for k in range(n)
    )
    return accumulate(rows)


def base_row(k: int, mode: str, strict: bool, prefix: str = "q") -> dict[str, Any]:
    return {
        "run_id": "r",
        "job_id": f"{prefix}{k}-{mode}",
        "question": f"question {k}",
        "question_id": f"{prefix}{k}",
        "mode": mode,
        "sample_index": 0,
        "verdict": "STRICT" if strict else "UNGROUNDED",
        "ratio": 1.0 if strict else 0.0,
    }


# --------------------------------------------------------------------------- the verdict rule


@pytest.mark.parametrize(
    ("delta", "low", "high", "verdict"),
    [
        (10.0, 2.0, 18.0, "signal"),
        (-10.0, -18.0, -2.0, "signal"),
        (10.0, -1.0, 21.0, "noise"),  # clears the floor, interval spans zero
        (3.0, 2.0, 4.0, "noise"),  # interval excludes zero, under the floor
        (5.0, 0.5, 9.5, "signal"),  # exactly at the floor clears it
        (4.99, 0.5, 9.5, "noise"),
    ],
)
def test_classify_delta(delta: float, low: float, high: float, verdict: str) -> None:
    assert classify_delta(delta, low, high, floor=5.0) == verdict


def test_ten_points_at_n_300_is_signal_paired_and_unpaired() -> None:
    a, b = run(150, 300), run(180, 300)
    paired = compare_metric(a, b, "quote", STRICT)
    assert paired.delta == pytest.approx(10.0)
    assert paired.method == "paired over 300 questions"
    assert paired.low > 0 and paired.verdict == "signal" and paired.effect == "better"
    # Different question ids: no pairing, Newcombe's interval; still a signal at this n.
    unpaired = compare_metric(a, run(180, 300, prefix="x"), "quote", STRICT)
    assert unpaired.method == "Newcombe (unpaired)"
    assert unpaired.delta == pytest.approx(10.0)
    assert unpaired.verdict == "signal"
    assert unpaired.high - unpaired.low > paired.high - paired.low  # pairing narrows the interval


def test_ten_points_at_n_9_is_noise() -> None:
    a, b = run(4, 9), run(5, 9)  # 44.4% -> 55.6%: clears the floor, but 9 rows say little
    for stats_b in (b, run(5, 9, prefix="x")):
        d = compare_metric(a, stats_b, "quote", STRICT)
        assert d.delta == pytest.approx(100 / 9)
        assert d.low < 0 < d.high
        assert d.verdict == "noise" and d.effect == "—"


@pytest.mark.parametrize("n", [100, 1_000, 10_000])
def test_three_points_is_noise_at_any_n(n: int) -> None:
    a, b = run(n // 2, n), run(n // 2 + 3 * n // 100, n)
    d = compare_metric(a, b, "quote", STRICT)
    assert d.delta == pytest.approx(3.0)
    assert d.verdict == "noise"
    if n == 10_000:
        assert d.low > 0  # real, but under the floor: not worth acting on


def test_lower_is_better_for_ungrounded_rate() -> None:
    d = compare_metric(run(150, 300), run(180, 300), "quote", UNGROUNDED)
    assert d.delta == pytest.approx(-10.0)
    assert d.verdict == "signal" and d.effect == "better"


def test_ratio_metric_paired_and_welch() -> None:
    paired = compare_metric(run(150, 300), run(180, 300), "quote", RATIO)
    assert (paired.a, paired.b) == pytest.approx((0.5, 0.6))
    assert paired.delta == pytest.approx(10.0) and paired.verdict == "signal"
    welch = compare_metric(run(150, 300), run(180, 300, prefix="x"), "quote", RATIO)
    assert welch.method == "Welch (unpaired)" and welch.verdict == "signal"


def test_missing_metric_is_not_applicable() -> None:
    a = accumulate([{"run_id": "r", "job_id": "j", "question": "q", "question_id": "q1", "mode": "quote",
                     "sample_index": 0, "verdict": "STRICT", "ratio": 1.0}])  # fmt: skip
    d = compare_metric(a, a, "quote", next(m for m in METRICS if m.key == "accuracy"))
    assert d.verdict == "n/a" and d.delta is None


# --------------------------------------------------------------------------- whole comparisons


def two_mode_run(
    quote_strict: int, cl_strict: int, n: int, kinds: dict[int, list[str]] | None = None
) -> RunStats:
    stats = run(quote_strict, n, mode="quote")
    for k in range(n):
        stats.add(
            {"run_id": "r", "job_id": f"q{k}-cl", "question": f"question {k}", "question_id": f"q{k}",
             "mode": "claim_lattice", "sample_index": 0,
             "verdict": "STRICT" if k < cl_strict else "UNGROUNDED", "ratio": 1.0 if k < cl_strict else 0.0,
             "violation_kinds": (kinds or {}).get(k, [])}
        )  # fmt: skip
    return stats


def test_mixed_effects_and_policy_change_are_reported() -> None:
    man_a = manifest("A", n_jobs=600)
    man_b = manifest("B", build_policy({"quantifier_reminder_enabled": True}), n_jobs=600)
    a, b = two_mode_run(150, 200, 300), two_mode_run(210, 140, 300)
    cmp = compare_runs(man_a, a, man_b, b)
    assert cmp.policy_changes == {"quantifier_reminder_enabled": (False, True)}
    assert cmp.warnings == []
    strict = {d.mode: d for d in cmp.deltas if d.metric == STRICT}
    assert strict["quote"].effect == "better" and strict["claim_lattice"].effect == "worse"
    assert any(line.startswith("strict-rate (of answered): helps `quote` (+20.0 pp); hurts `claim_lattice` (-20.0 pp)")
               for line in cmp.mixed)  # fmt: skip
    text = render_compare(cmp)
    assert "**Mixed effects: the change helps one mode and hurts another**" in text
    assert "- `quantifier_reminder_enabled`: false → true" in text
    assert "BETTER: `quote` strict-rate (of answered) +20.0 pp" in text
    assert "WORSE: `claim_lattice` strict-rate (of answered) -20.0 pp" in text
    assert "| `quote` | strict-rate (of answered) | 50.0% | 70.0% | +20.0 |" in text


def test_different_question_files_model_and_index_warn() -> None:
    man_a = manifest("A")
    man_b = manifest(
        "B",
        question_file="other.txt",
        question_file_digest="sha256:bbbb",
        model="other-model",
        index_version="idx-2",
    )
    cmp = compare_runs(man_a, run(5, 10), man_b, run(5, 10, prefix="x"))
    joined = "\n".join(cmp.warnings)
    assert (
        "Different question files" in joined
        and "0 question(s) shared, deltas are unpaired" in joined
    )
    assert (
        "Different model: A `adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic` vs B `other-model`"
        in joined
    )
    assert "Different index version: A `idx-1` vs B `idx-2`" in joined
    assert "**Warnings: the runs differ in more than the policy**" in render_compare(cmp)


def test_same_files_and_policy_give_no_warning_but_a_note() -> None:
    cmp = compare_runs(manifest("A"), run(5, 10), manifest("B"), run(5, 10))
    assert cmp.warnings == []
    assert any("share the same policy" in n for n in cmp.notes)
    assert cmp.signals == []
    assert "every difference here is noise at this n" in render_compare(cmp)


def test_only_shared_modes_are_compared() -> None:
    a = two_mode_run(5, 5, 10)
    b = run(5, 10)  # quote only
    cmp = compare_runs(manifest("A"), a, manifest("B", modes=("quote",)), b)
    assert {d.mode for d in cmp.deltas} == {"quote"}
    assert any("`claim_lattice`" in n for n in cmp.notes)


def test_violation_kind_shift_table() -> None:
    fc = ["FORMAT_COLLAPSED"]
    a = run(0, 10, kinds={0: fc, 1: fc})
    b = run(0, 10, kinds={k: fc for k in range(5)} | {9: ["TITLE_MISMATCH"]})
    cmp = compare_runs(manifest("A", modes=("quote",)), a, manifest("B", modes=("quote",)), b)
    shifts = {(s.mode, s.kind): s for s in cmp.kind_shifts}
    fc_shift = shifts[("quote", "FORMAT_COLLAPSED")]
    assert (fc_shift.count_a, fc_shift.count_b) == (2, 5)
    assert (fc_shift.a, fc_shift.b, fc_shift.delta) == pytest.approx((20.0, 50.0, 30.0))
    assert shifts[("quote", "TITLE_MISMATCH")].delta == pytest.approx(10.0)
    text = render_compare(cmp)
    assert "| `quote` | FORMAT_COLLAPSED | 20.0% (2) | 50.0% (5) | +30.0 |" in text
    assert "| `quote` | TITLE_MISMATCH | 0.0% (0) | 10.0% (1) | +10.0 |" in text


def test_floor_is_a_parameter() -> None:
    a, b = run(5_000, 10_000), run(5_300, 10_000)
    assert compare_metric(a, b, "quote", STRICT, floor=2.0).verdict == "signal"
    with pytest.raises(ValueError):
        compare_runs(manifest("A"), a, manifest("B"), b, floor=-1)


# ------------------------------------------------- quantifier rungs and claim counts

CLAIMS = next(m for m in METRICS if m.key == "claims")


def rows_with(
    n: int,
    *,
    n_strict: int = 0,
    claims: int = 3,
    rungs: dict[int, str] | None = None,
    mode: str = "claim_lattice",
) -> list[dict[str, Any]]:
    return [
        {
            **base_row(k, mode, k < n_strict),
            "n_claims": claims + k % 2,  # alternating so the paired deltas have a spread
            "quantifier_intensity": (rungs or {}).get(k, "SINGULAR"),
        }
        for k in range(n)
    ]


def test_claim_count_metric_is_paired_and_relative_to_a() -> None:
    a = accumulate(rows_with(100, claims=4))  # mean 4.5
    b = accumulate(
        {**r, "n_claims": r["n_claims"] - (1 if i % 2 else 0)}
        for i, r in enumerate(rows_with(100, claims=4))
    )  # mean 4.0
    d = compare_metric(a, b, "claim_lattice", CLAIMS)
    assert (d.a, d.b) == pytest.approx((4.5, 4.0))
    assert d.method == "paired over 100 questions"
    assert d.delta == pytest.approx(-100 * 0.5 / 4.5)
    assert d.low is not None and d.high is not None and d.high < 0
    assert d.verdict == "signal" and d.effect == "fewer"
    same = compare_metric(a, a, "claim_lattice", CLAIMS)
    assert same.verdict == "noise" and same.delta == pytest.approx(0.0)


def test_claim_count_is_in_the_rendered_table() -> None:
    a = accumulate(rows_with(10))
    cmp = compare_runs(manifest("A"), a, manifest("B"), a)
    assert "| `claim_lattice` | mean claims per answer | 3.50 | 3.50 | +0.0 |" in render_compare(
        cmp
    )


def test_intensity_section_flags_drift_above_five_points_and_lists_changed_questions() -> None:
    a = accumulate(rows_with(20))  # 20 SINGULAR
    b = accumulate(rows_with(20, rungs={0: "ALL"}))  # one question moved: 5 points, no flag
    cmp = compare_runs(manifest("A"), a, manifest("B"), b)
    shifts = {s.rung: s for s in cmp.intensity}
    assert (shifts["ALL"].count_a, shifts["ALL"].count_b) == (0, 1)
    assert shifts["ALL"].delta == pytest.approx(5.0) and not shifts["ALL"].drifted
    assert [(c.question_id, c.rung_a, c.rung_b) for c in cmp.rung_changes] == [
        ("q0", "SINGULAR", "ALL")
    ]
    c = accumulate(rows_with(20, rungs={0: "ALL", 1: "MANY"}))  # 10 points off SINGULAR
    drift = compare_runs(manifest("A"), a, manifest("B"), c)
    flagged = {s.rung for s in drift.intensity if s.drifted}
    assert flagged == {"SINGULAR"}
    text = render_compare(drift)
    assert "## Quantifier intensity" in text
    assert "| SINGULAR | 20 (100.0%) | 18 (90.0%) | -10.0 | DRIFT |" in text
    assert "| question 1 | `q1` | SINGULAR | MANY |" in text


@pytest.mark.parametrize(
    ("strict_a", "strict_b", "b_policy", "decision"),
    [
        (150, 180, {"quantifier_reject_broad": True}, "turn on"),  # +10 pp with it on
        (180, 150, {"quantifier_reject_broad": True}, "keep off"),  # −10 pp with it on
        (150, 153, {"quantifier_reject_broad": True}, "no signal"),  # +1 pp: noise
        # the switch is on in A: B − A = +10 pp means "off" is better
        (150, 180, {"quantifier_guard_enabled": False}, "keep off"),
    ],
)
def test_a_switch_without_its_own_rule_is_decided_on_strict_rate(
    strict_a: int, strict_b: int, b_policy: dict[str, Any], decision: str
) -> None:
    a = accumulate(rows_with(300, n_strict=strict_a))
    b = accumulate(rows_with(300, n_strict=strict_b))
    cmp = compare_runs(manifest("A"), a, manifest("B", build_policy(b_policy)), b)
    assert cmp.phase is not None
    assert (cmp.phase.switch, cmp.phase.decision) == (next(iter(b_policy)), decision)
    (cell,) = (s for s in cmp.phase.signals if s.mode == "claim_lattice")
    sign = 1 if next(iter(b_policy.values())) else -1
    assert cell.key == "strict"
    assert cell.delta == pytest.approx(sign * 100 * (strict_b - strict_a) / 300)
    assert cell.low <= cell.delta <= cell.high and cell.n == 300
    assert bool(cell.role) == (decision != "no signal")
    text = render_compare(cmp)
    assert "## Quantifier phase decision" in text and f"**{decision}**" in text


def collapsed(n: int, k_collapsed: int, kind: str = "FORMAT_COLLAPSED", **kw: Any) -> RunStats:
    """``n`` claim_lattice rows, all HYBRID, the first ``k_collapsed`` carrying ``kind``."""
    return accumulate(
        {**r, "verdict": "HYBRID", "violation_kinds": [kind] if i < k_collapsed else []}
        for i, r in enumerate(rows_with(n, **kw))
    )


def test_a_format_collapse_drop_turns_the_reminder_on() -> None:
    """33% → 0% FORMAT_COLLAPSED, strict-rate unchanged: the reminder's own signal decides."""
    reminder = build_policy({"quantifier_reminder_enabled": True})
    cmp = compare_runs(manifest("A"), collapsed(300, 100), manifest("B", reminder), collapsed(300, 0))
    assert cmp.phase is not None and cmp.phase.decision == "turn on"
    (cell,) = cmp.phase.decided_by
    assert (cell.mode, cell.key, cell.role) == ("claim_lattice", "format_collapsed", "turn on")
    assert cell.delta == pytest.approx(-100 / 3)
    assert cell.high < 0
    line = phase_line(cmp.phase)
    assert "decided by `claim_lattice` FORMAT_COLLAPSED rate -33.3 pp (95% CI [" in line
    # the same pair the other way round: the reminder is on in A, and A has no collapse
    back = compare_runs(manifest("A", reminder), collapsed(300, 0), manifest("B"), collapsed(300, 100))
    assert back.phase is not None and (back.phase.on_in, back.phase.decision) == ("A", "turn on")


def test_a_missing_pointer_rise_keeps_the_reminder_off() -> None:
    reminder = build_policy({"quantifier_reminder_enabled": True})
    a = collapsed(300, 0, "NO_EVIDENCE_POINTER")
    b = collapsed(300, 60, "NO_EVIDENCE_POINTER")
    cmp = compare_runs(manifest("A"), a, manifest("B", reminder), b)
    assert cmp.phase is not None and cmp.phase.decision == "keep off"
    assert [c.key for c in cmp.phase.decided_by] == ["no_evidence_pointer"]


def test_a_35_percent_drop_in_claims_per_answer_turns_caps_on() -> None:
    a = accumulate(rows_with(300, claims=20))  # 20 or 21 claims: mean 20.5
    b = accumulate({**r, "n_claims": round(r["n_claims"] * 0.65)} for r in rows_with(300, claims=20))
    caps = build_policy({"quantifier_guard_apply_caps": True})
    cmp = compare_runs(manifest("A"), a, manifest("B", caps), b)
    assert cmp.phase is not None and cmp.phase.decision == "turn on"
    (cell,) = cmp.phase.decided_by
    assert cell.key == "claims" and cell.delta == pytest.approx(100 * (13.5 - 20.5) / 20.5)
    assert "mean claims per answer -34.1% (95% CI [" in phase_line(cmp.phase)


def test_caps_are_judged_on_what_the_answers_did() -> None:
    caps = build_policy({"quantifier_guard_apply_caps": True})
    a = accumulate(rows_with(300, n_strict=180))
    worse = accumulate(rows_with(300, n_strict=150))  # answers worse: −10 pp STRICT, +10 UNGROUNDED
    cmp = compare_runs(manifest("A"), a, manifest("B", caps), worse)
    assert cmp.phase is not None and cmp.phase.decision == "keep off"
    assert {c.key for c in cmp.phase.decided_by} == {"answered_strict", "ungrounded"}
    better = compare_runs(manifest("A"), worse, manifest("B", caps), a)
    assert better.phase is not None and better.phase.decision == "turn on"
    same = compare_runs(manifest("A"), a, manifest("B", caps), a)
    assert same.phase is not None and same.phase.decision == "no signal"


def test_a_pair_differing_in_two_switches_gets_one_decision_for_both() -> None:
    both = build_policy({"quantifier_guard_apply_caps": True, "quantifier_reminder_enabled": True})
    cmp = compare_runs(manifest("A"), collapsed(300, 100), manifest("B", both), collapsed(300, 0))
    assert cmp.phase is not None
    assert cmp.phase.switches == ("quantifier_guard_apply_caps", "quantifier_reminder_enabled")
    assert cmp.phase.decision == "turn on"
    assert {c.key for c in cmp.phase.decided_by} == {"format_collapsed"}
    text = render_compare(cmp)
    assert "`quantifier_guard_apply_caps + quantifier_reminder_enabled` (on in run B): **turn on**" in text


def test_no_phase_decision_when_the_effect_cannot_be_put_on_a_phase_switch() -> None:
    a = accumulate(rows_with(10))
    two = build_policy({"quantifier_reminder_enabled": True, "top_k": 4})
    mixed = compare_runs(manifest("A"), a, manifest("B", two), a)
    assert mixed.phase is None
    assert any("differ in `top_k`" in n for n in mixed.notes)
    other = build_policy({"top_k": 4})
    assert compare_runs(manifest("A"), a, manifest("B", other), a).phase is None
    crossed = compare_runs(
        manifest("A", build_policy({"quantifier_guard_apply_caps": True})),
        a,
        manifest("B", build_policy({"quantifier_reminder_enabled": True})),
        a,
    )
    assert crossed.phase is None and any("four runs of the cycle" in n for n in crossed.notes)


def test_a_guard_pair_with_caps_off_says_the_dry_run_cannot_move_a_verdict() -> None:
    a = accumulate(rows_with(50, n_strict=20))
    cmp = compare_runs(manifest("A", build_policy({"quantifier_guard_enabled": False})), a, manifest("B"), a)
    assert cmp.phase is not None and cmp.phase.decision == "no signal"
    assert "dry run" in cmp.phase.note
    assert cmp.phase.note in render_compare(cmp)


# --------------------------------------------------------------------------- the A/B/D cycle

CAPS_ON = {"quantifier_guard_apply_caps": True}
REMINDER_ON = {"quantifier_reminder_enabled": True}


def cycle_run(claims: int, k_collapsed: int) -> RunStats:
    return collapsed(300, k_collapsed, claims=claims)


@pytest.mark.parametrize(
    ("runs", "outcome"),
    [
        # caps cut claims, the reminder cuts collapse, and each adds to the other
        ({"baseline": (20, 100), "caps only": (12, 100), "reminder only": (20, 0), "both": (12, 0)}, "both"),
        # the reminder does nothing, alone or on top of caps
        ({"baseline": (20, 100), "caps only": (12, 100), "reminder only": (20, 100), "both": (12, 100)}, "caps only"),
        # each helps alone, and together is no better than the reminder alone
        ({"baseline": (20, 100), "caps only": (12, 100), "reminder only": (20, 0), "both": (20, 0)}, "reminder only"),
        ({"baseline": (20, 100), "caps only": (20, 100), "reminder only": (20, 100), "both": (20, 100)}, "neither"),
    ],
)
def test_the_cycle_adopts_both_only_when_together_they_beat_each_alone(
    runs: dict[str, tuple[int, int]], outcome: str
) -> None:
    policies = {"baseline": {}, "caps only": CAPS_ON, "reminder only": REMINDER_ON,
                "both": {**CAPS_ON, **REMINDER_ON}}
    given = [
        (manifest(role, build_policy(policies[role])), cycle_run(*runs[role]))
        for role in ("both", "baseline", "reminder only", "caps only")  # any order
    ]
    cycle = decide_cycle(given, floor=5.0)
    assert cycle.outcome == outcome
    assert cycle.runs == {role: role for role in policies}
    assert [s.question for s in cycle.steps] == [
        "caps alone", "reminder alone", "both over caps only", "both over reminder only"
    ]
    text = render_cycle(cycle)
    assert f"**{outcome}**" in text
    if outcome == "both":
        assert "FORMAT_COLLAPSED rate -33.3 pp" in cycle_lines(cycle)[3]


def test_the_cycle_offers_reject_broad_when_failures_stay_high_with_both_on() -> None:
    policies = {"baseline": {}, "caps only": CAPS_ON, "reminder only": REMINDER_ON,
                "both": {**CAPS_ON, **REMINDER_ON}}
    high = {"baseline": (20, 150), "caps only": (12, 150), "reminder only": (20, 100),
            "both": (12, 100)}  # a third of the answers still collapse with both on
    given = [(manifest(r, build_policy(policies[r])), cycle_run(*high[r])) for r in policies]
    cycle = decide_cycle(given, floor=5.0)
    assert "`--reject-broad`" in cycle.advice and "`claim_lattice` FORMAT_COLLAPSED rate 33.3%" in cycle.advice
    assert cycle.advice in render_cycle(cycle) and cycle.advice in cycle_lines(cycle)
    low = {**high, "both": (12, 0), "reminder only": (20, 0)}
    calm = decide_cycle([(manifest(r, build_policy(policies[r])), cycle_run(*low[r]))
                         for r in policies], floor=5.0)  # fmt: skip
    assert calm.advice == ""


def test_a_cycle_needs_one_run_per_role_and_no_other_difference() -> None:
    stats = cycle_run(3, 0)
    base = [manifest(str(i), build_policy(p)) for i, p in
            enumerate([{}, CAPS_ON, REMINDER_ON, {**CAPS_ON, **REMINDER_ON}])]
    with pytest.raises(InputError, match="both 'baseline'"):
        decide_cycle([(base[0], stats), (base[0], stats), (base[2], stats), (base[3], stats)], floor=5)
    odd = manifest("3", build_policy({**CAPS_ON, **REMINDER_ON, "top_k": 4}))
    with pytest.raises(InputError, match="differs .* in top_k"):
        decide_cycle([(m, stats) for m in (*base[:3], odd)], floor=5)
    with pytest.raises(InputError, match="four runs"):
        decide_cycle([(m, stats) for m in base[:3]], floor=5)


def test_caps_cannot_vote_for_themselves_and_their_demotions_are_shown_apart() -> None:
    """With caps on, 60 STRICT rows become HYBRID by the guard's own SCOPE_UNBOUND (−20
    pp strict-rate as labelled) while no answer changed: no signal, and the note shows it."""
    unbound = ["BROAD_QUANTIFIER_SCOPE_UNBOUND"]
    dry = accumulate(
        {**r, "would_fire_kinds": unbound if i < 60 else []}
        for i, r in enumerate(rows_with(300, n_strict=150))
    )
    caps_rows = rows_with(300, n_strict=150)
    for r in caps_rows[:60]:
        r.update(verdict="HYBRID", violation_kinds=unbound)
    on = build_policy({"quantifier_guard_apply_caps": True})
    cmp = compare_runs(manifest("A"), dry, manifest("B", on), accumulate(caps_rows))
    assert cmp.would_demote["claim_lattice"] == (20.0, None)
    assert cmp.phase is not None and cmp.phase.decision == "no signal"
    assert ("`claim_lattice` strict-rate -20.0 pp as labelled, +0.0 pp without them, 20.0% "
            "predicted by the dry run") in cmp.phase.note  # fmt: skip
    shown = {(c.key, c.role) for c in cmp.phase.signals if c.mode == "claim_lattice"}
    assert ("strict", "") in shown  # printed, never deciding
    # a cap's trim (TOO_MANY_CLAIMS beside CAP_APPLIED) is the guard's too; a real
    # citation failure is the answer's
    trimmed = rows_with(300, n_strict=150)
    for r in trimmed[:60]:
        r.update(verdict="HYBRID", violation_kinds=["BROAD_QUANTIFIER_CAP_APPLIED", "TOO_MANY_CLAIMS"])
    for r in trimmed[60:120]:
        r.update(verdict="HYBRID", ratio=0.5, violation_kinds=["CITATION_MISMATCH"])
    worse = compare_runs(manifest("A"), dry, manifest("B", on), accumulate(trimmed))
    assert worse.phase is not None and worse.phase.decision == "keep off"
    (cell,) = (c for c in worse.phase.decided_by if c.key == "answered_strict")
    assert cell.delta == pytest.approx(-20.0)


def two_modes(strict_quote: int, collapsed_lattice: int) -> RunStats:
    """300 questions in quote (the first ``strict_quote`` STRICT) and in claim_lattice (the
    first ``collapsed_lattice`` HYBRID with FORMAT_COLLAPSED)."""
    quote = [base_row(k, "quote", k < strict_quote) for k in range(300)]
    lattice = [{**base_row(k, "claim_lattice", False), "verdict": "HYBRID",
                "violation_kinds": ["FORMAT_COLLAPSED"] if k < collapsed_lattice else []}
               for k in range(300)]  # fmt: skip
    return accumulate(quote + lattice)


def test_a_switch_that_helps_one_mode_and_hurts_another_is_mixed() -> None:
    """The reminder cuts claim_lattice's collapse by 33 points while quote's strict-rate
    falls 33 points: no green light."""
    reminder = build_policy({"quantifier_reminder_enabled": True})
    cmp = compare_runs(manifest("A"), two_modes(200, 100), manifest("B", reminder),
                       two_modes(100, 0))  # fmt: skip
    assert cmp.phase is not None and cmp.phase.decision == "mixed"
    assert cmp.phase.modes_where("turn on") == ["claim_lattice"]
    assert cmp.phase.modes_where("keep off") == ["quote"]
    assert "**mixed** (helps `claim_lattice`; hurts `quote`)" in phase_line(cmp.phase)


def test_the_floor_decides_and_the_interval_says_how_many_questions_would_settle_it() -> None:
    """The design's own example: format collapse −7.4 points on 27 questions turns the
    reminder on though the interval still includes zero."""
    reminder = build_policy({"quantifier_reminder_enabled": True})
    a = accumulate({**r, "verdict": "HYBRID",
                    "violation_kinds": ["FORMAT_COLLAPSED"] if k in (0, 1, 5) else []}
                   for k, r in enumerate(rows_with(27)))  # fmt: skip
    b = accumulate({**r, "verdict": "HYBRID",
                    "violation_kinds": ["FORMAT_COLLAPSED"] if k == 5 else []}
                   for k, r in enumerate(rows_with(27)))  # fmt: skip
    cmp = compare_runs(manifest("A"), a, manifest("B", reminder), b)
    assert cmp.phase is not None
    (cell,) = (c for c in cmp.phase.signals
               if c.key == "format_collapsed" and c.mode == "claim_lattice")  # fmt: skip
    assert cell.delta == pytest.approx(-200 / 27) and cell.verdict == "noise" and cell.high > 0
    assert cmp.phase is not None and cmp.phase.decision == "turn on"
    settle = cell.settle()
    assert settle.startswith("interval includes zero; about ") and "(have 27)" in settle
    need = int(settle.split("about ")[1].split()[0])
    assert need > 27
    assert settle in phase_line(cmp.phase)


def repeated(n_strict: int, questions: int, samples: int, prefix: str) -> RunStats:
    """``questions`` × ``samples``, every sample of a question alike (fully correlated)."""
    return accumulate(
        {**base_row(k, "quote", k < n_strict, prefix), "sample_index": i,
         "job_id": f"{prefix}{k}-{i}"}
        for k in range(questions)
        for i in range(samples)
    )  # fmt: skip


def test_unpaired_decision_counts_a_questions_samples_once() -> None:
    # 100 questions × 5 identical samples: 500 verdicts that weigh like 100. A 15-point
    # change is a signal if the 500 were independent, noise at 100 per run.
    a, b = repeated(40, 100, 5, "q"), repeated(55, 100, 5, "x")
    d = compare_metric(a, b, "quote", STRICT)
    assert d.method == "Newcombe, clustered by question (unpaired)"
    assert d.delta == pytest.approx(15.0) and (d.n_a, d.n_b) == (500, 500)
    independent = compare_metric(run(200, 500), run(275, 500, prefix="x"), "quote", STRICT)
    assert independent.delta == pytest.approx(15.0) and independent.verdict == "signal"
    assert d.high - d.low > 2 * (independent.high - independent.low)
    as_questions = compare_metric(run(40, 100), run(55, 100, prefix="x"), "quote", STRICT)
    assert d.high - d.low >= as_questions.high - as_questions.low - 0.5
    ratio = compare_metric(a, b, "quote", RATIO)
    assert ratio.method == "Welch, clustered by question (unpaired)"
    assert ratio.high - ratio.low > 2 * (
        compare_metric(run(200, 500), run(275, 500, prefix="x"), "quote", RATIO).high
        - compare_metric(run(200, 500), run(275, 500, prefix="x"), "quote", RATIO).low
    )


def test_runs_whose_records_differ_in_a_rule_version_warn() -> None:
    from qfarm.common.record import RunRecord, rule_versions

    def rec(**update: Any) -> RunRecord:
        return RunRecord(**{**dict(
            recorded_at=0.0, question_file="q", question_file_sha256=None,
            verifier_policy_hash="v", governance_policy_hash="g", retriever="embedded",
            index_version="idx-1", corpus=None, model="m", endpoints=(), llm_server=None,
            simulated=True, qfarm_version="0.1.0", git_commit=None,
            rule_versions=rule_versions(), rows_sha256="", rows_lines=0, summary_sha256=None),
            **update})

    older = rec(rule_versions={**rule_versions(), "prompt": "prompt-v1"})
    cmp = compare_runs(manifest("A", record=older), run(5, 10),
                       manifest("B", record=rec()), run(5, 10))
    assert any("Different prompt version: A `prompt-v1`" in w for w in cmp.warnings)
    cmp = compare_runs(manifest("A", record=rec()), run(5, 10), manifest("B"), run(5, 10))
    assert cmp.warnings == []  # a run without a record: nothing to compare


def test_runs_whose_preflights_differ_warn() -> None:
    stats = run(5, 10)
    same = compare_runs(manifest("A", preflight_hash="aaaa"), stats,
                        manifest("B", preflight_hash="aaaa"), stats)  # fmt: skip
    assert not any("Different preflights" in w for w in same.warnings)
    moved = compare_runs(manifest("A", preflight_hash="aaaa"), stats,
                         manifest("B", preflight_hash="bbbb"), stats)  # fmt: skip
    assert any("Different preflights: A `aaaa` vs B `bbbb`" in w for w in moved.warnings)
    assert "| preflight_hash | `aaaa` | `bbbb` |" in render_compare(moved)
    older = compare_runs(manifest("A"), stats, manifest("B", preflight_hash="bbbb"), stats)
    assert not any("Different preflights" in w for w in older.warnings)
