"""What the Elasticsearch and OpenSearch backends share: search, ``_msearch``,
versioned indices behind an alias, and translation of client errors.

Both official clients take the same request bodies (``qfarm.common.retrieval.query``)
through ``body=``; the backend modules only build the client and name its
exception classes. Workers search the alias (``QFARM_ES_INDEX``); ``qfarm
index`` fills ``<alias>-<index version>`` and moves the alias in one
``_aliases`` call once the new index is complete, so a running sweep never
sees a half-built index.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from qfarm.common.backoff import RetryPolicy, compute_backoff
from qfarm.common.errors import ConfigError, RetrievalError
from qfarm.common.models import Evidence
from qfarm.common.retrieval import index as indexes
from qfarm.common.retrieval import query as search_query
from qfarm.common.retrieval import ranking
from qfarm.common.urls import redact_url
from qfarm.common.vocab import Backend

VERSION_TTL_S = 30.0  # how long index_version() trusts its last alias lookup


@dataclass(frozen=True)
class ClientErrors:
    """The exception classes of one client library, most specific first."""

    connection: tuple[type[BaseException], ...]
    not_found: tuple[type[BaseException], ...]
    api: tuple[type[BaseException], ...]
    # Matched before ``connection``: both clients' timeout classes are connection errors.
    timeout: tuple[type[BaseException], ...] = ()
    wrong_product: tuple[type[BaseException], ...] = ()


# Transient statuses both clients retry at once (QFARM_ES_MAX_RETRIES); others fail at once.
RETRY_ON_STATUS = (502, 503, 504)
# A rejection (HTTP 429, ``es_rejected_execution_exception``: the node's search queue is
# full) asks for the search later, so it is not the clients' immediate retry: searches
# are sent again on this schedule (0.1 s doubling to 4 s, equal jitter: 10 tries over about
# 14 s), and only then become an error row. A rejection never becomes an empty evidence map.
REJECTION_RETRY = RetryPolicy(max_attempts=10, base_s=0.1, max_s=4.0)


def _rejected(error: object) -> bool:
    """A 429 or a search-queue rejection, from an exception or an ``_msearch`` item."""
    if isinstance(error, Mapping):
        text = str(error.get("error", ""))
        return error.get("status") == 429 or "rejected_execution" in text
    return _status(error) == 429 if isinstance(error, BaseException) else False


def _status(exc: BaseException) -> int | None:
    meta = getattr(exc, "meta", None)
    status = getattr(meta, "status", None) or getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


class ClusterRetriever:
    """Search and index administration on one Elasticsearch/OpenSearch cluster."""

    def __init__(
        self,
        client: Any,
        *,
        backend: Backend,
        url: str,
        alias: str,
        errors: ClientErrors,
        bulk: Callable[..., Iterable[tuple[bool, dict[str, Any]]]],
        query_type: str = "combined_fields",
        timeout_s: float = 10.0,
        rejection_retry: RetryPolicy = REJECTION_RETRY,
    ):
        self.backend = backend
        self.client = client
        # What messages and logs name: a password in QFARM_ES_URL never leaves the client.
        self.url = ",".join(redact_url(u) for u in url.split(","))
        self.alias = alias
        self._errors = errors
        self._bulk = bulk
        self._version: tuple[float, str] | None = None
        # BM25F where the server has it; the first refusal switches to the
        # nearest shape for the life of this retriever (see _fall_back).
        self.query_type = query_type
        self.timeout_s = timeout_s
        self.rejection_retry = rejection_retry
        self.rejections = 0  # searches a full queue rejected and that were sent again

    # ------------------------------------------------------------------ errors

    @contextmanager
    def translate_errors(self, what: str) -> Iterator[None]:
        """Client exceptions → ``RetrievalError`` saying what failed and how to fix it."""
        e = self._errors
        try:
            yield
        except e.timeout as exc:
            raise RetrievalError(
                f"{self.backend} at {self.url} did not answer {what} within "
                f"{self.timeout_s:g} s ({type(exc).__name__}); the cluster is overloaded or "
                "hung: check it, or raise QFARM_ES_TIMEOUT_S"
            ) from exc
        except e.connection as exc:
            raise RetrievalError(
                f"{self.backend} at {self.url} is unreachable ({what}: {type(exc).__name__}); "
                "start the cluster or set QFARM_ES_URL (and QFARM_ES_CA_CERTS for TLS)"
            ) from exc
        except e.wrong_product as exc:
            raise RetrievalError(
                f"{self.url} did not answer as {self.backend} ({what}); if it is an OpenSearch "
                "cluster set QFARM_RETRIEVER=opensearch"
            ) from exc
        except e.not_found as exc:
            raise self.missing_index_error(what) from exc
        except e.api as exc:
            status = _status(exc)
            if status in (401, 403):
                raise RetrievalError(
                    f"{self.backend} at {self.url} refused {what} (HTTP {status}); check "
                    "QFARM_ES_API_KEY or QFARM_ES_USERNAME/QFARM_ES_PASSWORD and their privileges"
                ) from exc
            if "compatible-with" in str(exc) or "media_type_header_exception" in str(exc):
                raise RetrievalError(
                    f"{self.backend} at {self.url} refused the client's API-compatibility headers "
                    f"({what}: HTTP {status}); install the client of the server's major version, "
                    "e.g. `pip install 'elasticsearch>=8,<9'` for an 8.x cluster"
                ) from exc
            raise RetrievalError(f"{self.backend} at {self.url}: {what} failed: {exc}") from exc

    def missing_index_error(self, what: str) -> RetrievalError:
        return RetrievalError(
            f"{self.backend} at {self.url} has no index or alias '{self.alias}' ({what}): "
            f"run `qfarm index --backend {self.backend}` first (or set QFARM_ES_INDEX)"
        )

    # ------------------------------------------------------------------ search

    def _fall_back(self, error: object) -> bool:
        """Switch to ``cross_fields`` when the server does not know ``combined_fields``."""
        text = str(error)
        if self.query_type == "combined_fields" and "combined_fields" in text:
            self.query_type = "cross_fields"
            return True
        return False

    def search(
        self,
        query: str,
        *,
        top_k: int,
        title_boost: float,
        doc_ids: Sequence[str] | None = None,
    ) -> list[Evidence]:
        if top_k < 1:
            return []
        while True:
            # The first stage's window; stage 2 (``rerank_hits``) keeps the best top_k.
            body = search_query.search_body(
                query,
                top_k=max(top_k, ranking.RERANK_DEPTH),
                title_boost=title_boost,
                doc_ids=doc_ids,
                query_type=self.query_type,
            )
            if body is None:
                return []
            try:
                response = self._with_rejection_retries(
                    "search", partial(self.client.search, index=self.alias, body=body)
                )
            except RetrievalError as exc:
                if self._fall_back(exc.__cause__):
                    continue
                raise
            return search_query.evidence_from_hits(ranking.rerank_hits(query, response["hits"]["hits"], top_k))

    def _saturated(self, what: str, attempts: int) -> RetrievalError:
        return RetrievalError(
            f"{self.backend} at {self.url} rejected {what} {attempts} times (HTTP 429: its "
            "search queue is full); the cluster is saturated: run fewer workers or give the "
            "cluster more search threads"
        )

    def _with_rejection_retries(self, what: str, call: Callable[[], Any]) -> Any:
        """``call()`` under ``translate_errors``, sent again after a rejection (REJECTION_RETRY)."""
        attempt = 1
        while True:
            try:
                with self.translate_errors(what):
                    return call()
            except RetrievalError as exc:
                if not _rejected(exc.__cause__) or attempt >= self.rejection_retry.max_attempts:
                    if _rejected(exc.__cause__):
                        raise self._saturated(what, attempt) from exc.__cause__
                    raise
            self.rejections += 1
            time.sleep(compute_backoff(attempt, self.rejection_retry))
            attempt += 1

    def search_many(
        self, queries: Sequence[str], *, top_k: int, title_boost: float
    ) -> list[list[Evidence]]:
        """One ``_msearch`` for all questions; questions without words get ``[]``.

        Searches the node rejected (a full search queue answers 429 per search inside a
        200) are sent again, alone, on the REJECTION_RETRY schedule.
        """
        results: list[list[Evidence]] = [[] for _ in queries]
        if top_k < 1:
            return results
        pending = list(range(len(queries)))
        attempt = 1
        while pending:
            bodies = {
                i: search_query.search_body(
                    queries[i],
                    top_k=max(top_k, ranking.RERANK_DEPTH),
                    title_boost=title_boost,
                    query_type=self.query_type,
                )
                for i in pending
            }
            wanted = [i for i in pending if bodies[i] is not None]
            if not wanted:
                return results
            body = search_query.msearch_body(self.alias, [b for i in wanted if (b := bodies[i])])
            try:
                response = self._with_rejection_retries(
                    "msearch", partial(self.client.msearch, body=body)
                )
            except RetrievalError as exc:
                # A real node rejects the whole _msearch when it cannot parse a query type;
                # a lenient one answers with an error per search (below).
                if self._fall_back(exc.__cause__):
                    continue
                raise
            answers = response["responses"]
            errors = [a["error"] for a in answers if "error" in a and not _rejected(a)]
            if errors and self._fall_back(errors[0]):
                continue
            rejected: list[int] = []
            for i, answer in zip(wanted, answers, strict=True):
                if "error" not in answer:
                    results[i] = search_query.evidence_from_hits(
                        ranking.rerank_hits(queries[i], answer["hits"]["hits"], top_k)
                    )
                elif _rejected(answer):
                    rejected.append(i)
                elif answer.get("status") == 404:
                    raise self.missing_index_error("msearch")
                else:
                    raise RetrievalError(
                        f"{self.backend} at {self.url}: msearch failed: {answer['error']}"
                    )
            if rejected and attempt >= self.rejection_retry.max_attempts:
                raise self._saturated(f"{len(rejected)} of the msearch's searches", attempt)
            if rejected:
                self.rejections += len(rejected)
                time.sleep(compute_backoff(attempt, self.rejection_retry))
                attempt += 1
            pending = rejected
        return results

    # ------------------------------------------------------------------ what is served

    def alias_targets(self) -> list[str]:
        """Concrete indices behind the alias ([the index] when it names an index)."""
        with self.translate_errors("resolve alias"):
            if self.client.indices.exists_alias(name=self.alias):
                return sorted(self.client.indices.get_alias(name=self.alias))
            if self.client.indices.exists(index=self.alias):
                return [self.alias]
        return []

    def index_mappings(self, index: str) -> dict[str, Any]:
        with self.translate_errors("read mapping"):
            mapping = self.client.indices.get_mapping(index=index)
        return dict((mapping.get(index) or {}).get("mappings") or {})

    def index_meta(self, index: str) -> dict[str, Any]:
        return dict(self.index_mappings(index).get("_meta") or {})

    def served_mappings(self, index: str) -> dict[str, Any]:
        """``index``'s mappings; ``RetrievalError`` when ``qfarm index`` did not build it."""
        mappings = self.index_mappings(index)
        problems = indexes.mapping_problems(mappings)
        if problems:
            raise RetrievalError(
                f"{self.backend} at {self.url}: index '{index}' behind '{self.alias}' is not a "
                f"passages index qfarm built ({'; '.join(problems)}): build one with "
                f"`qfarm index --backend {self.backend}`, or point QFARM_ES_INDEX at one"
            )
        return mappings

    def index_version(self) -> str:
        now = time.monotonic()
        if self._version and now - self._version[0] < VERSION_TTL_S:
            return self._version[1]
        targets = self.alias_targets()
        if not targets:
            raise self.missing_index_error("index version")
        meta = self.served_mappings(targets[0])["_meta"]
        # The ranking this code applies, not the one of the build (served_index_version).
        version = indexes.served_index_version(meta) or targets[0]
        self._version = (now, version)
        return version

    def describe(self) -> dict[str, Any]:
        targets = self.alias_targets()
        if not targets:
            raise self.missing_index_error("describe")
        meta = self.index_meta(targets[0])
        with self.translate_errors("count"):
            live = int(self.client.count(index=self.alias)["count"])
        return {
            "backend": self.backend,
            "url": self.url,
            "alias": self.alias,
            "index": targets[0] if len(targets) == 1 else targets,
            "index_version": meta.get("index_version", targets[0]),
            "corpus": meta.get("corpus"),
            "corpus_digest": meta.get("corpus_digest"),
            "chunker_version": meta.get("chunker_version"),
            "documents": meta.get("documents"),
            "passages": live,
            "built_at": meta.get("built_at"),
            "other_versions": [i for i in self.versioned_indices() if i not in targets],
        }

    # ------------------------------------------------------------------ index administration

    def versioned_indices(self) -> list[str]:
        """Every ``<alias>-*`` index on the cluster (built versions, finished or not)."""
        with self.translate_errors("list indices"):
            found = self.client.indices.get(index=f"{self.alias.lower()}-*", allow_no_indices=True)
        return sorted(i for i in found if indexes.is_versioned_index_of(self.alias, i))

    def create_index(self, name: str, body: Mapping[str, Any]) -> None:
        with self.translate_errors(f"create index {name}"):
            if self.client.indices.exists(index=name):
                self.client.indices.delete(index=name)  # an unfinished earlier build
            self.client.indices.create(index=name, body=dict(body))

    def delete_index(self, name: str) -> None:
        with self.translate_errors(f"delete index {name}"):
            self.client.indices.delete(index=name)

    def bulk_index(
        self, name: str, actions: Iterable[dict[str, Any]]
    ) -> Iterator[tuple[bool, dict[str, Any]]]:
        """Stream ``actions`` in chunks; yields ``(ok, item)`` per passage, 429s retried."""
        with self.translate_errors(f"bulk into {name}"):
            yield from self._bulk(
                self.client,
                actions,
                chunk_size=500,
                max_chunk_bytes=10 * 1024 * 1024,
                raise_on_error=False,
                max_retries=3,
                initial_backoff=1,
            )

    def finish_index(self, name: str, meta: Mapping[str, Any], *, replicas: int) -> None:
        """Make a filled index searchable and record what it holds."""
        with self.translate_errors(f"finish index {name}"):
            self.client.indices.refresh(index=name)
            self.client.indices.put_settings(
                index=name, body=indexes.serving_settings(replicas=replicas)
            )
            self.client.indices.put_mapping(index=name, body={"_meta": dict(meta)})

    def switch_alias(self, new_index: str) -> list[str]:
        """Point the alias at ``new_index`` atomically; returns the indices it left."""
        old = [i for i in self.alias_targets() if i != new_index]
        if self.alias.lower() in old:
            raise RetrievalError(
                f"{self.backend} at {self.url}: '{self.alias}' is a concrete index, not an alias; "
                "reindex under another QFARM_ES_INDEX or delete that index first"
            )
        with self.translate_errors(f"switch alias {self.alias}"):
            self.client.indices.update_aliases(
                body=indexes.alias_switch_actions(self.alias, new_index, old)
            )
        self._version = None
        return old

    def close(self) -> None:
        # One retriever per process (qfarm.worker.services), so the retriever owns its client.
        self.client.close()


def cluster_hosts(url_setting: str) -> list[str]:
    """``QFARM_ES_URL`` (comma-separated) → node URLs; ``ConfigError`` on a bad one."""
    hosts = [u.strip().rstrip("/") for u in url_setting.split(",") if u.strip()]
    bad = [u for u in hosts if not u.startswith(("http://", "https://"))]
    if not hosts or bad:
        raise ConfigError(
            "QFARM_ES_URL: expected http(s)://host:port[,http(s)://host:port...], got "
            f"{','.join(redact_url(u) for u in url_setting.split(','))!r}"
        )
    return hosts
