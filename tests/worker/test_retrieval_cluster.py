"""Cluster backends without a server: client options, error translation, client sharing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from qfarm.common.errors import ConfigError, RetrievalError
from qfarm.common.settings import Settings
from qfarm.worker.retrieval import cluster
from qfarm.worker.retrieval import elasticsearch as es_backend
from qfarm.worker.retrieval import opensearch as os_backend
from qfarm.worker.retrieval.cluster import ClientErrors, ClusterRetriever


class Unreachable(Exception):
    pass


class Missing(Exception):
    pass


class Api(Exception):
    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status_code = status


ERRORS = ClientErrors(connection=(Unreachable,), not_found=(Missing,), api=(Api,))


class FakeClient:
    def __init__(self, *, raises: Exception | None = None, msearch: dict | None = None):
        self.raises = raises
        self.msearch_response = msearch
        self.closed = False

    def search(self, **_: Any) -> dict:
        if self.raises:
            raise self.raises
        return {"hits": {"hits": []}}

    def msearch(self, **_: Any) -> dict:
        return self.msearch_response or {"responses": []}

    def close(self) -> None:
        self.closed = True


def _retriever(client: FakeClient) -> ClusterRetriever:
    return ClusterRetriever(
        client,
        backend="opensearch",
        url="http://es:9200",
        alias="qfarm",
        errors=ERRORS,
        bulk=lambda *a, **k: iter(()),
    )


@pytest.mark.parametrize(
    "exc, pattern",
    [
        (
            Unreachable("refused"),
            r"opensearch at http://es:9200 is unreachable \(search: Unreachable\).*QFARM_ES_URL",
        ),
        (
            Missing("no such index"),
            r"no index or alias 'qfarm' \(search\): run `qfarm index --backend opensearch` first",
        ),
        (
            Api("unauthorized", 401),
            r"refused search \(HTTP 401\); check QFARM_ES_API_KEY or QFARM_ES_USERNAME",
        ),
        (
            Api(
                "Content-Type header [application/vnd.elasticsearch+json; compatible-with=9] is not supported",
                406,
            ),
            r"install the client of the server's major version",
        ),
        (Api("parse error", 400), r"search failed: parse error"),
    ],
)
def test_client_errors_become_retrieval_errors_with_a_fix(exc: Exception, pattern: str) -> None:
    with pytest.raises(RetrievalError, match=pattern) as info:
        _retriever(FakeClient(raises=exc)).search("beatles", top_k=3, title_boost=2.0)
    assert info.value.__cause__ is exc


def test_msearch_error_for_one_question() -> None:
    hit = {
        "_score": 1.0,
        "_source": {
            "doc_id": "d",
            "chunk_id": "d#0",
            "title": "T",
            "text": "x",
            "offset_start": 0,
            "offset_end": 1,
        },
    }
    ok = {"responses": [{"hits": {"hits": [hit]}}, {"hits": {"hits": []}}]}
    assert [
        len(r)
        for r in _retriever(FakeClient(msearch=ok)).search_many(
            ["a", "?", "b"], top_k=1, title_boost=2.0
        )
    ] == [1, 0, 0]
    missing = {"responses": [{"error": {"type": "index_not_found_exception"}, "status": 404}]}
    with pytest.raises(RetrievalError, match="qfarm index"):
        _retriever(FakeClient(msearch=missing)).search_many(["a"], top_k=1, title_boost=2.0)
    broken = {"responses": [{"error": {"type": "search_phase_execution_exception"}, "status": 500}]}
    with pytest.raises(RetrievalError, match="msearch failed"):
        _retriever(FakeClient(msearch=broken)).search_many(["a"], top_k=1, title_boost=2.0)


def test_closing_the_retriever_closes_its_client() -> None:
    client = FakeClient()
    retriever = _retriever(client)
    assert not client.closed
    retriever.close()
    assert client.closed


@pytest.mark.parametrize("url", ["localhost:9200", "", "ftp://es:9200", "http://a:9200, es2:9200"])
def test_cluster_url_must_be_http(url: str) -> None:
    with pytest.raises(ConfigError, match="QFARM_ES_URL"):
        cluster.cluster_hosts(url)


def test_cluster_hosts_accept_several_nodes() -> None:
    assert cluster.cluster_hosts("http://a:9200/, https://b:9200") == [
        "http://a:9200",
        "https://b:9200",
    ]


def test_elasticsearch_options_from_settings(tmp_path: Path) -> None:
    settings = Settings(
        es_url="https://es:9200",
        es_api_key=SecretStr("k"),
        es_ca_certs=tmp_path / "ca.pem",
        es_verify_certs=True,
        es_timeout_s=7,
        es_max_retries=3,
        data_dir=tmp_path,
    )
    opts = es_backend.client_options(settings)
    assert opts["hosts"] == ["https://es:9200"] and opts["api_key"] == "k"
    assert opts["ca_certs"] == str(tmp_path / "ca.pem") and opts["verify_certs"] is True
    assert (opts["request_timeout"], opts["max_retries"], opts["retry_on_timeout"]) == (7, 3, True)
    assert set(opts["retry_on_status"]) == {502, 503, 504}  # 429: back-off, not at once
    basic = es_backend.client_options(
        Settings(es_username="u", es_password=SecretStr("p"), data_dir=tmp_path)
    )
    assert (
        basic["basic_auth"] == ("u", "p") and "verify_certs" not in basic
    )  # plain http: no TLS options


def test_opensearch_options_from_settings(tmp_path: Path) -> None:
    opts = os_backend.client_options(
        Settings(
            es_url="https://os:9200",
            es_username="u",
            es_password=SecretStr("p"),
            es_verify_certs=False,
            data_dir=tmp_path,
        )
    )
    assert opts["http_auth"] == ("u", "p") and opts["verify_certs"] is False
    keyed = os_backend.client_options(Settings(es_api_key=SecretStr("k"), data_dir=tmp_path))
    assert keyed["headers"] == {"Authorization": "ApiKey k"}


HIT = {
    "_score": 1.0,
    "_source": {
        "doc_id": "Mars",
        "chunk_id": "Mars#0",
        "title": "Mars",
        "text": "Mars is the red planet.",
        "offset_start": 0,
        "offset_end": 23,
    },
}
REFUSED = "x_content_parse_exception: [1:10] unknown query [combined_fields]"


class OldServer(FakeClient):
    """A server without ``combined_fields`` (older OpenSearch): answers only ``cross_fields``."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def _answer(self, body: dict) -> dict:
        kind = next(iter(body["query"]))
        self.sent.append(kind if kind != "multi_match" else body["query"][kind]["type"])
        if kind == "combined_fields":
            return {"error": {"type": "x_content_parse_exception", "reason": REFUSED}, "status": 400}
        return {"hits": {"hits": [HIT]}}

    def search(self, **kw: Any) -> dict:
        answer = self._answer(kw["body"])
        if "error" in answer:
            raise Api(f"BadRequestError(400, {REFUSED})", 400)
        return answer

    def msearch(self, **kw: Any) -> dict:
        return {"responses": [self._answer(b) for b in kw["body"][1::2]]}


@pytest.mark.parametrize("many", [False, True])
def test_bm25f_query_falls_back_to_cross_fields_once_on_an_older_server(many: bool) -> None:
    client = OldServer()
    r = _retriever(client)
    assert r.query_type == "combined_fields"
    for _ in range(2):
        if many:
            got = r.search_many(["red planet", "?"], top_k=3, title_boost=2.0)
            assert [[e.title for e in evs] for evs in got] == [["Mars"], []]
        else:
            assert [e.title for e in r.search("red planet", top_k=3, title_boost=2.0)] == ["Mars"]
    # One refusal, then cross_fields for the life of the retriever.
    assert client.sent == ["combined_fields", "cross_fields", "cross_fields"]
    assert r.query_type == "cross_fields"


def test_other_bad_requests_are_not_retried_as_cross_fields() -> None:
    r = _retriever(FakeClient(raises=Api("BadRequestError(400, parsing_exception)", 400)))
    with pytest.raises(RetrievalError, match="search failed"):
        r.search("red planet", top_k=3, title_boost=2.0)
    assert r.query_type == "combined_fields"


def test_client_major_check_refuses_only_a_client_newer_than_the_server() -> None:
    from types import SimpleNamespace

    client9 = SimpleNamespace(__name__="elasticsearch", __versionstr__="9.5.1")
    client8 = SimpleNamespace(__name__="elasticsearch8", __versionstr__="8.19.3")
    for module, version in [(client9, "9.0.0"), (client8, "8.15.0"), (client8, "9.1.0"), (client9, None)]:
        es_backend.check_client_fits_server(module, "http://es:9200", version)  # type: ignore[arg-type]
    with pytest.raises(RetrievalError, match=r"elasticsearch>=8,<9.*`elasticsearch8` package"):
        es_backend.check_client_fits_server(client9, "http://es:9200", "8.15.0")  # type: ignore[arg-type]


def _hit(chunk: str, score: float, title: str, text: str) -> dict:
    return {
        "_score": score,
        "_source": {
            "doc_id": chunk.split("#")[0], "chunk_id": chunk, "title": title, "text": text,
            "offset_start": 0, "offset_end": len(text),
        },
    }


class RankingClient(FakeClient):
    """Answers every search with the same first-stage hits and records the bodies."""

    def __init__(self, hits: list[dict]):
        super().__init__()
        self.hits = hits
        self.bodies: list[dict] = []

    def search(self, **kwargs: Any) -> dict:
        self.bodies.append(kwargs["body"])
        return {"hits": {"hits": self.hits}}

    def msearch(self, **kwargs: Any) -> dict:
        bodies = kwargs["body"][1::2]
        self.bodies.extend(bodies)
        return {"responses": [{"hits": {"hits": self.hits}} for _ in bodies]}


def test_clusters_fetch_the_rerank_window_and_apply_stage_two() -> None:
    from qfarm.common.retrieval.ranking import RERANK_DEPTH

    hits = [
        _hit("Mountaineering#0", 9.0, "Mountaineering", "Mountain mountain mountain climbing."),
        _hit("Mount Kilimanjaro#0", 6.0, "Mount Kilimanjaro", "The highest mountain in Africa."),
    ]
    client = RankingClient(hits)
    r = _retriever(client)
    question = "What is the highest mountain in Africa?"
    got = r.search(question, top_k=1, title_boost=2.0)
    # First stage alone would answer Mountaineering (9.0); stage 2 scales it by
    # the share of terms it holds (1/3) and raises Kilimanjaro for its phrase.
    assert [e.chunk_id for e in got] == ["Mount Kilimanjaro#0"]
    assert [e.chunk_id for e in r.search_many([question], top_k=1, title_boost=2.0)[0]] == [
        "Mount Kilimanjaro#0"
    ]
    assert [b["size"] for b in client.bodies] == [RERANK_DEPTH, RERANK_DEPTH]


class _Indices:
    def __init__(self, meta: dict):
        self.meta = meta

    def exists_alias(self, name: str) -> bool:
        return True

    def get_alias(self, name: str) -> dict:
        return {"qfarm-old": {"aliases": {name: {}}}}

    def get_mapping(self, index: str) -> dict:
        from qfarm.common.retrieval.index import index_body

        properties = index_body()["mappings"]["properties"]
        return {index: {"mappings": {"_meta": self.meta, "properties": properties}}}


def test_a_cluster_index_built_under_an_older_ranking_reports_the_ranking_that_serves_it() -> None:
    from qfarm.common.retrieval.ranking import RANKING_VERSION

    client = FakeClient()
    client.indices = _Indices({  # type: ignore[attr-defined]
        "index_version": "05ed445d555b-chunker-v1-bm25f-v3",
        "corpus_digest": "05ed445d555b" + "0" * 52,
        "chunker_version": "chunker-v1",
    })  # fmt: skip
    r = _retriever(client)
    assert r.index_version() == f"05ed445d555b-chunker-v1-{RANKING_VERSION}"
    # An index without qfarm's _meta was not built by qfarm index: refused, not guessed at.
    client.indices.meta = {}  # type: ignore[attr-defined]
    r._version = None
    with pytest.raises(RetrievalError, match="not a passages index qfarm built .*no _meta"):
        r.index_version()


@pytest.mark.parametrize("backend", ["opensearch", "elasticsearch"])
def test_a_password_in_the_cluster_url_is_never_printed(
    backend: str, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from qfarm.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the block ends
    url = f"http://elastic:s3cret-pw@127.0.0.1:{port}"
    settings = Settings(retriever=backend, es_url=url, es_max_retries=0, data_dir=tmp_path)
    with pytest.raises(RetrievalError) as err:
        from qfarm.worker.retrieval import open_retriever

        r = open_retriever(settings)
        try:
            r.search("beatles", top_k=1, title_boost=2.0)
        finally:
            r.close()
    assert "s3cret-pw" not in str(err.value) and "elastic:***@127.0.0.1" in str(err.value)
    with pytest.raises(ConfigError) as bad:
        cluster.cluster_hosts("ftp://elastic:s3cret-pw@127.0.0.1:9")
    assert "s3cret-pw" not in str(bad.value)
    # The command line, default log level: one line, no secret, no client tracebacks.
    for name, value in (("QFARM_RETRIEVER", backend), ("QFARM_ES_URL", url),
                        ("QFARM_ES_MAX_RETRIES", "0"), ("QFARM_DATA_DIR", str(tmp_path))):
        monkeypatch.setenv(name, value)
    assert main(["search", "beatles"]) != 0
    out = capsys.readouterr()
    assert "s3cret-pw" not in out.out + out.err
    assert "Traceback" not in out.err and out.err.count("\n") == 1, out.err
