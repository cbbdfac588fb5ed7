"""The Elasticsearch backend through the official ``elasticsearch`` client, against real
Elasticsearch nodes: 8.19 (on Java 17) and 9.x (on Java 21+), each the server's own jars
from Maven Central with its HTTP module (``qfarm.ops.search.launch``; the launcher adds
the ``english`` analyzer, Lucene's, which Elastic does not publish there).

The 9.x client is the project's dependency; the 8.x client (``elasticsearch8``) needs
another elastic-transport major, so ``make install-test`` puts it in ``.venv/es8-client``
and it runs in a subprocess that cannot import the 9.x one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from qfarm.common.errors import RetrievalError
from qfarm.common.settings import Settings
from qfarm.worker.retrieval import open_retriever
from qfarm.worker.retrieval.cluster import ClusterRetriever
from qfarm.worker.retrieval.default_corpus import default_corpus_path
from qfarm.worker.retrieval.ingest import CorpusSource, build_cluster_index

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ES8_CLIENT = REPO / ".venv" / "es8-client"
TITLES = [
    "The Beatles",
    "John Lennon",
    "Liverpool",
    "Speed of light",
    "Light",
    "Mount Everest",
    "DNA",
    "Hamlet",
]


def _empty(node: Any) -> str:
    """The node's URL, every index and alias deleted (the session's node is shared)."""
    indices = httpx.get(f"{node.url}/_cat/indices?format=json", timeout=30).json()
    for index in indices:
        httpx.delete(f"{node.url}/{index['index']}", timeout=60).raise_for_status()
    return str(node.url)


@pytest.fixture
def es9_url(es9_node: Any) -> str:
    return _empty(es9_node)


@pytest.fixture
def es8_url(es8_node: Any) -> str:
    return _empty(es8_node)


def _settings(url: str, tmp_path: Path) -> Settings:
    return Settings(retriever="elasticsearch", es_url=url, es_max_retries=0, data_dir=tmp_path)


@pytest.fixture
def retriever(es9_url: str, tmp_path: Path) -> Iterator[ClusterRetriever]:
    r = open_retriever(_settings(es9_url, tmp_path))
    assert isinstance(r, ClusterRetriever) and r.backend == "elasticsearch"
    yield r
    r.close()


def _sample(path: Path, titles: list[str]) -> CorpusSource:
    corpus = json.loads(default_corpus_path().read_text(encoding="utf-8"))
    path.write_text(
        "".join(
            json.dumps({"id": t, "title": t, "text": corpus[t]["extract"]}) + "\n" for t in titles
        )
    )
    return CorpusSource.resolve(path)


def test_the_nodes_are_elasticsearch_of_both_majors(es8_node: Any, es9_node: Any) -> None:
    for node, major in ((es8_node, "8"), (es9_node, "9")):
        info = httpx.get(node.url, timeout=10)
        assert info.headers["x-elastic-product"] == "Elasticsearch"
        version = info.json()["version"]
        assert version.get("distribution", "elasticsearch") == "elasticsearch"
        assert version["number"].split(".")[0] == major


def test_index_search_msearch_and_alias_switch(retriever: ClusterRetriever, tmp_path: Path) -> None:
    first = _sample(tmp_path / "a.jsonl", TITLES[:4])
    second = _sample(tmp_path / "b.jsonl", TITLES)
    r1 = build_cluster_index(retriever, first, progress=False)
    assert r1.documents == 4 and r1.error_count == 0
    evidence = retriever.search("Who were the members of the Beatles?", top_k=3, title_boost=2.0)
    assert evidence[0].title == "The Beatles" and evidence[0].id == "E1"
    assert retriever.query_type == "combined_fields"  # Elasticsearch ranks BM25F itself
    r2 = build_cluster_index(retriever, second, progress=False)
    assert r2.replaced == [r1.target] and retriever.alias_targets() == [r2.target]
    many = retriever.search_many(
        ["How high is Mount Everest?", "What is DNA?"], top_k=2, title_boost=2.0
    )
    assert [m[0].title for m in many] == ["Mount Everest", "DNA"]
    assert many == [retriever.search(q, top_k=2, title_boost=2.0)
                    for q in ["How high is Mount Everest?", "What is DNA?"]]  # fmt: skip
    info = retriever.describe()
    assert info["backend"] == "elasticsearch" and info["documents"] == len(TITLES)
    assert info["index_version"] == second.index_version == retriever.index_version()


def test_the_english_analyzer_stems_as_the_mapping_expects(
    es9_url: str, retriever: ClusterRetriever, tmp_path: Path
) -> None:
    build_cluster_index(retriever, _sample(tmp_path / "s.jsonl", TITLES[:2]), progress=False)
    target = retriever.alias_targets()[0]
    tokens = httpx.post(f"{es9_url}/{target}/_analyze", json={"field": "text", "text": "The Beatles' songs were running"},
                        timeout=30).json()["tokens"]  # fmt: skip
    assert [t["token"] for t in tokens] == ["beatl", "song", "were", "run"]


def test_missing_index_says_run_qfarm_index(retriever: ClusterRetriever) -> None:
    with pytest.raises(RetrievalError, match=r"qfarm index --backend elasticsearch"):
        retriever.search("beatles", top_k=3, title_boost=2.0)


def test_unreachable_cluster_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    settings = Settings(
        retriever="elasticsearch",
        es_url=f"http://127.0.0.1:{port}",
        es_max_retries=0,
        es_timeout_s=2,
        data_dir=tmp_path,
    )
    r = open_retriever(settings)
    try:
        with pytest.raises(
            RetrievalError, match=r"elasticsearch at http://127.0.0.1:\d+ is unreachable"
        ):
            r.search("beatles", top_k=3, title_boost=2.0)
    finally:
        r.close()


def test_the_9x_client_on_an_8x_server_fails_at_connect_naming_the_client(
    es8_url: str, tmp_path: Path
) -> None:
    with pytest.raises(RetrievalError) as err:
        open_retriever(_settings(es8_url, tmp_path))
    message = str(err.value)
    assert "is version 8.19." in message and "a 9.x client cannot talk to a 8.x server" in message
    assert "pip install 'elasticsearch>=8,<9'" in message and "`elasticsearch8`" in message


def test_the_elasticsearch_backend_on_an_opensearch_node_says_so(search_url: str, tmp_path: Path) -> None:
    r = open_retriever(_settings(search_url, tmp_path))
    try:
        with pytest.raises(RetrievalError, match=r"refused the client's API-compatibility headers|"
                                                  r"did not answer as elasticsearch"):
            r.search("beatles", top_k=3, title_boost=2.0)
    finally:
        r.close()


SCRIPT = """
import json, sys
sys.modules["elasticsearch"] = None  # as where only the 8.x client is installed
from pathlib import Path
from qfarm.common.settings import Settings
from qfarm.worker.retrieval import open_retriever
from qfarm.worker.retrieval.ingest import CorpusSource, build_cluster_index
url, corpus, tmp = sys.argv[1:4]
r = open_retriever(Settings(retriever="elasticsearch", es_url=url, es_max_retries=0, data_dir=Path(tmp)))
build_cluster_index(r, CorpusSource.resolve(Path(corpus)), progress=False)
evidence = r.search("Who were the Beatles?", top_k=2, title_boost=2.0)
print(json.dumps({"client": type(r.client).__module__, "titles": [e.title for e in evidence],
                  "query_type": r.query_type}))
r.close()
"""


@pytest.mark.parametrize("major", ["8", "9"])
def test_the_8x_client_works_with_8x_and_9x_servers(
    request: pytest.FixtureRequest, tmp_path: Path, major: str
) -> None:
    assert (ES8_CLIENT / "elasticsearch8").is_dir(), "run `make install-test` (it adds .venv/es8-client)"
    url = request.getfixturevalue(f"es{major}_url")
    corpus = tmp_path / "sample.jsonl"
    _sample(corpus, ["The Beatles", "Liverpool", "Mount Everest"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ES8_CLIENT), str(REPO)])}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, url, str(corpus), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["client"].startswith("elasticsearch8")
    assert result["titles"][0] == "The Beatles" and result["query_type"] == "combined_fields"
