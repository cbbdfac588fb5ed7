"""FTS5's bm25() as the first stage computes it from postings (common/retrieval/bm25.py)."""

from __future__ import annotations

import math

import numpy as np

from qfarm.common.retrieval.bm25 import Collection, Postings, first_stage, idf, phrase_freq


def postings(rowids: list[int], title: list[int], text: list[int]) -> Postings:
    return Postings(np.array(rowids, dtype=np.int32), np.array(title, dtype=np.uint16),
                    np.array(text, dtype=np.uint16))  # fmt: skip


COLLECTION = Collection(rows=6, tokens=60, lengths=np.array([0, 10, 10, 10, 20, 5, 5], np.int32))


def test_idf_is_fts5_s_and_never_below_one_millionth() -> None:
    assert idf(1000, 10) == math.log((1000 - 10 + 0.5) / (10 + 0.5))
    assert idf(10, 9) == 1e-6  # in most passages: the formula goes negative
    assert idf(10, 5) == 1e-6  # exactly half: log(1) = 0 is not positive either


def test_a_fractional_title_weight_is_added_as_fts5_adds_it() -> None:
    p = postings([1, 2, 3], [3, 0, 7], [0, 2, 1])
    total = 0.0
    for _ in range(7):
        total += 0.1
    total += 1.0
    assert phrase_freq(p, 0.1).tolist() == [0.1 + 0.1 + 0.1, 2.0, total]
    assert total != 7 * 0.1 + 1.0  # why a product would not do
    assert phrase_freq(p, 2.0).tolist() == [6.0, 2.0, 15.0]


def test_order_is_score_then_rowid_and_ties_at_the_cut_are_decided_by_rowid() -> None:
    # Rowids 1, 2, 3 hold the term once in equal-length passages: equal scores.
    term = postings([1, 2, 3, 4], [0, 0, 0, 0], [1, 1, 1, 1])
    hits = first_stage([term], COLLECTION, title_weight=2.0, depth=2)
    assert [r for r, _ in hits] == [1, 2]
    assert hits[0][1] == hits[1][1] < 0  # FTS5's value: the score negated
    every = first_stage([term], COLLECTION, title_weight=2.0, depth=10)
    assert [r for r, _ in every] == [1, 2, 3, 4]  # the longer passage scores lower


def test_terms_add_in_query_order_and_unmatched_terms_count_nothing() -> None:
    a, b = postings([1, 5], [1, 0], [0, 2]), postings([5, 6], [0, 0], [1, 1])
    hits = dict(first_stage([a, None, b], COLLECTION, title_weight=2.0, depth=5))
    assert set(hits) == {1, 5, 6}
    assert hits[5] < hits[1] and hits[5] < hits[6]  # both terms: the best


def test_a_title_weight_of_zero_still_lists_a_title_only_match() -> None:
    term = postings([2, 3], [1, 0], [0, 1])
    hits = first_stage([term], COLLECTION, title_weight=0.0, depth=5)
    assert [r for r, _ in hits] == [3, 2]
    assert hits[1][1] == 0.0
