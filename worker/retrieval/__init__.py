"""Retrieval backends behind one ``Retriever`` interface (docs/retrieval.md, 'Interface (what the pipeline calls)').

``open_retriever(settings)`` picks the backend named by ``QFARM_RETRIEVER``:
``embedded`` (SQLite FTS5 file, the default), ``elasticsearch`` or
``opensearch`` (the official clients, on the ``QFARM_ES_INDEX`` alias).
``ensure_default_index(settings)`` builds the embedded default-corpus index
when it is missing or stale. Open one retriever per process and reuse it
(``qfarm.worker.services`` does); cluster clients are shared within a process.
"""

from __future__ import annotations

from pathlib import Path

from qfarm.common.errors import ConfigError
from qfarm.common.settings import Settings
from qfarm.common.vocab import Backend
from qfarm.worker.retrieval.base import Retriever


def open_retriever(settings: Settings) -> Retriever:
    """The retriever ``settings.retriever`` names; cluster backends connect lazily."""
    backend = settings.retriever
    if backend == Backend.EMBEDDED:
        from qfarm.worker.retrieval.embedded import EmbeddedRetriever

        retriever = EmbeddedRetriever(settings.embedded_index_path(), dense_model=settings.dense_model)
        retriever.check_dense_model()
        return retriever
    if settings.dense:
        raise ConfigError(
            f"QFARM_DENSE=1: the dense stage is for the embedded index only, not {backend}; "
            "unset QFARM_DENSE or set QFARM_RETRIEVER=embedded (docs/retrieval.md, 'Dense stage')"
        )
    if backend == Backend.ELASTICSEARCH:
        from qfarm.worker.retrieval.elasticsearch import open_elasticsearch

        return open_elasticsearch(settings)
    if backend == Backend.OPENSEARCH:
        from qfarm.worker.retrieval.opensearch import open_opensearch

        return open_opensearch(settings)
    raise ConfigError(
        f"QFARM_RETRIEVER: unknown backend {backend!r}; use " + ", ".join(Backend)
    )


def ensure_default_index(settings: Settings, *, progress: bool = True) -> Path:
    """Build the embedded default-corpus index if missing or stale; returns its path."""
    from qfarm.worker.retrieval.ingest import ensure_default_index as _ensure

    return _ensure(settings, progress=progress)


__all__ = ["Retriever", "ensure_default_index", "open_retriever"]
