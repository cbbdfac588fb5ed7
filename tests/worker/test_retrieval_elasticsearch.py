"""The Elasticsearch backend through the official ``elasticsearch`` client.

The client is driven against the session's real OpenSearch node through
``es_shim.py`` in this directory, a loopback HTTP proxy that only rewrites
headers: it forwards the client's ``application/vnd.elasticsearch+json;
compatible-with=9`` content types as plain JSON (OpenSearch refuses the vendor
type) and adds ``X-Elastic-Product: Elasticsearch`` to every response (the
client's product check refuses answers without it). Everything else (paths,
bodies, status codes) is what the backend really sends and what a Lucene
engine really answers; what these tests cover is the client, its errors and
its version checks on the query language the two engines share, not
Elasticsearch's own ranking.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from qfarm.common.errors import RetrievalError
from qfarm.common.settings import Settings
from qfarm.worker.retrieval import open_retriever
from qfarm.worker.retrieval.cluster import ClusterRetriever
from qfarm.worker.retrieval.default_corpus import default_corpus_path
from qfarm.worker.retrieval.ingest import CorpusSource, build_cluster_index

pytestmark = pytest.mark.slow

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


def _load_shim() -> ModuleType:
    # Tests are not a package (pytest --import-mode=importlib): load the helper by path.
    spec = importlib.util.spec_from_file_location(
        "qfarm_test_es_shim", Path(__file__).with_name("es_shim.py")
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


es_shim = _load_shim()


@pytest.fixture
def shim_url(search_url: str) -> Iterator[str]:
    with es_shim.elasticsearch_shim(search_url) as url:
        yield url


@pytest.fixture
def retriever(shim_url: str, tmp_path: Path) -> Iterator[ClusterRetriever]:
    settings = Settings(
        retriever="elasticsearch", es_url=shim_url, es_max_retries=0, data_dir=tmp_path
    )
    r = open_retriever(settings)
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


def test_shim_rewrites_only_the_compatibility_types() -> None:
    assert (
        es_shim.plain_content_type("application/vnd.elasticsearch+json; compatible-with=9")
        == "application/json"
    )
    assert (
        es_shim.plain_content_type("application/vnd.elasticsearch+x-ndjson; compatible-with=8")
        == "application/x-ndjson"
    )
    assert es_shim.plain_content_type("application/json") == "application/json"


def test_index_search_msearch_and_alias_switch(retriever: ClusterRetriever, tmp_path: Path) -> None:
    first = _sample(tmp_path / "a.jsonl", TITLES[:4])
    second = _sample(tmp_path / "b.jsonl", TITLES)
    r1 = build_cluster_index(retriever, first, progress=False)
    assert r1.documents == 4 and r1.error_count == 0
    evidence = retriever.search("Who were the members of the Beatles?", top_k=3, title_boost=2.0)
    assert evidence[0].title == "The Beatles" and evidence[0].id == "E1"
    r2 = build_cluster_index(retriever, second, progress=False)
    assert r2.replaced == [r1.target] and retriever.alias_targets() == [r2.target]
    many = retriever.search_many(
        ["How high is Mount Everest?", "What is DNA?"], top_k=2, title_boost=2.0
    )
    assert [m[0].title for m in many] == ["Mount Everest", "DNA"]
    info = retriever.describe()
    assert info["backend"] == "elasticsearch" and info["documents"] == len(TITLES)
    assert info["index_version"] == second.index_version == retriever.index_version()


def test_missing_index_says_run_qfarm_index(retriever: ClusterRetriever) -> None:
    with pytest.raises(RetrievalError, match=r"qfarm index --backend elasticsearch"):
        retriever.search("beatles", top_k=3, title_boost=2.0)


def test_without_the_shim_the_client_refuses_the_server(search_url: str, tmp_path: Path) -> None:
    """What the shim is for: pointed straight at OpenSearch, the client gets no usable answer."""
    settings = Settings(
        retriever="elasticsearch", es_url=search_url, es_max_retries=0, data_dir=tmp_path
    )
    r = open_retriever(settings)
    try:
        with pytest.raises(
            RetrievalError, match=r"refused the client's API-compatibility headers.*HTTP 406"
        ):
            r.search("beatles", top_k=3, title_boost=2.0)
    finally:
        r.close()


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


# ---------------------------------------------------------------- client majors (8.x and 9.x)
# The shim, told a version, answers as that Elasticsearch; as a real 8.x server
# it refuses the 9.x client's ``compatible-with=9`` media types. The 9.x client
# is the project's dependency; the 8.x client (``elasticsearch8``) needs another
# elastic-transport major, so ``make install-test`` puts it in ``.venv/es8-client``
# and it runs in a subprocess that cannot import the 9.x one (~10 s in all).

REPO = Path(__file__).resolve().parents[2]
ES8_CLIENT = REPO / ".venv" / "es8-client"


@contextmanager
def server(search_url: str, version: str) -> Iterator[str]:
    with es_shim.elasticsearch_shim(search_url, server_version=version) as url:
        yield url


def _corpus(tmp_path: Path) -> Path:
    path = tmp_path / "sample.jsonl"
    _sample(path, ["The Beatles", "Liverpool", "Mount Everest"])
    return path


def _settings(url: str, tmp_path: Path) -> Settings:
    return Settings(retriever="elasticsearch", es_url=url, es_max_retries=0, data_dir=tmp_path)


def test_the_9x_client_works_with_a_9x_server(search_url: str, tmp_path: Path) -> None:
    with server(search_url, "9.1.0") as url:
        r = open_retriever(_settings(url, tmp_path))
        try:
            build_cluster_index(r, _sample(tmp_path / "s.jsonl", TITLES[:3]), progress=False)
            titles = [e.title for e in r.search("Who were the Beatles?", top_k=2, title_boost=2.0)]
            assert titles[0] == "The Beatles"
        finally:
            r.close()


def test_the_9x_client_on_an_8x_server_fails_at_connect_naming_the_client(
    search_url: str, tmp_path: Path
) -> None:
    with server(search_url, "8.15.0") as url:
        with pytest.raises(RetrievalError) as err:
            open_retriever(_settings(url, tmp_path))
    message = str(err.value)
    assert "is version 8.15.0" in message and "a 9.x client cannot talk to a 8.x server" in message
    assert "pip install 'elasticsearch>=8,<9'" in message and "`elasticsearch8`" in message


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
print(json.dumps({"client": type(r.client).__module__, "titles": [e.title for e in evidence]}))
r.close()
"""


@pytest.mark.parametrize("version", ["8.15.0", "9.1.0"])
def test_the_8x_client_works_with_8x_and_9x_servers(
    search_url: str, tmp_path: Path, version: str
) -> None:
    assert (ES8_CLIENT / "elasticsearch8").is_dir(), "run `make install-test` (it adds .venv/es8-client)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ES8_CLIENT), str(REPO)])}
    with server(search_url, version) as url:
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, url, str(_corpus(tmp_path)), str(tmp_path)],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["client"].startswith("elasticsearch8")
    assert result["titles"][0] == "The Beatles"
