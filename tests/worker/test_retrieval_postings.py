"""The embedded index's NumPy first stage gives FTS5's bm25() ranking to the bit.

Compared search by search against the same index searched by FTS5 alone, on questions
the code did not shape: a sample of every shipped question set, and word sequences drawn
at random from the corpus's own passages (stems that collide, numbers, words with
diacritics, a word repeated, words in other scripts), at several title weights.
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from qfarm.common.retrieval import bm25
from qfarm.worker.retrieval.embedded import EmbeddedRetriever

REPO = Path(__file__).resolve().parents[2]
WORD = re.compile(r"[^\W_]+")


def fts5_only(path: Path) -> EmbeddedRetriever:
    return EmbeddedRetriever(path, postings=False)  # as an index without postings is searched


def shipped_questions(every: int = 7) -> list[str]:
    out: list[str] = []
    for path in sorted((REPO / "bench/questions").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("{"):
                text = json.loads(line).get("question")
                if text:
                    out.append(text)
    for path in sorted((REPO / "bench/questions").glob("*.txt")):
        out += [ln for ln in path.read_text(encoding="utf-8").splitlines()
                if ln.strip() and not ln.startswith("#")]  # fmt: skip
    return out[::every]


def drawn_questions(index: Path, count: int, seed: int) -> list[str]:
    """Word runs and bags drawn from random passages, plus words FTS5 stems alike."""
    conn = sqlite3.connect(index)
    texts = [t for (t,) in conn.execute("SELECT title || ' ' || text FROM passages")]
    conn.close()
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words = WORD.findall(rng.choice(texts))
        k = rng.randint(1, min(9, len(words)))
        if rng.random() < 0.5:  # a run of the passage, as a question quoting it would
            start = rng.randrange(len(words) - k + 1)
            picked = words[start:start + k]
        else:  # words of two passages mixed
            picked = rng.sample(words, k) + rng.sample(WORD.findall(rng.choice(texts)), 1)
        if rng.random() < 0.2:
            picked.append(rng.choice(picked))  # a word twice: one term (terms are distinct)
        out.append(" ".join(w.upper() if rng.random() < 0.1 else w for w in picked) + "?")
    out += ["running runs ran runner", "café cafe CAFÉ", "naïve Zoë Ångström", "1960s 1960",
            "東京 Tokyo", "Who was the 16th president?", "a\u19b0b jazz"]  # fmt: skip
    return out


@pytest.fixture(scope="module")
def index(default_index: Path) -> Path:
    return default_index


@pytest.mark.parametrize("title_boost", [2.0, 1.7, 0.0])
def test_the_postings_rank_exactly_as_fts5_does(index: Path, title_boost: float) -> None:
    fast, slow = EmbeddedRetriever(index), fts5_only(index)
    assert fast.first_stage_kind() == "postings"
    questions = shipped_questions() + drawn_questions(index, 400, seed=int(title_boost * 10))
    differ = [q for q in questions
              if fast._search(q, top_k=8, title_boost=title_boost, doc_ids=None)
              != slow._search(q, top_k=8, title_boost=title_boost, doc_ids=None)]  # fmt: skip
    assert not differ, f"{len(differ)} of {len(questions)} differ, e.g. {differ[:3]}"
    assert fast._postings is not None  # its own checks agreed too
    fast.close()
    slow.close()


def test_a_term_fts5_reads_as_a_phrase_is_left_to_fts5(index: Path) -> None:
    retriever = EmbeddedRetriever(index)
    reader = retriever._reader()
    assert reader is not None
    # U+19B0 is a word character to Python and a separator to unicode61: "a\u19b0b" is
    # the phrase "a b" to FTS5, and "\u19b0" alone no token at all.
    assert reader.tokens(["a\u19b0b", "\u19b0", "running"]) == [("a", "b"), (), ("run",)]
    assert retriever._first_stage("a\u19b0b jazz", 2.0, 25) is None
    assert retriever._first_stage("jazz", 2.0, 25)
    retriever.close()


def test_a_disagreement_with_fts5_turns_the_postings_off(index: Path, monkeypatch, caplog) -> None:
    real = bm25.first_stage

    def off_by_a_bit(*args, **kwargs):
        return [(rowid, value * (1 + 1e-15)) for rowid, value in real(*args, **kwargs)]

    monkeypatch.setattr("qfarm.worker.retrieval.embedded.first_stage", off_by_a_bit)
    retriever, reference = EmbeddedRetriever(index), fts5_only(index)
    with caplog.at_level(logging.WARNING, logger="qfarm.worker"):
        got = retriever._search("What is jazz?", top_k=8, title_boost=2.0, doc_ids=None)
    assert got == reference._search("What is jazz?", top_k=8, title_boost=2.0, doc_ids=None)
    assert retriever.first_stage_kind() == "fts5"
    assert "disagrees with this SQLite's bm25()" in caplog.text
    retriever.close()
    reference.close()


def test_an_index_without_postings_is_refused_naming_the_rebuild(index: Path, tmp_path: Path) -> None:
    from qfarm.common.errors import RetrievalError

    old = tmp_path / "old.sqlite"
    shutil.copy(index, old)
    conn = sqlite3.connect(old)
    conn.executescript("DROP TABLE postings; DROP TABLE postings_stats;")
    conn.close()
    with pytest.raises(RetrievalError, match=r"no postings tables.*qfarm index --force"):
        EmbeddedRetriever(old)
    fts5 = EmbeddedRetriever(old, postings=False)  # FTS5 alone still reads it, as asked
    assert fts5.describe()["first_stage"] == "fts5" and fts5.search("Who was Napoleon?", top_k=8, title_boost=2.0)
    fts5.close()


def test_the_default_index_without_postings_is_rebuilt_with_them(index: Path, tmp_path: Path) -> None:
    from qfarm.common.settings import Settings
    from qfarm.worker.retrieval import ensure_default_index
    from qfarm.worker.retrieval.postings import index_has_postings

    settings = Settings(data_dir=tmp_path)
    dest = settings.embedded_index_path()
    dest.parent.mkdir(parents=True)
    shutil.copy(index, dest)
    assert ensure_default_index(settings, progress=False) == dest and index_has_postings(dest)
    conn = sqlite3.connect(dest)
    conn.executescript("DROP TABLE postings; DROP TABLE postings_stats;")
    conn.close()
    assert not index_has_postings(dest)
    stale = dest.stat().st_ino, dest.stat().st_mtime_ns
    ensure_default_index(settings, progress=False)
    assert index_has_postings(dest)
    assert (dest.stat().st_ino, dest.stat().st_mtime_ns) != stale  # a new file renamed in
    retriever = EmbeddedRetriever(dest)
    assert retriever.first_stage_kind() == "postings"
    retriever.close()


def test_first_stage_lists_the_hits_stage_2_chooses_from(index: Path) -> None:
    from qfarm.common.retrieval.ranking import RERANK_DEPTH

    fast, slow = EmbeddedRetriever(index), fts5_only(index)
    for question in shipped_questions(every=97):
        deep = fast.first_stage(question, title_boost=2.0, depth=200)
        # The same order and scores from FTS5, far past the re-ranking window.
        assert deep == slow.first_stage(question, title_boost=2.0, depth=200)
        assert [e.score for e in deep] == sorted((e.score for e in deep), reverse=True)
        window = {e.chunk_id for e in deep[:RERANK_DEPTH]}
        chosen = fast.search(question, top_k=8, title_boost=2.0)
        assert {e.chunk_id for e in chosen} <= window
    assert fast.first_stage("", title_boost=2.0, depth=10) == []


def test_a_tokens_postings_are_the_same_counted_either_way() -> None:
    """The few-instance path (Python) and the NumPy one store the same bytes and lengths,
    for instances in FTS5's order or not."""
    import numpy as np

    from qfarm.worker.retrieval.postings import _few_postings, _many_postings, _postings_of

    rng = random.Random(7)
    for trial in range(300):
        codes = [rng.randrange(0, 2 * rng.choice([3, 40, 5000])) for _ in range(rng.randint(1, 30))]
        if trial % 2:
            codes.sort()  # as FTS5 lists them
        text = ",".join(map(str, codes))
        few_lengths = np.zeros(10_001, dtype=np.int64)
        few = _few_postings(text, few_lengths)
        lengths = np.zeros(10_001, dtype=np.int64)
        assert few == _many_postings(text, lengths)
        assert (few_lengths == lengths).all()
        rowids, tf = _postings_of(np.array(codes, dtype=np.int64))
        assert few == (rowids.astype("<i4").tobytes(), tf.astype("<u2").tobytes())
        assert tf.sum() == len(codes) and list(rowids) == sorted({c >> 1 for c in codes})
    with pytest.raises(ValueError, match="65,535"):
        _postings_of(np.full(70_000, 7, dtype=np.int64))


def test_a_bundles_new_words_are_tokenized_in_one_pass(index: Path) -> None:
    """``search_many`` hands FTS5 the new words of all its questions at once; the hits are
    those of the questions searched one by one."""
    batched, alone = EmbeddedRetriever(index), EmbeddedRetriever(index)
    reader = batched._reader()
    assert reader is not None
    passes: list[list[str]] = []
    real = reader._tokenize

    def counted(terms: list[str]) -> dict[str, tuple[str, ...]]:
        passes.append(list(terms))
        return real(terms)

    reader._tokenize = counted  # type: ignore[method-assign]
    questions = shipped_questions(every=211)[:12] + ["Who painted the Mona Lisa?"]
    got = batched.search_many(questions, top_k=8, title_boost=2.0)
    assert len(passes) == 1 and "mona" in passes[0]
    assert got == [alone.search(q, top_k=8, title_boost=2.0) for q in questions]
    # Known words and questions already searched start no pass of their own.
    batched.search_many(questions[:3] + ["Mona Lisa painter?"], top_k=8, title_boost=2.0)
    assert passes[1:] == [["painter"]]
    batched.close()
    alone.close()
