"""What a run cost, end to end: a server that sends no usage (tokens estimated, and said
so) and micro-batched requests (counted once), through the manifest, the summary, the API
and the viewer's run page."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from qfarm.common.policy import build_policy
from qfarm.ops.sim.launch import start_simulator
from qfarm.producer import QuestionSet, SweepSpec, run_sweep
from qfarm.producer.http.app import create_app
from tests.producer.conftest import REPO

pytestmark = pytest.mark.slow


def test_an_estimated_batched_run_s_cost_everywhere(make_settings) -> None:
    with start_simulator(latency="zero", omit_usage=True) as sim:
        settings = make_settings(llm_endpoints=sim.url, llm_batch_size=4, llm_batch_wait_ms=50,
                                 llm_gpus=f"{sim.url}=4", llm_price_per_m_prompt_tokens=1.0,
                                 llm_price_currency="EUR")
        # Greedy: the jobs' seeds then do not keep them in batches of their own.
        spec = SweepSpec(questions=QuestionSet.from_file(REPO / "bench/questions/smoke.txt"),
                         n=1, policy=build_policy({"temperature": 0.0}))
        result = run_sweep(spec, eager=True, settings=settings)
    assert result.status == "complete"
    rows = [json.loads(x) for x in result.rows_path.read_text().splitlines()]
    answered = [r for r in rows if r["llm_request"]]
    assert answered and all(r["usage"]["estimated"] and r["usage"]["prompt_tokens"] > 0
                            for r in answered)
    assert any(r["llm_request"]["prompts"] > 1 for r in answered), "no micro-batch formed"
    requests = {(r["llm_request"]["sent_at"], r["llm_request"]["ms"]) for r in answered}

    cost = json.loads((result.run_dir / "manifest.json").read_text())["cost"]
    run = cost["lines"][0]
    assert cost["estimated"] and run["estimated_rows"] == len(answered)
    # model_s is kept to the millisecond: on a zero-latency simulator that is the tolerance.
    assert run["model_s"] == pytest.approx(sum(ms for _, ms in requests) / 1000, abs=1e-3)
    assert run["gpus"] == 4 and run["price_tokens"] == pytest.approx(run["prompt_tokens"] / 1e6)
    assert cost["currency"] == "EUR" and any("ESTIMATED" in n for n in cost["notes"])
    summary = (result.run_dir / "summary.md").read_text()
    assert "| run | 45 |" in summary and "ESTIMATED" in summary.split("What the run cost")[1]

    with TestClient(create_app(settings, eager=True)) as client:
        got = client.get(f"/v1/runs/{result.run_id}").json()
        assert got["cost"]["lines"][0]["prompt_tokens"] == run["prompt_tokens"]
        figures = client.get(f"/v1/runs/{result.run_id}/summary").json()
        assert figures["cost"]["lines"][0]["estimated_rows"] == len(answered)
        page = client.get(f"/runs/{result.run_id}").text
    assert "What the run cost (SIMULATED)" in page and "ESTIMATED" in page
