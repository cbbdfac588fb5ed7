"""The parity breakdown of ``python -m bench.perf.retrieval`` (pure part)."""

from __future__ import annotations

from bench.perf.retrieval import PARITY_CATEGORIES, parity_breakdown


def test_parity_breakdown_puts_each_question_in_one_category() -> None:
    got = parity_breakdown(
        embedded=["a", "b", "c", "d"],
        cluster=["a", "x", "y", "z"],
        embedded_stage1=[["a#0"], ["b#0", "x#0"], ["c#0", "y#1"], ["d#0", "z#0"]],
        cluster_stage1=[["a#0"], ["x#0", "q#0"], ["y#0", "c#0"], ["z#0", "d#0"]],
    )
    same, outside, inside, scores = PARITY_CATEGORIES
    # b is not in the cluster's window; c and y are in both windows (y through another
    # passage of its article); d's window holds the same passages as z's.
    assert got == {same: 1, outside: 1, inside: 1, scores: 1}
