"""What a run cost, from rows: tokens, model and in-flight seconds, GPU-hours, prices."""

from __future__ import annotations

import pytest

from qfarm.common.models import CostRates
from qfarm.common.reporting import cost as c
from qfarm.common.reporting.report import render_summary
from qfarm.common.reporting.runstats import RunStats


def a_row(mode: str = "quote", endpoint: str = "http://gpu1:8000", *, prompt: int = 100,
          completion: int = 10, sent: float = 0.0, ms: float = 1000.0, prompts: int = 1,
          estimated: bool = False, **extra: object) -> dict:
    return {
        "mode": mode, "endpoint": endpoint, "verdict": "STRICT", "error": None,
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "estimated": estimated},
        "llm_request": {"sent_at": sent, "ms": ms, "prompts": prompts},
        **extra,
    }


def stats_of(*rows: dict) -> c.CostStats:
    stats = c.CostStats()
    for row in rows:
        stats.add(row)
    return stats


def test_busy_time_is_the_union_of_intervals() -> None:
    busy = c.BusyTime()
    for start, end in ((0, 1), (0.5, 2), (5, 6), (3, 4), (1.9, 3.1), (10, 10)):
        busy.add(start, end)
    # [0, 4] joined through the overlaps, then [5, 6] and the empty [10, 10]
    assert busy.seconds == pytest.approx(5.0)
    assert busy.starts == [0, 5, 10] and busy.over_s == 0.0


def test_busy_time_stays_bounded_and_says_by_how_much_it_over_counts(monkeypatch) -> None:
    monkeypatch.setattr(c, "MAX_SPANS", 4)
    busy = c.BusyTime()
    for i in range(6):
        busy.add(i * 10.0, i * 10.0 + 1.0 + i * 0.1)  # gaps shrink: the last ones join first
    assert len(busy.starts) == 4
    assert busy.seconds == pytest.approx(6 + sum(i * 0.1 for i in range(6)) + busy.over_s)
    assert busy.over_s > 0


def test_tokens_and_model_time_per_mode_and_endpoint() -> None:
    stats = stats_of(
        a_row("quote", "http://gpu1:8000", sent=0.0, ms=2000),
        a_row("quote", "http://gpu2:8000", sent=0.5, ms=1000, prompt=50),
        a_row("claim_lattice", "http://gpu1:8000", sent=1.0, ms=2000, completion=30),
    )
    lines = c.cost_lines(stats, CostRates(), wall_s=10.0, modes=["quote", "claim_lattice"])
    by = {(line.scope, line.name): line for line in lines}
    run = by[("run", c.TOTAL)]
    assert (run.rows, run.prompt_tokens, run.completion_tokens) == (3, 250, 50)
    assert run.model_s == pytest.approx(5.0)
    assert run.in_flight_s == pytest.approx(3.0)  # [0, 2] ∪ [0.5, 1.5] ∪ [1, 3]
    assert run.prompt_tokens_per_s_wall == pytest.approx(25.0)
    assert run.completion_tokens_per_s_in_flight == pytest.approx(50 / 3, abs=1e-3)
    assert by[("mode", "quote")].prompt_tokens == 150
    assert by[("endpoint", "http://gpu1:8000")].in_flight_s == pytest.approx(3.0)
    assert by[("endpoint", "http://gpu2:8000")].model_s == pytest.approx(1.0)
    assert [line.scope for line in lines] == ["run", "mode", "mode", "endpoint", "endpoint"]
    assert run.gpu_hours is None and run.price_gpu is None and run.price_tokens is None


def test_a_micro_batch_counts_its_request_once() -> None:
    batch = [a_row(sent=0.0, ms=3000, prompts=3) for _ in range(3)]
    run = c.cost_lines(stats_of(*batch), CostRates(), wall_s=3.0)[0]
    assert run.model_s == pytest.approx(3.0) and run.in_flight_s == pytest.approx(3.0)


def test_cache_hits_and_rows_without_a_model_call_cost_nothing() -> None:
    stats = stats_of(
        a_row(cache_hit=True),
        {"mode": "quote", "endpoint": None, "usage": {"prompt_tokens": None,
                                                       "completion_tokens": None},
         "llm_request": None, "error": "[retrieval] index gone"},
        a_row(),
    )
    assert stats.total.rows == 1 and stats.total.prompt_tokens == 100


def test_gpu_hours_and_prices_from_the_rates() -> None:
    rates = CostRates(gpus_per_endpoint=2, gpus_by_endpoint={"http://gpu2:8000": 8},
                      price_per_gpu_hour=3.0, price_per_m_prompt_tokens=1.0,
                      price_per_m_completion_tokens=4.0, currency="EUR")
    stats = stats_of(a_row("quote", "http://gpu1:8000", ms=3600_000, prompt=1_000_000,
                           completion=500_000),
                     a_row("quote", "http://gpu2:8000", ms=1800_000, prompt=0, completion=0))
    lines = {line.name: line for line in c.cost_lines(stats, rates, wall_s=3600.0)}
    gpu1, gpu2, run = lines["http://gpu1:8000"], lines["http://gpu2:8000"], lines[c.TOTAL]
    assert (gpu1.gpus, gpu1.gpu_hours, gpu1.price_gpu) == (2, 2.0, 6.0)
    assert (gpu2.gpus, gpu2.gpu_hours, gpu2.price_gpu) == (8, 4.0, 12.0)
    assert (run.gpu_hours, run.price_gpu) == (6.0, 18.0)
    assert run.price_tokens == pytest.approx(1.0 + 2.0)
    summary = c.cost_summary(stats, rates, 3600.0)
    assert summary["currency"] == "EUR" and summary["lines"][0]["gpu_hours"] == 6.0
    assert summary["rates"]["gpus_by_endpoint"] == {"http://gpu2:8000": 8.0}


def test_the_run_has_no_gpu_hours_when_one_endpoint_s_gpus_are_unknown() -> None:
    rates = CostRates(gpus_by_endpoint={"http://gpu1:8000": 1}, price_per_gpu_hour=2.0)
    stats = stats_of(a_row("quote", "http://gpu1:8000"), a_row("quote", "http://gpu2:8000"))
    run, *_ = c.cost_lines(stats, rates, wall_s=1.0)
    assert run.gpu_hours is None and run.price_gpu is None


def test_estimated_tokens_are_flagged_never_silent() -> None:
    stats = stats_of(a_row(), a_row(estimated=True), a_row(estimated=True))
    summary = c.cost_summary(stats, CostRates(), 1.0)
    assert summary["estimated"] is True
    assert summary["lines"][0]["estimated_rows"] == 2 and summary["lines"][0]["estimated"]
    assert any("ESTIMATED" in note for note in summary["notes"])
    cells = c.cost_cells(c.cost_lines(stats, CostRates(), 1.0)[0], "USD")
    assert "server; 2 rows ESTIMATED" in cells
    assert "ESTIMATED" in c.cost_line(summary)


def test_the_summary_has_the_cost_table() -> None:
    manifest = {
        "run_id": "r1", "created_at": 0.0, "question_file": "q.txt", "question_file_digest": "d",
        "n_questions": 1, "modes": ["quote"], "n": 2, "n_jobs": 2, "policy": {},
        "verifier_policy_hash": "v", "governance_policy_hash": "g", "model": "m",
        "model_profile_id": "default", "simulated": True,
        "cost_rates": {"gpus_per_endpoint": 1, "price_per_gpu_hour": 2.0},
    }
    rows = [
        {**a_row(sent=1.0, ms=500), "run_id": "r1", "job_id": "j1", "question_id": "q1",
         "question": "Q?", "finished_at": 2.0},
        {**a_row(sent=1.0, ms=500, estimated=True), "run_id": "r1", "job_id": "j2",
         "question_id": "q1", "question": "Q?", "finished_at": 2.0},
    ]
    text = render_summary(manifest, rows, finished_at=2.0)
    section = text.split("## What the run cost (SIMULATED)", 1)[1]
    assert "| run | 2 | 200 | 20 | server; 1 rows ESTIMATED |" in section
    assert "| mode quote |" in section and "| http://gpu1:8000 |" in section
    assert "2 USD per GPU-hour" in section


def test_runstats_fills_the_cost_in_its_one_pass() -> None:
    stats = RunStats()
    stats.add(a_row())
    assert stats.cost.total.prompt_tokens == 100


def test_a_row_with_tokens_but_no_request_is_refused_by_name() -> None:
    from qfarm.common.errors import InputError

    row = {**a_row(), "job_id": "j-7", "llm_request": None}
    with pytest.raises(InputError, match="j-7.*no llm_request"):
        stats_of(row)
