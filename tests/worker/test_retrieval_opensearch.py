"""The OpenSearch backend end to end against a real OpenSearch node.

The node (``search_node``, tests/conftest.py) is OpenSearch 2.19's own server with Lucene
indices on disk, started once per session; each test starts from an empty node. The
backend talks to it through the official ``opensearch-py`` client: index create with the
english analyzer, bulk, refresh, ``_meta``, aliases, search, ``_msearch``, count.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from qfarm.cli import main as qfarm_main
from qfarm.common.errors import RetrievalError
from qfarm.common.settings import Settings
from qfarm.worker.retrieval import open_retriever
from qfarm.worker.retrieval.cluster import ClientErrors, ClusterRetriever
from qfarm.worker.retrieval.default_corpus import default_corpus_path
from qfarm.worker.retrieval.ingest import CorpusSource, build_cluster_index

pytestmark = pytest.mark.slow

SAMPLE_TITLES = [
    "The Beatles",
    "John Lennon",
    "Mona Lisa",
    "Liverpool",
    "Speed of light",
    "Light",
    "Albert Einstein",
    "Photosynthesis",
    "Mount Everest",
    "DNA",
    "French Revolution",
    "Hamlet",
]
@pytest.fixture(scope="module")
def corpus_items() -> dict[str, dict]:
    return json.loads(default_corpus_path().read_text(encoding="utf-8"))


def _write_sample(path: Path, corpus: dict[str, dict], titles: list[str]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for title in titles:
            item = corpus[title]
            fh.write(
                json.dumps({"id": title, "title": item["title"], "text": item["extract"]}) + "\n"
            )
    return path


@pytest.fixture
def settings(search_url: str, tmp_path: Path) -> Settings:
    return Settings(retriever="opensearch", es_url=search_url, es_max_retries=0, data_dir=tmp_path)


@pytest.fixture
def retriever(settings: Settings) -> ClusterRetriever:
    r = open_retriever(settings)
    assert isinstance(r, ClusterRetriever)
    yield r
    r.close()


def test_index_sample_search_and_describe(
    retriever: ClusterRetriever, corpus_items, tmp_path: Path
) -> None:
    sample = CorpusSource.resolve(_write_sample(tmp_path / "s.jsonl", corpus_items, SAMPLE_TITLES))
    report = build_cluster_index(retriever, sample, progress=False)
    assert report.built and report.documents == len(SAMPLE_TITLES) and report.error_count == 0
    assert report.target == f"qfarm-passages-{sample.index_version}"
    evidence = retriever.search("Who were the members of the Beatles?", top_k=5, title_boost=2.0)
    assert evidence[0].title == "The Beatles"
    assert [e.id for e in evidence] == [f"E{i}" for i in range(1, len(evidence) + 1)]
    for e in evidence:
        assert corpus_items[e.doc_id]["extract"][e.offset_start : e.offset_end] == e.text
    info = retriever.describe()
    assert info["alias"] == "qfarm-passages" and info["index"] == report.target
    assert info["passages"] == report.passages and info["documents"] == len(SAMPLE_TITLES)
    assert retriever.index_version() == sample.index_version


def test_msearch_equals_single_searches(
    retriever: ClusterRetriever, corpus_items, tmp_path: Path
) -> None:
    sample = CorpusSource.resolve(_write_sample(tmp_path / "s.jsonl", corpus_items, SAMPLE_TITLES))
    build_cluster_index(retriever, sample, progress=False)
    questions = ["What is DNA?", "???", "How high is Mount Everest?"]
    many = retriever.search_many(questions, top_k=3, title_boost=2.0)
    assert many == [retriever.search(q, top_k=3, title_boost=2.0) for q in questions]
    assert many[1] == [] and many[2][0].title == "Mount Everest"


def test_doc_id_filter(retriever: ClusterRetriever, corpus_items, tmp_path: Path) -> None:
    build_cluster_index(
        retriever,
        CorpusSource.resolve(_write_sample(tmp_path / "s.jsonl", corpus_items, SAMPLE_TITLES)),
        progress=False,
    )
    evidence = retriever.search(
        "Beatles", top_k=5, title_boost=2.0, doc_ids=["John Lennon", "Liverpool"]
    )
    assert evidence and {e.doc_id for e in evidence} <= {"John Lennon", "Liverpool"}


def test_alias_switches_atomically_between_versions(
    settings: Settings, retriever: ClusterRetriever, corpus_items, tmp_path: Path
) -> None:
    first = CorpusSource.resolve(
        _write_sample(tmp_path / "a.jsonl", corpus_items, SAMPLE_TITLES[:6])
    )
    second = CorpusSource.resolve(_write_sample(tmp_path / "b.jsonl", corpus_items, SAMPLE_TITLES))
    r1 = build_cluster_index(retriever, first, progress=False)
    reader = open_retriever(settings)  # a worker's view of the alias
    try:
        assert all(
            e.title != "Mount Everest"
            for e in reader.search("Mount Everest", top_k=3, title_boost=2.0)
        )
        r2 = build_cluster_index(retriever, second, progress=False)
        assert r2.replaced == [r1.target]
        assert retriever.alias_targets() == [r2.target]
        assert reader.search("Mount Everest", top_k=1, title_boost=2.0)[0].title == "Mount Everest"
        assert retriever.index_version() == second.index_version
        assert retriever.describe()["other_versions"] == [r1.target]
        # Building the first corpus again is a rollback: no rebuild, the alias moves back.
        back = build_cluster_index(retriever, first, progress=False)
        assert back.built is False and back.replaced == [r2.target]
        assert retriever.alias_targets() == [r1.target]
        pruned = build_cluster_index(retriever, second, progress=False, prune=True)
        assert pruned.pruned == [r1.target] and retriever.versioned_indices() == [r2.target]
    finally:
        reader.close()


def test_failed_build_leaves_the_alias_on_the_old_index(
    retriever: ClusterRetriever, corpus_items, tmp_path: Path
) -> None:
    from qfarm.common.errors import InputError

    good = build_cluster_index(
        retriever,
        CorpusSource.resolve(_write_sample(tmp_path / "a.jsonl", corpus_items, SAMPLE_TITLES)),
        progress=False,
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        "".join(
            json.dumps({"id": t, "title": t, "text": corpus_items[t]["extract"]}) + "\n"
            for t in SAMPLE_TITLES[:3]
        )
        + '{"title": "no id", "text": "x"}\n' * 3
    )
    with pytest.raises(InputError, match="more than 1 bad documents"):
        build_cluster_index(retriever, CorpusSource.resolve(bad), progress=False, max_errors=1)
    assert retriever.alias_targets() == [good.target]
    assert retriever.versioned_indices() == [good.target]  # the half-built one was dropped
    assert retriever.search("Beatles", top_k=1, title_boost=2.0)[0].title == "The Beatles"


def test_per_document_errors_from_the_cluster_are_reported(
    retriever: ClusterRetriever, tmp_path: Path
) -> None:
    corpus = tmp_path / "dup.jsonl"
    rows = [
        {"id": "a", "title": "A", "text": "Alpha text."},
        {"id": "a", "title": "A2", "text": "Again."},
        {"id": "b", "title": "B", "text": "Beta."},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = build_cluster_index(retriever, CorpusSource.resolve(corpus), progress=False)
    assert report.passages == 2 and report.error_count == 1
    assert "duplicate document id" in str(report.issues[0]) and "a#0" in str(report.issues[0])
    assert retriever.search("alpha", top_k=1, title_boost=2.0)[0].title == "A"


def test_missing_index_says_run_qfarm_index(retriever: ClusterRetriever) -> None:
    with pytest.raises(
        RetrievalError,
        match=r"no index or alias 'qfarm-passages'.*qfarm index --backend opensearch",
    ):
        retriever.search("beatles", top_k=3, title_boost=2.0)
    with pytest.raises(RetrievalError, match="qfarm index"):
        retriever.search_many(["beatles", "light"], top_k=3, title_boost=2.0)
    with pytest.raises(RetrievalError, match="qfarm index"):
        retriever.index_version()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_cluster_is_a_clear_error(tmp_path: Path) -> None:
    settings = Settings(
        retriever="opensearch",
        es_url=f"http://127.0.0.1:{_closed_port()}",
        es_max_retries=0,
        es_timeout_s=2,
        data_dir=tmp_path,
    )
    r = open_retriever(settings)
    try:
        with pytest.raises(
            RetrievalError, match=r"opensearch at http://127.0.0.1:\d+ is unreachable.*QFARM_ES_URL"
        ):
            r.search("beatles", top_k=3, title_boost=2.0)
    finally:
        r.close()


def test_cli_index_check_and_search_on_opensearch(
    search_url: str, corpus_items, tmp_path: Path, monkeypatch, capsys
) -> None:
    sample = _write_sample(tmp_path / "s.jsonl", corpus_items, SAMPLE_TITLES)
    monkeypatch.setenv("QFARM_RETRIEVER", "opensearch")
    monkeypatch.setenv("QFARM_ES_URL", search_url)
    assert qfarm_main(["index", "--corpus", str(sample), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert (
        f"indexed {len(SAMPLE_TITLES)} documents" in out
        and "alias qfarm-passages -> qfarm-passages-" in out
    )
    assert qfarm_main(["index", "--check", "--corpus", str(sample), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["up_to_date"] is True and info["documents"] == len(SAMPLE_TITLES)
    assert qfarm_main(["search", "speed of light", "--top-k", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["backend"] == "opensearch" and result["evidence"][0]["title"] == "Speed of light"


def test_same_passages_and_version_as_embedded(
    settings: Settings, default_index_settings: Settings
) -> None:
    # Agreement with the embedded index is measured, not asserted here
    # (docs/retrieval.md, 'Quality side by side'). The whole default corpus in one build:
    # a loaded 2-core machine may need more than the default 10 s per bulk request.
    retriever = open_retriever(settings.model_copy(update={"es_timeout_s": 60.0}))
    assert isinstance(retriever, ClusterRetriever)
    report = build_cluster_index(retriever, CorpusSource.resolve("default"), progress=False)
    embedded = open_retriever(default_index_settings)
    try:
        assert retriever.index_version() == embedded.index_version()  # corpus, chunker, ranking
        assert report.passages == embedded.describe()["passages"] and report.error_count == 0
        theirs = retriever.search("What is the highest mountain in Africa?", top_k=8, title_boost=2.0)
        assert retriever.query_type == "cross_fields"  # OpenSearch's shape from the start
        assert "Mount Kilimanjaro" in [e.title for e in theirs[:3]]
        assert len(theirs) == 8 and all("Africa" in e.text or "ountain" in e.text for e in theirs)
    finally:
        embedded.close()
        retriever.close()


def test_a_refused_combined_fields_falls_back_to_cross_fields(
    settings: Settings, corpus_items, tmp_path: Path
) -> None:
    """A retriever that starts with BM25F (the Elasticsearch backend's first shape) on a
    node that does not parse it: the node's 400 switches it to ``cross_fields`` for search
    and for ``_msearch``, which a real node rejects whole rather than per search."""
    import opensearchpy
    from opensearchpy import helpers

    def opened() -> ClusterRetriever:
        client = opensearchpy.OpenSearch(hosts=[settings.es_url], max_retries=0)
        errors = ClientErrors(connection=(opensearchpy.ConnectionError,),
                              not_found=(opensearchpy.NotFoundError,),
                              api=(opensearchpy.TransportError,))  # fmt: skip
        return ClusterRetriever(client, backend="opensearch", url=settings.es_url,
                                alias=settings.es_index, errors=errors,
                                bulk=helpers.streaming_bulk, query_type="combined_fields")  # fmt: skip

    sample = CorpusSource.resolve(_write_sample(tmp_path / "s.jsonl", corpus_items, SAMPLE_TITLES))
    builder = opened()
    build_cluster_index(builder, sample, progress=False)
    builder.close()
    single, many = opened(), opened()
    try:
        assert single.search("Mount Everest", top_k=1, title_boost=2.0)[0].title == "Mount Everest"
        assert single.query_type == "cross_fields"
        found = many.search_many(["What is DNA?", "Mount Everest"], top_k=1, title_boost=2.0)
        assert many.query_type == "cross_fields"
        assert [hits[0].title for hits in found] == ["DNA", "Mount Everest"]
    finally:
        single.close()
        many.close()


def test_forced_rebuild_of_the_served_version_is_built_beside_it(
    retriever: ClusterRetriever, corpus_items, tmp_path: Path
) -> None:
    sample = CorpusSource.resolve(_write_sample(tmp_path / "s.jsonl", corpus_items, SAMPLE_TITLES))
    first = build_cluster_index(retriever, sample, progress=False)
    again = build_cluster_index(retriever, sample, progress=False, force=True)
    assert again.built and again.target.startswith(first.target + "-")
    assert again.replaced == [first.target] and retriever.alias_targets() == [again.target]
    assert retriever.index_version() == sample.index_version  # same corpus, same version
    assert retriever.search("Beatles", top_k=1, title_boost=2.0)[0].title == "The Beatles"


def test_doctor_names_the_cluster_its_version_and_the_index_qfarm_built(
    settings: Settings, corpus_items, tmp_path: Path
) -> None:
    from qfarm.producer.farm.doctor import check_search_cluster

    check = check_search_cluster(settings, 3.0)  # an empty node: no alias yet
    assert check.health == "fail" and "qfarm index --backend opensearch" in check.fix
    sample = _write_sample(tmp_path / "s.jsonl", corpus_items, SAMPLE_TITLES[:3])
    r = open_retriever(settings)
    try:
        build_cluster_index(r, CorpusSource.resolve(str(sample)), progress=False)
    finally:
        r.close()
    check = check_search_cluster(settings, 3.0)
    assert check.health == "ok", check
    assert check.line.startswith("opensearch 2.19.") and " alias qfarm-passages -> qfarm-passages-" in check.line
    assert check.data["passages"] > 0 and check.data["index_version"]
