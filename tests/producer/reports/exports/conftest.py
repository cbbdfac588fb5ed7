"""Small eager runs against the simulator, shared by the exports' tests of a module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from qfarm.common.models import Mode
from qfarm.common.settings import Settings
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.producer import RunResult, SweepSpec, run_sweep
from qfarm.producer.api import QuestionSet

REPO = Path(__file__).resolve().parents[4]
MODES = (Mode.QUOTE, Mode.CLAIM_LATTICE)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(max_num_seqs=16, ttft_ms=0, tpot_ms=0) as handle:
        yield handle


@pytest.fixture(scope="module")
def sweep(sim, default_index, tmp_path_factory):
    """``sweep(n=..., keep_answers=...)``: an eager run of the smoke set in two modes."""
    results = tmp_path_factory.mktemp("results")

    def run(n: int = 1, keep_answers: bool = False, limit: int | None = None) -> RunResult:
        settings = Settings(llm_endpoints=sim.url, index_path=default_index,
                            results_dir=results)  # type: ignore[call-arg]
        questions = QuestionSet.from_file(REPO / "bench/questions/smoke.txt")
        spec = SweepSpec(questions=questions, modes=MODES, n=n, keep_answers=keep_answers,
                         limit=limit, use_cache=False)
        result = run_sweep(spec, eager=True, settings=settings)
        assert result.status == "complete"
        return result

    return run
