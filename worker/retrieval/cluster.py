"""What the Elasticsearch and OpenSearch backends share: search, ``_msearch``,
versioned indices behind an alias, and translation of client errors.

Both official clients take the same request bodies (``qfarm.common.retrieval.ranking``)
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
from typing import Any

from qfarm.common.errors import ConfigError, RetrievalError
from qfarm.common.models import Evidence
from qfarm.common.retrieval import ranking as sq

VERSION_TTL_S = 30.0  # how long index_version() trusts its last alias lookup


@dataclass(frozen=True)
class ClientErrors:
    """The exception classes of one client library, most specific first."""

    connection: tuple[type[BaseException], ...]
    not_found: tuple[type[BaseException], ...]
    api: tuple[type[BaseException], ...]
    wrong_product: tuple[type[BaseException], ...] = ()


# Transient statuses both clients retry (QFARM_ES_MAX_RETRIES); others fail at once.
RETRY_ON_STATUS = (429, 502, 503, 504)


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
        backend: str,
        url: str,
        alias: str,
        errors: ClientErrors,
        bulk: Callable[..., Iterable[tuple[bool, dict[str, Any]]]],
    ):
        self.backend = backend
        self.client = client
        self.url = url
        self.alias = alias
        self._errors = errors
        self._bulk = bulk
        self._version: tuple[float, str] | None = None
        # BM25F where the server has it; the first refusal switches to the
        # nearest shape for the life of this retriever (see _fall_back).
        self.query_type = "combined_fields"

    # ------------------------------------------------------------------ errors

    @contextmanager
    def translate_errors(self, what: str) -> Iterator[None]:
        """Client exceptions → ``RetrievalError`` saying what failed and how to fix it."""
        e = self._errors
        try:
            yield
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
            body = sq.search_body(
                query,
                top_k=max(top_k, sq.RERANK_DEPTH),
                title_boost=title_boost,
                doc_ids=doc_ids,
                query_type=self.query_type,
            )
            if body is None:
                return []
            try:
                with self.translate_errors("search"):
                    response = self.client.search(index=self.alias, body=body)
            except RetrievalError as exc:
                if self._fall_back(exc.__cause__):
                    continue
                raise
            return sq.evidence_from_hits(sq.rerank_hits(query, response["hits"]["hits"], top_k))

    def search_many(
        self, queries: Sequence[str], *, top_k: int, title_boost: float
    ) -> list[list[Evidence]]:
        """One ``_msearch`` for all questions; questions without words get ``[]``."""
        results: list[list[Evidence]] = [[] for _ in queries]
        if top_k < 1:
            return results
        while True:
            bodies = [
                sq.search_body(
                    q,
                    top_k=max(top_k, sq.RERANK_DEPTH),
                    title_boost=title_boost,
                    query_type=self.query_type,
                )
                for q in queries
            ]
            wanted = [b for b in bodies if b is not None]
            if not wanted:
                return results
            with self.translate_errors("msearch"):
                response = self.client.msearch(body=sq.msearch_body(self.alias, wanted))
            errors = [a["error"] for a in response["responses"] if "error" in a]
            if errors and self._fall_back(errors[0]):
                continue
            break
        answers = iter(response["responses"])
        for i, body in enumerate(bodies):
            if body is None:
                continue
            answer = next(answers)
            if "error" in answer:
                if answer.get("status") == 404:
                    raise self.missing_index_error("msearch")
                raise RetrievalError(
                    f"{self.backend} at {self.url}: msearch failed: {answer['error']}"
                )
            results[i] = sq.evidence_from_hits(
                sq.rerank_hits(queries[i], answer["hits"]["hits"], top_k)
            )
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

    def index_meta(self, index: str) -> dict[str, Any]:
        with self.translate_errors("read mapping"):
            mapping = self.client.indices.get_mapping(index=index)
        return dict((mapping.get(index) or {}).get("mappings", {}).get("_meta") or {})

    def index_version(self) -> str:
        now = time.monotonic()
        if self._version and now - self._version[0] < VERSION_TTL_S:
            return self._version[1]
        targets = self.alias_targets()
        if not targets:
            raise self.missing_index_error("index version")
        # The ranking this code applies, not the one of the build (served_index_version).
        version = sq.served_index_version(self.index_meta(targets[0])) or targets[0]
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
        return sorted(i for i in found if sq.is_versioned_index_of(self.alias, i))

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
                index=name, body=sq.serving_settings(replicas=replicas)
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
                body=sq.alias_switch_actions(self.alias, new_index, old)
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
            f"QFARM_ES_URL: expected http(s)://host:port[,http(s)://host:port...], got {url_setting!r}"
        )
    return hosts
