"""bench.real_model: the real-model run's figures come from its rows, not from memory."""

from __future__ import annotations

import json
from pathlib import Path

from bench.real_model import (
    figures_table,
    habits_table,
    kinds_table,
    mode_figures,
    service_seconds,
)
from qfarm.common.questions import parse_questions

QUESTIONS = Path(__file__).resolve().parents[2] / "bench" / "questions"


def _row(mode: str, verdict: str, label: str, **extra: object) -> dict:
    return {"mode": mode, "verdict": verdict, "label": label, "error": None,
            "format_collapsed": False, "finish_reason": "stop", "question": "Q?",
            "answer": "text", "started_at": 100.0, "finished_at": 160.0,
            "timings": {"llm_ms": 2000.0}, "usage": {"completion_tokens": 10}, **extra}


def test_service_time_is_the_gap_between_finishes_on_a_one_slot_server() -> None:
    # Three jobs handed over at t=100; the server finishes them at 102, 108 and 110. Each
    # row's llm_ms would count the wait for the slot; the server's time is the gap.
    rows = [_row("quote", "STRICT", "X", job_id=j, started_at=100.0, finished_at=t)
            for j, t in (("b", 108.0), ("a", 102.0), ("c", 110.0))]
    assert service_seconds(rows) == {"a": 2.0, "b": 6.0, "c": 2.0}


def test_mode_figures_count_verdicts_labels_errors_and_speed() -> None:
    rows = [
        _row("quote", "STRICT", "EVIDENCE-WARRANTED", job_id="a", finished_at=102.0),
        _row("quote", "UNGROUNDED", "UNGROUNDED", finish_reason="length", job_id="b",
             finished_at=108.0, usage={"completion_tokens": 30}),
        {"mode": "quote", "verdict": None, "error": "llm: timeout", "job_id": "e"},
        _row("claim_lattice", "UNGROUNDED", "UNGROUNDED", job_id="c", finished_at=110.0),
    ]
    f = mode_figures(rows, "quote")
    assert (f["jobs"], f["errors"], f["n"], f["strict"], f["ungrounded"]) == (3, 1, 2, 1, 1)
    assert f["truncated"] == 1 and f["labels"]["EVIDENCE-WARRANTED"] == 1
    assert f["tokens_per_s"] == 40 / 8.0 and (f["p50_s"], f["p95_s"]) == (2.0, 6.0)
    assert f["tokens_per_job"] == 20 and f["hybrid"] == 0


def test_an_answer_with_a_pointer_and_the_kinds_are_counted_per_mode() -> None:
    rows = [_row("claim_lattice", "HYBRID", "POINTER-LINKED", answer_pointer_count=2, job_id="a",
                 violation_kinds=["CITATION_MISMATCH", "WARRANT_MISSING"]),
            _row("claim_lattice", "UNGROUNDED", "UNGROUNDED", answer_pointer_count=0, job_id="b",
                 violation_kinds=["FORMAT_COLLAPSED"])]
    assert mode_figures(rows, "claim_lattice")["pointed"] == 1
    table = kinds_table(rows)
    assert "| CITATION_MISMATCH | 1 / 2 |" in table and "| FORMAT_COLLAPSED | 1 / 2 |" in table


def test_figures_table_is_computed_from_the_run(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"modes": ["quote"], "n": 1, "n_questions": 2, "model": "m", "llm_server": "s",
         "model_profile_id": "p"}))
    rows = [_row("quote", "STRICT", "EVIDENCE-WARRANTED", job_id="a"),
            _row("quote", "HYBRID", "POINTER-LINKED", job_id="b")]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = figures_table(tmp_path)
    assert "| `quote` | 2 | 50.0 % | 50.0 % | 0.0 % | 0.0 % |" in table
    assert "wall time 1.0 min" in table


def test_habits_table_counts_answers_per_mode() -> None:
    rows = [_row("quote", "UNGROUNDED", "UNGROUNDED", answer='"a quote" [E1]'),
            _row("quote", "UNGROUNDED", "UNGROUNDED", answer="The answer is: it.\nMore."),
            _row("quote", "UNGROUNDED", "UNGROUNDED", answer="Q?")]
    table = habits_table(rows)
    assert "| a [E#] tag anywhere | 1 / 3 |" in table
    assert '| starts "The answer is" | 1 / 3 |' in table
    assert "| the question written back | 1 / 3 |" in table


def test_the_real_model_set_is_general_head_and_the_quantifier_subset() -> None:
    def texts(name: str) -> list[str]:
        path = QUESTIONS / name
        return [q.text for q in parse_questions(name, path.read_text(encoding="utf-8"))]

    assert texts("real_model.jsonl") == texts("general.jsonl")[:50] + texts("quantifier_subset.txt")
