"""The in-process runner (eager sweeps) against the serial path: same rows, many in flight."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from qfarm.common.models import ALL_MODES
from qfarm.common.settings import Settings
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.producer import SweepSpec, run_sweep
from qfarm.producer.api import QuestionSet
from qfarm.worker.llm.client import LLMClient

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
# What differs between two runs of the same jobs: identity of the run, and timings.
PER_RUN = {"run_id", "started_at", "finished_at", "timings"}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(max_num_seqs=16, ttft_ms=40, tpot_ms=0) as handle:
        yield handle


def settings_for(sim: SimulatorHandle, index: Path, tmp_path: Path, **overrides: object) -> Settings:
    opts: dict[str, object] = {
        "llm_endpoints": sim.url,
        "index_path": index,
        "results_dir": tmp_path / "results",
        "llm_max_inflight_per_endpoint": 8,
        **overrides,
    }
    return Settings(**opts)  # type: ignore[arg-type]


def comparable(rows: list) -> dict[tuple, dict]:
    out = {}
    for row in rows:
        data = row.model_dump(mode="json")
        out[(data["question_id"], data["mode"], data["sample_index"])] = {
            k: v for k, v in data.items() if k not in PER_RUN
        }
    return out


def spec() -> SweepSpec:
    questions = QuestionSet.from_file(REPO / "bench/questions/smoke.txt")
    return SweepSpec(questions=questions, modes=ALL_MODES, n=2)


def test_concurrent_and_serial_eager_runs_write_the_same_rows(sim, default_index, tmp_path) -> None:
    settings = settings_for(sim, default_index, tmp_path)
    serial = run_sweep(spec(), eager=True, serial=True, settings=settings)
    concurrent = run_sweep(spec(), eager=True, settings=settings)
    assert serial.status == concurrent.status == "complete"
    a, b = comparable(serial.rows()), comparable(concurrent.rows())
    assert len(a) == serial.manifest.n_jobs == len(concurrent.rows())
    assert a == b
    assert any(r["error"] is None and r["verdict"] for r in b.values())
    assert (concurrent.run_dir / "summary.md").exists()


def test_an_eager_run_keeps_many_requests_in_flight_within_the_cap(
    sim, default_index, tmp_path, monkeypatch
) -> None:
    now = peak = 0
    complete = LLMClient.acomplete

    async def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal now, peak  # on the gateway's one loop: no lock needed
        now += 1
        peak = max(peak, now)
        try:
            return await complete(self, *args, **kwargs)
        finally:
            now -= 1

    monkeypatch.setattr(LLMClient, "acomplete", counting)
    seen: list[int] = []
    result = run_sweep(spec(), eager=True, settings=settings_for(sim, default_index, tmp_path),
                       on_progress=lambda p: seen.append(p.done))  # fmt: skip
    assert result.status == "complete"
    assert 1 < peak <= 8  # llm_max_inflight_per_endpoint x 1 endpoint
    assert seen and seen[-1] == result.manifest.n_jobs and seen == sorted(seen)


def test_llm_failures_are_error_rows_and_the_run_completes(default_index, tmp_path) -> None:
    with start_simulator(latency="zero", fault_rates={"malformed": 1.0}) as failing:
        settings = settings_for(failing, default_index, tmp_path, llm_max_attempts=1,
                                llm_breaker_failures=100_000,
                                llm_health_interval_s=0.0)  # fmt: skip
        result = run_sweep(spec(), eager=True, settings=settings)
    rows = result.rows()
    assert result.status == "complete" and len(rows) == result.manifest.n_jobs
    generated = [r for r in rows if r.error]
    assert generated and all(r.error.startswith("llm: ") for r in generated)
