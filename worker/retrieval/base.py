"""The ``Retriever`` seam: one interface, three backends (embedded, Elasticsearch, OpenSearch).

Every backend indexes passages cut by ``qfarm.common.retrieval.chunking`` and ranks them with
the query shape of ``qfarm.common.retrieval.ranking``, and returns the same evidence map,
so a sweep's rows differ by backend only where the row says so (``retriever``
and ``index_version``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from qfarm.common.models import Evidence
from qfarm.common.vocab import Backend


@runtime_checkable
class Retriever(Protocol):
    """What the pipeline needs from a search backend."""

    backend: Backend

    def search(
        self,
        query: str,
        *,
        top_k: int,
        title_boost: float,
        doc_ids: Sequence[str] | None = None,
    ) -> list[Evidence]:
        """Evidence E1..Ek in rank order; ``[]`` when nothing matches.

        ``doc_ids`` restricts the search to those documents (an optional filter).
        Raises ``RetrievalError`` when the backend is unreachable or has no index.
        """
        ...

    def search_many(
        self, queries: Sequence[str], *, top_k: int, title_boost: float
    ) -> list[list[Evidence]]:
        """``search`` for several questions at once (one ``_msearch`` on a cluster)."""
        ...

    def index_version(self) -> str:
        """Corpus digest + chunker version of the index being served."""
        ...

    def describe(self) -> dict[str, Any]:
        """Backend, index/alias, version and counts, for manifests and ``--check``."""
        ...

    def close(self) -> None: ...
