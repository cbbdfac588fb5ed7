"""Both Elasticsearch client majors against 8.x- and 9.x-speaking servers (issue 15).

The server is osmem-server behind ``es_shim.py`` told which Elasticsearch
version to claim; as a real 8.x server it refuses the 9.x client's
``compatible-with=9`` media types. The 9.x client is the project's
dependency; the 8.x client (``elasticsearch8``) needs another elastic-transport
major, so ``make install`` puts it in ``.venv/es8-client`` and it runs here in
a subprocess that cannot import the 9.x one. Cost: ~10 s (two small indices
per client).
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

from common.errors import RetrievalError
from common.settings import Settings
from worker.retrieval import open_retriever
from worker.retrieval.default_corpus import default_corpus_path
from worker.retrieval.ingest import CorpusSource, build_cluster_index

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ES8_CLIENT = REPO / ".venv" / "es8-client"
TITLES = ["The Beatles", "Liverpool", "Mount Everest"]


def _load_shim() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "qfarm_test_es_shim_versions", Path(__file__).with_name("es_shim.py")
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


es_shim = _load_shim()


@contextmanager
def server(search_url: str, version: str) -> Iterator[str]:
    with es_shim.elasticsearch_shim(search_url, server_version=version) as url:
        yield url


def _corpus(tmp_path: Path) -> Path:
    corpus = json.loads(default_corpus_path().read_text(encoding="utf-8"))
    path = tmp_path / "sample.jsonl"
    path.write_text(
        "".join(json.dumps({"id": t, "title": t, "text": corpus[t]["extract"]}) + "\n" for t in TITLES),
        encoding="utf-8",
    )
    return path


def _settings(url: str, tmp_path: Path) -> Settings:
    return Settings(retriever="elasticsearch", es_url=url, es_max_retries=0, data_dir=tmp_path)


def test_the_9x_client_works_with_a_9x_server(search_url: str, tmp_path: Path) -> None:
    with server(search_url, "9.1.0") as url:
        r = open_retriever(_settings(url, tmp_path))
        try:
            build_cluster_index(r, CorpusSource.resolve(_corpus(tmp_path)), progress=False)
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
from common.settings import Settings
from worker.retrieval import open_retriever
from worker.retrieval.ingest import CorpusSource, build_cluster_index
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
    assert (ES8_CLIENT / "elasticsearch8").is_dir(), "run `make install` (it adds .venv/es8-client)"
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
