"""The embedded backend: a BM25 index on disk in SQLite FTS5.

Why SQLite FTS5 (and not tantivy or a pure-Python BM25): it ships with
Python's standard library (no native build, nothing to download on a fresh
machine or in CI), it is a real on-disk inverted index with Okapi BM25
(k1=1.2, b=0.75, as Lucene), its ``porter`` tokenizer stems English like the
clusters' ``english`` analyzer, and it answers in ~1–4 ms per query on the
default corpus here (``python -m bench.perf.retrieval`` prints the figures).

Ranking shape (``RANKING_VERSION``): title and text scored as one document,
BM25F-style, in one two-column FTS5 table ranked by ``bm25(passages_fts,
title_boost, 1.0)``: a term's frequency is counted ``title_boost`` times in
the title, and its rarity (IDF) and the passage's length are counted once
across both fields, as Elasticsearch's ``combined_fields`` does. Its top 25
(``RERANK_DEPTH``) are then re-scored by ``qfarm.common.retrieval.ranking.rerank_order``
(term coverage, adjacent-word phrases, an article's first sentence, a title
the question names; the first stage's best half of the top k kept), as the
cluster backends re-score theirs. The earlier
shape (one FTS5 index per field, separately normalised BM25 scores added,
``most_fields``) let any short title holding one generic question word
outrank the passage that answers; on the independent description questions
(bench/questions/independent_*.jsonl) it found a gold answer in the top 8 for
63 % of the held-out questions against 89 % for this shape (docs/retrieval.md).

Layout of the file (one file, built elsewhere and renamed into place, so a
reader never sees a half-built index):

* ``meta(key, value)``: index version, corpus label and digest, counts;
* ``documents(doc_id PRIMARY KEY, title, n_passages, chars)``;
* ``passages(rowid, doc_id, chunk_id UNIQUE, title, text, offset_start, offset_end)``;
* ``passages_fts(title, text)``: one FTS5 index over ``passages.title`` and
  ``passages.text`` (external content: the text is stored once);
* ``postings``, ``postings_stats``: each token's passages and counts, taken from
  FTS5's index once it is built; the first stage scores them with FTS5's bm25()
  arithmetic in NumPy (``qfarm.common.retrieval.bm25``: the same numbers, several
  times less CPU). An index without them is ranked by FTS5 itself;
* ``passage_vectors(rowid, vector)``: only in an index built with ``--dense``,
  each passage's all-MiniLM-L6-v2 vector (384 little-endian float32); such an
  index is searched lexically and densely, the two top 30s fused by
  reciprocal rank (``qfarm.common.retrieval.ranking.fuse_ranks``; docs/retrieval.md,
  "Dense stage").
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qfarm.common.errors import RetrievalError
from qfarm.common.grounding.names import TitleSet
from qfarm.common.models import Evidence
from qfarm.common.retrieval.bm25 import first_stage
from qfarm.common.retrieval.chunking import Passage
from qfarm.common.retrieval.corpus import Document
from qfarm.common.retrieval.index import served_index_version
from qfarm.common.retrieval.query import fts5_match_expression, query_terms
from qfarm.common.retrieval.ranking import (
    DENSE_DEPTH,
    RERANK_DEPTH,
    Candidate,
    fuse_ranks,
    rerank_order,
)
from qfarm.common.vocab import Backend
from qfarm.worker.retrieval.postings import PostingsReader, build_postings, index_has_postings

log = logging.getLogger("qfarm.worker")

if TYPE_CHECKING:  # the encoder loads only for an index built with --dense
    from qfarm.worker.retrieval.dense import DenseEncoder

SCHEMA_VERSION = "qfarm-embedded-2"  # 2: one two-column FTS5 table (BM25F)
TOKENIZER = "porter unicode61 remove_diacritics 2"

_SCHEMA = f"""
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE documents(
    doc_id TEXT PRIMARY KEY, title TEXT NOT NULL, n_passages INTEGER NOT NULL, chars INTEGER NOT NULL
);
CREATE TABLE passages(
    rowid INTEGER PRIMARY KEY,
    doc_id TEXT NOT NULL,
    chunk_id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    offset_start INTEGER NOT NULL,
    offset_end INTEGER NOT NULL
);
CREATE VIRTUAL TABLE passages_fts USING fts5(
    title, text, content='passages', content_rowid='rowid', tokenize='{TOKENIZER}'
);
"""

# Rank in the FTS5 table alone (bm25() is negated: lower is better), keep the
# best few, then join their stored fields: joining first would make SQLite run
# the MATCH once per passage.
_VECTORS_SCHEMA = "CREATE TABLE passage_vectors(rowid INTEGER PRIMARY KEY, vector BLOB NOT NULL)"
# FTS5's default 'automerge' (https://sqlite.org/fts5.html#the_automerge_option).
_AUTOMERGE = 4
# Passages encoded per slice when an index is built with --dense: bounds the texts held.
_ENCODE_SLICE = 1024
_SEARCH_SQL = """
SELECT p.doc_id, p.chunk_id, p.title, p.text, p.offset_start, p.offset_end, r.score, r.rowid
FROM (
    SELECT rowid, bm25(passages_fts, ?, 1.0) AS score FROM passages_fts
    WHERE passages_fts MATCH ?{filter} ORDER BY score, rowid LIMIT ?
) AS r JOIN passages AS p ON p.rowid = r.rowid
ORDER BY r.score, r.rowid
"""
# Searches remembered per retriever: the modes and samples of one question come back in
# the next bundles (jobs are question-major), and the index file never changes under an
# open retriever. A question's hits are ~8 passages (~8 kB): 1,024 of them ~8 MB.
SEARCH_CACHE_SIZE = 1024
# Searches a retriever also runs through FTS5's bm25() to check the postings' first stage.
FIRST_STAGE_CHECKS = 3
_ROWS_SQL = (
    "SELECT doc_id, chunk_id, title, text, offset_start, offset_end, 0.0, rowid FROM passages"
    " WHERE rowid IN ({marks})"
)


def _evidence(rank: int, score: float, row: Sequence[Any]) -> Evidence:
    """Evidence block ``E{rank}`` from a row of ``_SEARCH_SQL``'s shape."""
    doc_id, chunk_id, title, text, start, end = row[:6]
    return Evidence(id=f"E{rank}", doc_id=doc_id, chunk_id=chunk_id, title=title, text=text,
                    score=score, offset_start=start, offset_end=end)


class EmbeddedIndexWriter:
    """Fills a new index file; ``finish`` makes it searchable, ``abort`` drops it."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        self._conn = sqlite3.connect(path)
        # A temp file renamed into place when done: durability during the build buys nothing.
        self._conn.execute("PRAGMA journal_mode=OFF")
        self._conn.execute("PRAGMA synchronous=OFF")
        self._conn.executescript(_SCHEMA)
        self.documents = 0
        self.passages = 0
        self.stages_s: dict[str, float] = {}  # finish's stages, seconds each

    def add(self, document: Document, passages: Sequence[Passage]) -> bool:
        """Store one document's passages; ``False`` (nothing stored) for a duplicate id."""
        chars = len(document.text)
        try:
            self._conn.execute(
                "INSERT INTO documents VALUES (?, ?, ?, ?)",
                (document.doc_id, document.title, len(passages), chars),
            )
        except sqlite3.IntegrityError:
            return False
        self._conn.executemany(
            "INSERT INTO passages(doc_id, chunk_id, title, text, offset_start, offset_end)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [
                (p.doc_id, p.chunk_id, p.title, p.text, p.offset_start, p.offset_end)
                for p in passages
            ],
        )
        self.documents += 1
        self.passages += len(passages)
        return True

    def finish(self, meta: dict[str, Any], *, encoder: DenseEncoder | None = None,
               progress: bool = False, reuse: Path | None = None) -> int:  # fmt: skip
        """Build the full-text index in one pass (and the passage vectors with ``encoder``),
        record ``meta`` and close; the number of vectors taken from ``reuse`` (see
        ``_store_vectors``)."""
        conn = self._conn
        t0 = time.perf_counter()
        # No merges while the passages go in: 'optimize' merges every segment once after
        # (FTS5's incremental merges rewrote the index again and again: 25.9 s instead of
        # 20.9 at 1M passages, growing faster than the passages). Back to FTS5's default
        # after, so the file is configured as any other FTS5 table.
        conn.execute("INSERT INTO passages_fts(passages_fts, rank) VALUES('automerge', 0)")
        conn.execute(
            "INSERT INTO passages_fts(rowid, title, text) SELECT rowid, title, text FROM passages"
        )
        # One b-tree segment: a query reads each term's postings once (measured ~x1.5 faster).
        conn.execute("INSERT INTO passages_fts(passages_fts) VALUES('optimize')")
        conn.execute(f"INSERT INTO passages_fts(passages_fts, rank) VALUES('automerge', {_AUTOMERGE})")
        t1 = time.perf_counter()
        # The first stage's own postings, from FTS5's tokens (worker/retrieval/postings.py).
        build_postings(conn, "passages_fts")
        t2 = time.perf_counter()
        self.stages_s = {"full-text": round(t1 - t0, 3), "postings": round(t2 - t1, 3)}
        reused = 0
        if encoder is not None:
            reused = self._store_vectors(encoder, progress, reuse)
            meta = {**meta, "dense_model": encoder.model_id}
            self.stages_s["vectors"] = round(time.perf_counter() - t2, 3)
        values = {
            **meta,
            "schema": SCHEMA_VERSION,
            "documents": self.documents,
            "passages": self.passages,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        conn.executemany("INSERT INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in values.items()])
        conn.commit()
        conn.close()
        return reused

    def _store_vectors(self, encoder: DenseEncoder, progress: bool, reuse: Path | None) -> int:
        """Every passage's vector (title, then text, as the model reads a passage).

        A vector depends only on the model and the passage's title and text, so the
        ones an older index file ``reuse`` holds for the same model and the same
        title and text are copied, not encoded again: a new ranking version or a
        corpus with a few changed articles costs seconds, not minutes. Returns how
        many were copied.
        """
        conn = self._conn
        conn.execute(_VECTORS_SCHEMA)
        reused = self._copy_vectors(reuse, encoder) if reuse is not None else 0
        bar: Any = None
        if progress and self.passages > reused:
            from tqdm import tqdm

            bar = tqdm(total=self.passages - reused, unit="passage", desc="encoding (dense)",
                       dynamic_ncols=True)  # fmt: skip
        try:
            last = 0
            while True:
                rows = conn.execute(
                    "SELECT rowid, title, text FROM passages WHERE rowid > ? AND rowid NOT IN"
                    " (SELECT rowid FROM passage_vectors) ORDER BY rowid LIMIT ?",
                    (last, _ENCODE_SLICE),
                ).fetchall()
                if not rows:
                    break
                vectors = encoder.encode([f"{title}. {text}" for _, title, text in rows],
                                         progress=bar.update if bar is not None else None)  # fmt: skip
                conn.executemany(
                    "INSERT INTO passage_vectors VALUES (?, ?)",
                    [(rowid, vectors[i].astype("<f4").tobytes()) for i, (rowid, _, _) in enumerate(rows)],
                )
                last = rows[-1][0]
        finally:
            if bar is not None:
                bar.close()
        return reused

    def _copy_vectors(self, old: Path, encoder: DenseEncoder) -> int:
        meta = read_meta(old)
        if meta is None or meta.get("dense_model") != encoder.model_id:
            return 0
        conn = self._conn
        conn.commit()  # ATTACH is refused inside a transaction
        conn.execute("ATTACH DATABASE ? AS old", (str(old),))
        try:
            before = conn.total_changes
            conn.execute(
                "INSERT OR IGNORE INTO passage_vectors(rowid, vector)"
                " SELECT p.rowid, v.vector FROM passages AS p"
                " JOIN old.passages AS o ON o.title = p.title AND o.text = p.text"
                " JOIN old.passage_vectors AS v ON v.rowid = o.rowid"
                " WHERE length(v.vector) = ?",
                (4 * encoder.dimensions,),
            )
            copied = conn.total_changes - before
            conn.commit()
        except sqlite3.Error:
            copied = 0  # an unreadable old file: encode everything, as without one
            conn.rollback()
        finally:
            conn.execute("DETACH DATABASE old")
        return copied

    def abort(self) -> None:
        self._conn.close()
        self.path.unlink(missing_ok=True)


def read_meta(path: Path) -> dict[str, str] | None:
    """The ``meta`` table of an index file; ``None`` when missing or not a qfarm index."""
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT key, value FROM meta").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return None
    meta = dict(rows)
    return meta if meta.get("schema") == SCHEMA_VERSION else None


class EmbeddedRetriever:
    """BM25 search over an index file; one read-only connection per thread.

    The connections keep SQLite's default page cache: a larger one (64 MB, the whole
    default index) and a memory-mapped file were measured on the first stage's query
    and saved nothing (its cost is ``bm25()`` over every matching row, not page reads).
    """

    backend: Backend = Backend.EMBEDDED

    def __init__(self, path: Path, *, dense_model: Path | None = None, postings: bool = True):
        self.path = path
        meta = read_meta(path)
        if meta is None:
            reason = (
                "not found" if not path.exists() else "is not a qfarm index (or an older format)"
            )
            raise RetrievalError(
                f"embedded index {path} {reason}: run `qfarm index` first "
                "(or point QFARM_INDEX_PATH at an index built by `qfarm index`)"
            )
        if postings and not index_has_postings(path):
            raise RetrievalError(
                f"embedded index {path} has no postings tables, which `qfarm index` builds "
                "with every index: rebuild it with `qfarm index --force`"
            )
        self._meta = meta
        self._uri = f"{path.resolve().as_uri()}?mode=ro"
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._titles: TitleSet | None = None
        self._searches: OrderedDict[tuple[str, int, float], list[Evidence]] = OrderedDict()
        # The NumPy first stage (common/retrieval/bm25.py), for an index that has postings;
        # its first searches are also run by FTS5 and must agree to the bit, or FTS5 ranks
        # alone from then on (a SQLite whose bm25() computes in another order).
        # ``postings=False``: FTS5 ranks alone (the benchmarks and tests that compare the two).
        self._postings: PostingsReader | None = None
        self._postings_checked = not postings
        self._checks_left = FIRST_STAGE_CHECKS
        # An index built with --dense is searched with its vectors; the model loads on the
        # first search (``passages`` alone, as the viewer reads them, never needs it).
        self._dense: _DenseIndex | None = None
        if meta.get("dense_model"):
            self._dense = _DenseIndex(self, meta["dense_model"], dense_model)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def search(
        self,
        query: str,
        *,
        top_k: int,
        title_boost: float,
        doc_ids: Sequence[str] | None = None,
    ) -> list[Evidence]:
        if doc_ids is not None:
            return self._search(query, top_k=top_k, title_boost=title_boost, doc_ids=doc_ids)
        # The same question, searched again with the same settings, has the same hits
        # (Evidence is frozen: the list is copied, its blocks shared).
        key = (query, int(top_k), float(title_boost))
        with self._lock:
            found = self._searches.get(key)
            if found is not None:
                self._searches.move_to_end(key)
                return list(found)
        found = self._search(query, top_k=top_k, title_boost=title_boost, doc_ids=None)
        with self._lock:
            self._searches[key] = found
            while len(self._searches) > SEARCH_CACHE_SIZE:
                self._searches.popitem(last=False)
        return list(found)

    def forget_searches(self) -> None:
        """Drop the remembered searches: the next search of any question is answered from
        the index (``qfarm eval-retrieval`` times only such cold searches)."""
        with self._lock:
            self._searches.clear()

    def _search(
        self, query: str, *, top_k: int, title_boost: float, doc_ids: Sequence[str] | None
    ) -> list[Evidence]:
        if top_k < 1:
            return []
        # Stage 1 fetches the re-ranking window; stage 2 re-scores it (RANKING_VERSION).
        depth = max(int(top_k), RERANK_DEPTH if self._dense is None else DENSE_DEPTH)
        rows = self._ranked_rows(query, title_boost, depth, doc_ids)
        if rows is None:
            return []
        # bm25() is negated (lower is better); stage 2 wants higher-is-better.
        candidates = [Candidate(-row[6], row[2], row[3], lead=row[4] == 0) for row in rows]
        if self._dense is None:
            order = rerank_order(query, candidates, top_k)
        else:
            # Fusion reads the whole stage-2 order; the dense list does the rescuing.
            lexical = rerank_order(query, candidates, max(int(top_k), DENSE_DEPTH), keep_first=0)
            rows, order = self._dense.fuse(query, rows, lexical, top_k, doc_ids)
        return [_evidence(rank, round(score, 6), rows[i])
                for rank, (i, score) in enumerate(order, start=1)]

    def first_stage(self, query: str, *, title_boost: float, depth: int) -> list[Evidence]:
        """The first stage's best ``depth`` passages in its order, before stage 2 (``score``:
        BM25F, higher is better): what stage 2 would choose from, for diagnostics and the
        scale benchmark, which reads far past the re-ranking window."""
        rows = self._ranked_rows(query, title_boost, int(depth), None) or []
        return [_evidence(rank, -row[6], row) for rank, row in enumerate(rows, start=1)]

    def _ranked_rows(
        self, query: str, title_boost: float, depth: int, doc_ids: Sequence[str] | None
    ) -> list[Any] | None:
        """The first stage's best ``depth`` rows (``_SEARCH_SQL``'s shape), best first;
        None when nothing can match (no term in the question, no document allowed)."""
        match = fts5_match_expression(query)
        if match is None or depth < 1:
            return None
        where = ""
        filter_params: list[str] = []
        if doc_ids is not None:
            if not doc_ids:
                return None
            marks = ", ".join("?" * len(doc_ids))
            where = f" AND rowid IN (SELECT rowid FROM passages WHERE doc_id IN ({marks}))"
            filter_params = list(doc_ids)
        params: list[Any] = [float(title_boost), match, *filter_params, depth]
        try:
            rows = None if doc_ids is not None else self._first_stage(query, title_boost, depth)
            if rows is None:
                rows = self._conn().execute(_SEARCH_SQL.format(filter=where), params).fetchall()
            elif rows and self._checks_left > 0:
                self._check_first_stage(rows, params)
        except sqlite3.Error as exc:
            raise RetrievalError(
                f"embedded index {self.path}: query failed ({exc}); rebuild it with `qfarm index --force`"
            ) from exc
        return rows

    def _reader(self) -> PostingsReader | None:
        if not self._postings_checked:
            with self._lock:
                if not self._postings_checked:
                    self._postings = PostingsReader(self._conn, TOKENIZER)
                    self._postings_checked = True
        return self._postings

    def _first_stage(self, query: str, title_boost: float, depth: int) -> list[Any] | None:
        """Stage 1 from the postings, as rows of ``_SEARCH_SQL``'s shape; None when FTS5
        must rank (no postings, a term FTS5 reads as a phrase, or the check failed)."""
        reader = self._reader()
        if reader is None:
            return None
        tokens = reader.tokens(query_terms(query))
        if any(len(t) != 1 for t in tokens):
            return None
        hits = first_stage([reader.postings(t) for (t,) in tokens], reader.collection(),
                           title_weight=title_boost, depth=depth)  # fmt: skip
        if not hits:
            return []
        by_rowid = {row[7]: row for row in self._conn().execute(
            _ROWS_SQL.format(marks=", ".join("?" * len(hits))), [r for r, _ in hits])}  # fmt: skip
        return [(*by_rowid[r][:6], value, r) for r, value in hits]

    def _check_first_stage(self, rows: list[Any], params: list[Any]) -> None:
        """While checks are left: FTS5's own ranking of the same query must be ``rows``."""
        if self._postings is None:
            return
        with self._lock:
            if self._checks_left <= 0:
                return
            self._checks_left -= 1
        expected = self._conn().execute(_SEARCH_SQL.format(filter=""), params).fetchall()
        if [(r[7], r[6]) for r in expected] != [(r[7], r[6]) for r in rows]:
            log.warning("embedded index %s: the postings' first stage disagrees with this "
                        "SQLite's bm25() (version %s); FTS5 ranks alone from now on",
                        self.path, sqlite3.sqlite_version)  # fmt: skip
            self._postings = None
            rows[:] = expected

    def first_stage_kind(self) -> str:
        """``postings`` (the NumPy first stage) or ``fts5``."""
        return "postings" if self._reader() is not None else "fts5"

    def search_many(
        self, queries: Sequence[str], *, top_k: int, title_boost: float
    ) -> list[list[Evidence]]:
        self._learn_terms(queries, top_k, title_boost)
        return [self.search(q, top_k=top_k, title_boost=title_boost) for q in queries]

    def _learn_terms(self, queries: Sequence[str], top_k: int, title_boost: float) -> None:
        """The first stage's tokens of every question about to be searched, learnt in one
        pass (``PostingsReader.learn``): a pass per question cost 0.17 ms a question on
        the distinct tuning and held-out questions, a pass per 32 of them 0.03 ms."""
        reader = self._reader()
        if reader is None:
            return
        with self._lock:
            new = [q for q in queries if (q, int(top_k), float(title_boost)) not in self._searches]
        reader.learn([term for q in new for term in query_terms(q)])

    def passages(self, chunk_ids: Sequence[str]) -> dict[str, Evidence]:
        """The passages with these chunk ids (a row's ``evidence_passage_ids``), by id.

        Not a search: ``id`` is the chunk id and ``score`` 0, the caller numbers the
        blocks. Ids the index does not hold are absent from the result.
        """
        if not chunk_ids:
            return {}
        marks = ", ".join("?" * len(chunk_ids))
        sql = (
            "SELECT doc_id, chunk_id, title, text, offset_start, offset_end FROM passages"
            f" WHERE chunk_id IN ({marks})"
        )
        try:
            rows = self._conn().execute(sql, list(chunk_ids)).fetchall()
        except sqlite3.Error as exc:
            raise RetrievalError(f"embedded index {self.path}: passage lookup failed ({exc})") from exc
        return {
            chunk_id: Evidence(
                id=chunk_id, doc_id=doc_id, chunk_id=chunk_id, title=title, text=text,
                score=0.0, offset_start=start, offset_end=end,
            )
            for doc_id, chunk_id, title, text, start, end in rows
        }

    def check_dense_model(self) -> None:
        """``ConfigError`` now if this index needs the dense model and it is not installed.

        ``open_retriever`` calls it, so a worker without the model fails at start with
        the install command rather than writing one error row per job.
        """
        if self._dense is not None:
            from qfarm.worker.retrieval.dense import locate_model

            locate_model(self._dense.explicit)

    def title_set(self) -> TitleSet:
        """The documents' titles, read once: the preflight reads a title as a name."""
        if self._titles is None:
            rows = self._conn().execute("SELECT title FROM documents").fetchall()
            self._titles = TitleSet(row[0] for row in rows)  # two threads may both build it: equal
        return self._titles

    def index_version(self) -> str:
        # The ranking this code applies, not the one of the build (served_index_version).
        return served_index_version(self._meta, dense=self._dense is not None)

    def describe(self) -> dict[str, Any]:
        m = self._meta
        return {
            **({"dense_model": m["dense_model"]} if m.get("dense_model") else {}),
            "backend": self.backend,
            "index": str(self.path),
            "index_version": m.get("index_version"),
            "corpus": m.get("corpus"),
            "corpus_digest": m.get("corpus_digest"),
            "chunker_version": m.get("chunker_version"),
            "documents": int(m.get("documents", 0)),
            "passages": int(m.get("passages", 0)),
            "built_at": m.get("built_at"),
            # "fts5": opened with postings=False, or the first stage disagreed with FTS5.
            "first_stage": self.first_stage_kind(),
        }

    def close(self) -> None:
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
            self._searches.clear()
        self._local = threading.local()


class _DenseIndex:
    """The passage vectors of an index built with --dense, and the encoder for questions.

    Loaded on the first search, once per process (11k passages: 17 MB of
    float32, ~0.3 s with the model); a search reads them without the lock.
    """

    def __init__(self, owner: EmbeddedRetriever, model_id: str, explicit: Path | None):
        self._owner = owner
        self.model_id = model_id
        self.explicit = explicit  # QFARM_DENSE_MODEL, else the installed model
        self._loaded: tuple[Any, Any, DenseEncoder] | None = None
        self._question_vector: Callable[[str], Any] = lambda text: None
        self._lock = threading.Lock()

    def _load(self) -> tuple[Any, Any, DenseEncoder]:
        with self._lock:
            if self._loaded is None:
                import numpy as np

                from qfarm.worker.retrieval.dense import encoder_at, locate_model

                folder = locate_model(self.explicit)
                encoder = encoder_at(folder)
                if encoder.model_id != self.model_id:
                    raise RetrievalError(
                        f"embedded index {self._owner.path} was encoded with {self.model_id}, "
                        f"the model at {folder} is {encoder.model_id}; rebuild the index "
                        "(`qfarm index --dense --force`) or point QFARM_DENSE_MODEL at that model"
                    )
                conn = self._owner._conn()
                pairs = conn.execute("SELECT rowid, vector FROM passage_vectors ORDER BY rowid").fetchall()
                (passages,) = conn.execute("SELECT count(*) FROM passages").fetchone()
                width = 4 * encoder.dimensions
                if len(pairs) != passages or any(len(v) != width for _, v in pairs):
                    # A passage without its vector would silently never be found densely.
                    raise RetrievalError(
                        f"embedded index {self._owner.path}: {len(pairs)} passage vectors for "
                        f"{passages} passages, or vectors not of {encoder.dimensions} float32; "
                        "rebuild it with `qfarm index --dense --force`"
                    )
                rowids = np.fromiter((r for r, _ in pairs), dtype=np.int64, count=len(pairs))
                matrix = np.frombuffer(b"".join(v for _, v in pairs), dtype="<f4").reshape(
                    len(pairs), encoder.dimensions
                )
                self._loaded = (rowids, matrix, encoder)
                # One BLAS thread in a process that searches: a question is a few small
                # matrix products, and workers run one process per core. Two threads per
                # process cost 4x the retrieval time of a 2-process farm's bundle (450
                # against 115 ms p50) and 1.5x the CPU of an eager sweep, for 15 % less
                # latency on an idle machine. Process-wide, once (docs/retrieval.md,
                # 'Dense stage'): changing it around each call races other threads' calls.
                from threadpoolctl import threadpool_limits

                threadpool_limits(limits=1, user_api="blas")
                # A sweep searches each question again in later bundles: ~7 ms saved each time.
                self._question_vector = functools.lru_cache(maxsize=4096)(
                    lambda text: encoder.encode([text])[0]
                )
            return self._loaded

    def fuse(
        self,
        query: str,
        rows: list[Any],
        lexical: list[tuple[int, float]],
        top_k: int,
        doc_ids: Sequence[str] | None,
    ) -> tuple[list[Any], list[tuple[int, float]]]:
        """(rows, order) as ``search`` reads them: the lexical and dense top lists fused.

        ``rows`` are stage 1's, ``lexical`` stage 2's order over them; the dense
        list's passages that stage 1 did not fetch are read and appended to ``rows``.
        """
        import numpy as np

        rowids, matrix, _ = self._load()
        sims = matrix @ self._question_vector(query)
        if doc_ids is not None:  # the same filter as the lexical query
            allowed = {r for (r,) in self._owner._conn().execute(
                f"SELECT rowid FROM passages WHERE doc_id IN ({', '.join('?' * len(doc_ids))})",
                list(doc_ids),
            )}  # fmt: skip
            sims = np.where(np.isin(rowids, list(allowed)), sims, -np.inf)
        depth = min(max(int(top_k), DENSE_DEPTH), len(rowids))
        top = np.argpartition(-sims, depth - 1)[:depth] if depth else np.array([], dtype=np.int64)
        top = top[np.argsort(-sims[top], kind="stable")]
        dense = [int(rowids[i]) for i in top if np.isfinite(sims[i])]
        position = {row[7]: i for i, row in enumerate(rows)}
        missing = [r for r in dense if r not in position]
        if missing:
            extra = self._owner._conn().execute(
                _ROWS_SQL.format(marks=", ".join("?" * len(missing))), missing
            ).fetchall()
            for row in extra:
                position[row[7]] = len(rows)
                rows = [*rows, row]
        fused = fuse_ranks([[rows[i][7] for i, _ in lexical], dense])[:top_k]
        return rows, [(position[rowid], score) for rowid, score in fused]


def check_index_pages(path: Path, corpus: str | None = None) -> None:
    """Raise RetrievalError naming the rebuild command if any page of the index is damaged.

    A query reads only the pages it needs, so a damaged index can answer some questions
    and fail others; ``PRAGMA quick_check`` reads every page (about 40 ms for the
    default corpus's 12 MB), so a command can refuse the index before it starts.
    """
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)").fetchall()]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        problems = [str(exc)]
    if problems == ["ok"]:
        return
    detail = "; ".join(" ".join(p.split()) for p in problems)[:200]
    rebuild = "qfarm index --force" + (f" --corpus {corpus}" if corpus and corpus != "default" else "")
    raise RetrievalError(
        f"embedded index {path} is damaged ({detail}); rebuild it with `{rebuild}`"
    )
