"""The embedded index's first stage without SQLite's scorer: FTS5's ``bm25()``, bit for bit.

FTS5 ranks a query ``"t1" OR "t2" OR ...`` by calling ``bm25()`` on every passage that
holds any term, and each call reads the passage's length from another table: about 1 µs
a matching passage, ~1,000 of them a question on the default corpus and ten times as
many at every tenfold of passages. The index also keeps each token's postings (the
passages holding it and how often, in the title and in the text: see
``qfarm.worker.retrieval.postings``), and this module scores them with NumPy, a few
array operations a term, with FTS5's own arithmetic:

    idf(t)      = log((N - n_t + 0.5) / (n_t + 0.5)), or 1e-6 when that is not positive
    freq(t, p)  = title_weight added once per title occurrence, then 1.0 per text one
    score(p)    = sum over the query's terms, in order, of
                  idf(t) * ((freq * (k1 + 1)) / (freq + k1 * (1 - b + b * |p| / avgdl)))

with N the passages, n_t those holding t, |p| the passage's tokens, avgdl the mean,
k1 = 1.2, b = 0.75, and the value FTS5 returns is ``-score`` (lower is better). The
operations are done in FTS5's order on doubles, so the scores are the same numbers, not
close ones: the first stage's ranking, ties and all, does not move (checked on every
question set against ``bm25()``, and by each retriever on its first searches; it falls
back to FTS5 if the SQLite it runs on computes otherwise).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

K1 = 1.2
B = 0.75


@dataclass(frozen=True)
class Postings:
    """One token's postings: ascending passage rowids and the token's count in each
    passage's title and text."""

    rowids: npt.NDArray[np.int32]
    title_tf: npt.NDArray[np.uint16]
    text_tf: npt.NDArray[np.uint16]

    @property
    def hits(self) -> int:
        return len(self.rowids)


@dataclass(frozen=True)
class Collection:
    """What every score needs of the whole index: passages, their tokens, each one's length."""

    rows: int
    tokens: int
    lengths: npt.NDArray[np.int32]  # by rowid (0 where no passage has that rowid)

    @property
    def avgdl(self) -> float:
        return float(self.tokens) / float(self.rows)


def idf(rows: int, hits: int) -> float:
    """FTS5's IDF: never below 1e-6, so a term in over half the passages still counts a little."""
    value = math.log((rows - hits + 0.5) / (hits + 0.5))
    return value if value > 0.0 else 1e-6


def phrase_freq(postings: Postings, title_weight: float) -> npt.NDArray[np.float64]:
    """FTS5's weighted frequency: it adds ``title_weight`` once per title occurrence, then
    1.0 per text occurrence, starting from 0.0. With a whole-number weight the sum is
    exact and a product gives it; otherwise each (title, text) count pair is summed as
    FTS5 sums it, since k additions of a weight need not equal k times it."""
    title = postings.title_tf.astype(np.float64)
    text = postings.text_tf.astype(np.float64)
    if float(title_weight).is_integer() and abs(title_weight) < 2.0**20:
        return title * title_weight + text
    codes = postings.title_tf.astype(np.int64) * 65536 + postings.text_tf
    pairs, inverse = np.unique(codes, return_inverse=True)
    sums = np.empty(len(pairs), dtype=np.float64)
    for i, code in enumerate(pairs.tolist()):
        n_title, n_text = divmod(code, 65536)
        total = 0.0
        for _ in range(n_title):
            total += title_weight
        for _ in range(n_text):
            total += 1.0
        sums[i] = total
    return sums[np.asarray(inverse).reshape(-1)]


def term_scores(
    postings: Postings, collection: Collection, title_weight: float
) -> npt.NDArray[np.float64]:
    """One term's part of the score of each passage in its postings."""
    freq = phrase_freq(postings, title_weight)
    length = collection.lengths[postings.rowids].astype(np.float64)
    weight = idf(collection.rows, postings.hits)
    # As FTS5 writes it: idf * ((freq * (k1 + 1.0)) / (freq + k1 * (1 - b + b * D / avgdl))).
    return weight * ((freq * (K1 + 1.0)) / (freq + K1 * ((1 - B) + (B * length) / collection.avgdl)))


def first_stage(
    terms: Sequence[Postings | None],
    collection: Collection,
    *,
    title_weight: float,
    depth: int,
) -> list[tuple[int, float]]:
    """The ``depth`` best passages for the terms in query order (None: a term no passage
    holds), as (rowid, bm25 value) in FTS5's order: value ascending, then rowid."""
    if depth < 1:
        return []
    present = [p for p in terms if p is not None and p.hits]
    if not present:
        return []
    scores = np.zeros(len(collection.lengths), dtype=np.float64)
    # Matched, kept apart from the score: with a title weight of 0 a passage that holds a
    # term only in its title matches with a score of 0, and FTS5 lists it.
    matched = np.zeros(len(collection.lengths), dtype=np.bool_)
    for postings in present:  # rowids are distinct within a term: the add is one per passage
        scores[postings.rowids] += term_scores(postings, collection, title_weight)
        matched[postings.rowids] = True
    rowids = np.flatnonzero(matched)
    values = -scores[rowids]
    if len(rowids) > depth:
        cut = np.partition(values, depth - 1)[depth - 1]
        keep = values <= cut  # ties at the cut stay; rowid decides among them below
        rowids, values = rowids[keep], values[keep]
    order = np.lexsort((rowids, values))[:depth]
    return [(int(rowids[i]), float(values[i])) for i in order]
