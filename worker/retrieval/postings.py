"""The embedded index's postings: each token's passages, read by the NumPy first stage.

Built from FTS5's own index once it is complete (``fts5vocab``'s ``instance`` table
lists every token FTS5 stored, after its tokenizer and stemmer, with its passage and
column), so the postings are FTS5's tokens and not a second tokenizer's guess. Two
tables in the index file:

* ``postings(token PRIMARY KEY, rowids, tf)``: ascending passage rowids (int32) and the
  token's count in each one's title and text (uint16 pairs), little-endian;
* ``postings_stats(key, value)``: ``rows``, ``tokens`` and ``lengths`` (each passage's
  token count, int32 by rowid).

An index without these tables is refused when it is opened (``EmbeddedRetriever``), naming
``qfarm index --force``; the default index is rebuilt with them (``ensure_default_index``).

A question's terms are tokenized by FTS5 too: each connection keeps a temporary FTS5
table with the index's tokenizer, and a term's tokens are what it stores for it (kept
per term). A term of several tokens is a phrase for FTS5 (its score counts the phrase,
not its words): such a query is left to FTS5.
"""

from __future__ import annotations

import logging
import sqlite3
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from qfarm.common.retrieval.bm25 import Collection, Postings

log = logging.getLogger("qfarm.worker")

SCHEMA = """
CREATE TABLE postings(token TEXT PRIMARY KEY, rowids BLOB NOT NULL, tf BLOB NOT NULL);
CREATE TABLE postings_stats(key TEXT PRIMARY KEY, value BLOB NOT NULL);
"""
# Tokens' postings kept decoded per retriever, by bytes (a common token's at a million
# passages is about a megabyte).
CACHE_BYTES = 64 * 2**20
# Terms whose tokens are remembered per retriever.
TOKEN_CACHE_SIZE = 65536


def has_postings(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'postings_stats'"
    ).fetchone()
    return bool(row and row[0])


def index_has_postings(path: Path) -> bool:
    """Whether the index file at ``path`` has postings (False if it cannot be read)."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        return has_postings(conn)
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def build_postings(conn: sqlite3.Connection, fts_table: str, batch: int = 2048) -> int:
    """Write the postings of ``fts_table`` (built and optimized) into ``conn``'s file;
    returns the tokens written. One scan of FTS5's instance list grouped by token (FTS5
    lists it in token order: no sort), each token's instances as one string of numbers
    that SQLite writes and NumPy parses: a row a token instead of a Python tuple an
    instance, which was most of a million-passage build. What is held at once is one
    token's instances (8 bytes each: tens of megabytes for the commonest token of a
    million passages)."""
    conn.executescript(SCHEMA)
    conn.execute(
        f"CREATE VIRTUAL TABLE temp.qfarm_instances USING fts5vocab(main, {fts_table}, 'instance')"
    )
    max_rowid = conn.execute(f"SELECT coalesce(max(rowid), 0) FROM {fts_table}").fetchone()[0]
    rows = conn.execute(f"SELECT count(*) FROM {fts_table}").fetchone()[0]
    lengths = np.zeros(max_rowid + 1, dtype=np.int64)
    pending: list[tuple[str, bytes, bytes]] = []
    written = 0
    # Each instance as rowid x 2 + column (0 title, 1 text), comma-separated per token.
    grouped = conn.execute(
        "SELECT term, group_concat(doc * 2 + (col = 'text'), ',') FROM temp.qfarm_instances"
        " GROUP BY term"
    )
    for token, text in grouped:
        stored = _few_postings if len(text) < _FEW_CHARS else _many_postings
        pending.append((token, *stored(text, lengths)))
        if len(pending) >= batch:
            conn.executemany("INSERT INTO postings VALUES (?, ?, ?)", pending)
            written += len(pending)
            pending = []
    conn.executemany("INSERT INTO postings VALUES (?, ?, ?)", pending)
    written += len(pending)
    conn.execute("DROP TABLE temp.qfarm_instances")
    conn.executemany("INSERT INTO postings_stats VALUES (?, ?)", [
        ("rows", str(rows).encode()),
        ("tokens", str(int(lengths.sum())).encode()),
        ("lengths", lengths.astype("<i4").tobytes()),
    ])  # fmt: skip
    return written


# A token whose instances take fewer characters than this (a dozen or so: most tokens)
# is counted in Python: NumPy's calls cost more than the work on so few numbers.
_FEW_CHARS = 128


def _many_postings(text: str, lengths: np.ndarray) -> tuple[bytes, bytes]:
    """A token's stored (rowids, tf) from its comma-separated instances (rowid x 2 +
    column); adds its counts to ``lengths``."""
    rowids, tf = _postings_of(np.fromstring(text, dtype=np.int64, sep=","))
    lengths[rowids] += tf.sum(axis=1)
    return rowids.astype("<i4").tobytes(), tf.astype("<u2").tobytes()


def _few_postings(text: str, lengths: np.ndarray) -> tuple[bytes, bytes]:
    """``_many_postings`` of a few instances, counted in Python."""
    counts: dict[int, list[int]] = {}
    for code in map(int, text.split(",")):
        pair = counts.get(code >> 1)
        if pair is None:
            pair = counts[code >> 1] = [0, 0]
        pair[code & 1] += 1
    rowids = sorted(counts)
    for rowid in rowids:
        lengths[rowid] += sum(counts[rowid])
    tf = [n for rowid in rowids for n in counts[rowid]]
    return struct.pack(f"<{len(rowids)}i", *rowids), struct.pack(f"<{len(tf)}H", *tf)


def _postings_of(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rowids, counts[title, text]) of one token from its instances' rowid x 2 + column.

    FTS5 lists a token's instances by passage and column, so ``codes`` come sorted and
    equal ones are runs (sorted here if not)."""
    step = np.diff(codes)
    if (step < 0).any():
        codes = np.sort(codes)
        step = np.diff(codes)
    starts = np.flatnonzero(np.concatenate(([True], step != 0)))
    unique = codes[starts]
    counts = np.diff(np.append(starts, len(codes)))
    rowid_of = unique >> 1
    new_rowid = np.concatenate(([True], rowid_of[1:] != rowid_of[:-1]))
    rowids = rowid_of[new_rowid]
    tf = np.zeros((len(rowids), 2), dtype=np.int64)
    tf[np.cumsum(new_rowid) - 1, unique & 1] = counts
    if tf.max() > _MAX_TF:
        raise ValueError("a passage holds a token more than 65,535 times: chunk it smaller")
    return rowids, tf


_MAX_TF = int(np.iinfo(np.uint16).max)


class PostingsReader:
    """A retriever's access to the postings of one index file (thread-safe: each thread
    reads through its own connection, given by ``conn``)."""

    def __init__(self, conn: Callable[[], sqlite3.Connection], tokenizer: str):
        self._conn = conn
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        self._collection: Collection | None = None
        self._postings: OrderedDict[str, Postings | None] = OrderedDict()
        self._bytes = 0
        self._tokens: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._local = threading.local()

    def collection(self) -> Collection:
        if self._collection is None:
            stats = dict(self._conn().execute("SELECT key, value FROM postings_stats").fetchall())
            lengths = np.frombuffer(stats["lengths"], dtype="<i4")
            self._collection = Collection(
                rows=int(stats["rows"]), tokens=int(stats["tokens"]), lengths=lengths
            )
        return self._collection

    def tokens(self, terms: Sequence[str]) -> list[tuple[str, ...]]:
        """Each term as FTS5's tokenizer stores it (a stemmed word; several for a phrase)."""
        self.learn(terms)
        with self._lock:
            return [self._tokens.get(t, ()) for t in terms]

    def learn(self, terms: Sequence[str]) -> None:
        """Tokenize the terms not known yet, all in one pass through FTS5.

        A pass costs about as much for one word as for a hundred (the temporary table's
        write, read back and delete): a bundle's questions learn their new words together
        before they are searched one by one.
        """
        with self._lock:
            missing = [t for t in dict.fromkeys(terms) if t not in self._tokens]
        if not missing:
            return
        found = self._tokenize(missing)
        with self._lock:
            for term in missing:
                self._tokens[term] = found.get(term, ())
            while len(self._tokens) > TOKEN_CACHE_SIZE:
                self._tokens.popitem(last=False)

    def _tokenize(self, terms: list[str]) -> dict[str, tuple[str, ...]]:
        conn = self._conn()
        if not getattr(self._local, "tokenizer_ready", False):
            conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.qfarm_tok USING fts5"
                         f"(x, tokenize='{self._tokenizer}')")  # fmt: skip
            conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.qfarm_tokv"
                         " USING fts5vocab(temp, qfarm_tok, 'instance')")  # fmt: skip
            self._local.tokenizer_ready = True
        conn.executemany("INSERT INTO temp.qfarm_tok(rowid, x) VALUES (?, ?)",
                         list(enumerate(terms, start=1)))  # fmt: skip
        try:
            out: dict[int, list[str]] = {}
            for doc, token in conn.execute(
                "SELECT doc, term FROM temp.qfarm_tokv ORDER BY doc, offset"
            ):
                out.setdefault(doc, []).append(token)
        finally:
            conn.execute("DELETE FROM temp.qfarm_tok")
            conn.commit()  # sqlite3 opened a transaction for the writes: end it
        return {term: tuple(out.get(i, ())) for i, term in enumerate(terms, start=1)}

    def postings(self, token: str) -> Postings | None:
        """The token's postings (None: no passage holds it)."""
        with self._lock:
            if token in self._postings:
                self._postings.move_to_end(token)
                return self._postings[token]
        row = self._conn().execute(
            "SELECT rowids, tf FROM postings WHERE token = ?", (token,)
        ).fetchone()
        found: Postings | None = None
        size = 64
        if row is not None:
            tf = np.frombuffer(row[1], dtype="<u2").reshape(-1, 2)
            found = Postings(np.frombuffer(row[0], dtype="<i4"), tf[:, 0], tf[:, 1])
            size += len(row[0]) + len(row[1])
        with self._lock:
            if token not in self._postings:
                self._postings[token] = found
                self._bytes += size
            while self._bytes > CACHE_BYTES and len(self._postings) > 1:
                _, old = self._postings.popitem(last=False)
                self._bytes -= 64 + (0 if old is None else old.hits * 8)
        return found
