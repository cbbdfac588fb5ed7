"""The parity breakdown of ``python -m bench.perf.retrieval`` (pure part)."""

from __future__ import annotations

from bench.perf.retrieval import parity_breakdown


def test_parity_breakdown_puts_each_question_in_one_category() -> None:
    got = parity_breakdown(
        embedded=["a", "b", "c", "d"],
        cluster=["a", "x", "y", "z"],
        embedded_stage1=[["a#0"], ["b#0", "x#0"], ["c#0"], ["d#0", "z#0"]],
        cluster_stage1=[["a#0"], ["x#0", "q#0"], ["y#0"], ["z#0", "d#0"]],
        most_fields_stage1=[["a#0"], ["x#0", "q#0"], ["c#0"], ["z#0", "d#0"]],
    )
    assert got == {
        "same": 1,
        "candidates differ, stand-in's combined_fields list == its most_fields list": 1,
        "candidates differ, otherwise": 1,
        "same candidates, first-stage scores differ": 1,
    }
