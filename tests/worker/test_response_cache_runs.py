"""The response cache end to end: eager sweeps with ``--cache`` against the simulator, the
second asking it nothing and writing the rows the first wrote; without ``--cache`` nothing
is kept, and the rows carry no cache field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.producer import RunResult, SweepSpec, run_sweep
from qfarm.worker.llm import process_response_cache

pytestmark = pytest.mark.slow
QUESTIONS = ["Who were the members of the Beatles?", "What is jazz?", "Where is Mount Etna?"]
# What differs between two runs of the same jobs: the run, its clocks, and the marks of
# where the reply came from (the cache's own fields, the request that answered).
PER_RUN = {
    "run_id",
    "started_at",
    "finished_at",
    "timings",
    "llm_request",
    "worker",
    "endpoint",
    "attempts",
    "response_cache_hit",
    "model_ms_saved",
}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(latency="zero", profile="clean") as handle:
        yield handle


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    process_response_cache().clear()
    yield
    process_response_cache().clear()


def sweep(sim: SimulatorHandle, index: Path, tmp_path: Path, *, cache: bool,
          share: bool = False) -> tuple[RunResult, int]:  # fmt: skip
    sim.reset()
    before = len([r for r in sim.stats()["requests"] if "completions" in r["path"]])
    settings = Settings(llm_endpoints=sim.url, index_path=index, results_dir=tmp_path / "results")
    spec = SweepSpec(
        questions=QUESTIONS,
        n=2,
        keep_answers=True,
        response_cache=cache,
        policy=Policy(share_samples=share),
    )
    result = run_sweep(spec, eager=True, settings=settings)
    after = len([r for r in sim.stats()["requests"] if "completions" in r["path"]])
    return result, after - before


def rows_of(result: RunResult) -> dict[str, dict]:
    rows = [json.loads(line) for line in result.rows_path.read_text().splitlines()]
    return {r["job_id"]: r for r in rows}


def same(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in PER_RUN}


@pytest.mark.parametrize("share", [False, True], ids=["own-requests", "shared-samples"])
def test_a_second_run_with_cache_asks_the_model_nothing_and_writes_the_same_rows(
    sim, default_index, tmp_path, share
):
    first, asked_first = sweep(sim, default_index, tmp_path, cache=True, share=share)
    second, asked_second = sweep(sim, default_index, tmp_path, cache=True, share=share)
    assert asked_first > 0 and asked_second == 0
    a, b = rows_of(first), rows_of(second)
    assert a.keys() == b.keys() and len(a) == len(QUESTIONS) * 3 * 2
    assert {r["response_cache_hit"] for r in a.values()} == {False}
    assert {r["response_cache_hit"] for r in b.values()} == {True}
    assert all(r["model_ms_saved"] >= 0 and r["attempts"] == 0 for r in b.values())
    assert {j: same(r) for j, r in a.items()} == {j: same(r) for j, r in b.items()}
    summary = second.summary.read_text()
    assert f"{len(b)} of {len(b)} model replies from the cache" in summary
    assert "rows' replies came from the response cache" in summary
    manifest = json.loads((second.run_dir / "manifest.json").read_text())
    assert manifest["response_cache"] is True
    assert manifest["cost"]["response_cache"]["rows"] == len(b)


def test_without_cache_nothing_is_kept_and_rows_carry_no_cache_field(sim, default_index, tmp_path):
    plain, asked = sweep(sim, default_index, tmp_path, cache=False)
    again, asked_again = sweep(sim, default_index, tmp_path, cache=False)
    assert asked == asked_again == len(QUESTIONS) * 3 * 2
    assert len(process_response_cache()) == 0
    for row in rows_of(plain).values():
        assert "response_cache_hit" not in row and "model_ms_saved" not in row
    assert "response cache" not in plain.summary.read_text().split("## ")[1]
