"""A run with error rows through the HTTP API: its state in words says so, and its summary
figures carry the rates over the jobs (an error row a failure) beside those over the
answered rows."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from qfarm.ops.sim.launch import start_simulator
from qfarm.producer import QuestionSet, SweepSpec, run_sweep
from qfarm.producer.http.app import create_app
from tests.producer.conftest import REPO

pytestmark = pytest.mark.slow


def test_a_run_with_error_rows_reads_completed_with_errors(make_settings) -> None:
    with start_simulator(ttft_ms=0, tpot_ms=0, fault_rates={"malformed": 0.5}) as sim:
        settings = make_settings(llm_endpoints=sim.url, llm_max_attempts=1,
                                 llm_wait_for_endpoint_s=0)
        spec = SweepSpec(questions=QuestionSet.from_file(REPO / "bench/questions/smoke.txt"),
                         n=1)
        result = run_sweep(spec, eager=True, settings=settings)
    assert result.status == "complete"
    with TestClient(create_app(settings, eager=True)) as client:
        got = client.get(f"/v1/runs/{result.run_id}").json()
        errored, done = got["errored_rows"], got["progress"]["done"]
        assert got["state"] == "complete" and 0 < errored < done
        assert got["state_text"] == f"completed with errors ({errored}, {100 * errored / done:.1f} %)"
        listed = client.get("/v1/runs").json()["runs"]
        assert [r["state_text"] for r in listed] == [got["state_text"]]
        figures = client.get(f"/v1/runs/{result.run_id}/summary").json()
    quote = figures["modes"]["quote"]
    assert quote["of_jobs"]["errors"]["count"] == quote["errors"]
    assert quote["of_jobs"]["strict"]["rate"] == pytest.approx(
        quote["verdicts"]["strict"]["count"] / quote["rows"])
    assert sum(m["errors"] for m in figures["modes"].values()) == errored
