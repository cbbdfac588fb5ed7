"""The quantifier guard's dry run over a whole sweep: the same answers, the same verdicts.

With caps off (the default) the guard only records the broad kinds it would fire.
Two eager sweeps over the simulator get the same prompts (the reminder is off in
both), hence the same answers; the guard-on run must grade every job exactly as
the guard-off run does, and only its ``would_fire_kinds`` and summary table differ.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from qfarm.common.models import Mode
from qfarm.common.policy import Policy
from qfarm.common.reporting.compare import compare_runs
from qfarm.common.reporting.runstats import accumulate
from qfarm.common.settings import Settings
from qfarm.common.vocab import ViolationKind
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.producer import SweepSpec, run_sweep
from qfarm.producer.api import QuestionSet

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
GRADE = ("verdict", "label", "ratio", "n_claims", "n_verified", "violation_kinds")


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(max_num_seqs=16, ttft_ms=5, tpot_ms=0) as handle:
        yield handle


def sweep(sim: SimulatorHandle, index: Path, tmp_path: Path, policy: Policy):  # type: ignore[no-untyped-def]
    settings = Settings(
        llm_endpoints=sim.url, index_path=index, results_dir=tmp_path / "results"
    )  # type: ignore[call-arg]
    spec = SweepSpec(
        questions=QuestionSet.from_file(REPO / "bench/questions/quantifier_subset.txt"),
        modes=(Mode.CLAIM_LATTICE_POINTER, Mode.CLAIM_LATTICE),
        n=2,
        policy=policy,
        use_cache=False,
    )
    result = run_sweep(spec, eager=True, settings=settings)
    assert result.status == "complete"
    return result


def test_a_dry_run_sweep_grades_every_job_as_a_guard_off_sweep(sim, default_index, tmp_path) -> None:
    dry = sweep(sim, default_index, tmp_path, Policy())
    off = sweep(sim, default_index, tmp_path, Policy(quantifier_guard_enabled=False))
    rows_dry = {(r.question_id, r.mode, r.sample_index): r.model_dump(mode="json") for r in dry.rows()}
    rows_off = {(r.question_id, r.mode, r.sample_index): r.model_dump(mode="json") for r in off.rows()}
    assert len(rows_dry) == len(rows_off) == dry.manifest.n_jobs
    for key, row in rows_dry.items():
        assert row["error"] is None
        assert {k: row[k] for k in GRADE} == {k: rows_off[key][k] for k in GRADE}, key
        assert rows_off[key]["would_fire_kinds"] == []
    fired = [r for r in rows_dry.values() if r["would_fire_kinds"]]
    unbound = ViolationKind.BROAD_QUANTIFIER_SCOPE_UNBOUND
    assert any(unbound in r["would_fire_kinds"] for r in fired)
    assert all(r["scope_bound_hint"] == "unbounded" for r in fired if unbound in r["would_fire_kinds"])

    summary_dry = (dry.run_dir / "summary.md").read_text()
    summary_off = (off.run_dir / "summary.md").read_text()
    verdicts = summary_dry.split("## Verdicts by mode")[1].split("##")[0]
    assert verdicts.split("| p50 ms")[0] == summary_off.split("## Verdicts by mode")[1].split("| p50 ms")[0]
    assert "## Quantifier guard dry run" in summary_dry
    assert unbound.value in summary_dry.split("## Quantifier guard dry run")[1].split("\n## ")[0]
    assert "## Quantifier guard dry run" not in summary_off

    stats_dry, stats_off = accumulate(dry.rows()), accumulate(off.rows())
    cmp = compare_runs(off.manifest, stats_off, dry.manifest, stats_dry)
    assert all(d.delta in (0.0, None) for d in cmp.deltas if d.metric.key == "strict")
    assert cmp.phase is not None and cmp.phase.decision == "no signal"
