"""Building and describing the passages index, on whichever backend the settings name
(``qfarm index``): a new build replaces the served index only when it is complete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qfarm.common.errors import ConfigError, RetrievalError
from qfarm.common.settings import Settings
from qfarm.common.vocab import Backend

if TYPE_CHECKING:  # the retrieval backends are imported only when an index is built or read
    from qfarm.worker.retrieval.ingest import CorpusSource, IngestReport


def build_index(settings: Settings, corpus: str = "default", *, progress: bool = False,
                max_errors: int = 100, force: bool = False, prune: bool = False) -> IngestReport:
    """Index ``corpus`` (a path or ``default``) on the configured backend; the served index
    switches only when complete. ``prune`` (clusters) deletes older versioned indices."""
    from qfarm.worker.retrieval.ingest import CorpusSource, build_embedded_index

    source = CorpusSource.resolve(corpus)
    if settings.retriever == Backend.EMBEDDED:
        encoder = None
        if settings.dense:
            from qfarm.worker.retrieval.dense import open_encoder

            encoder = open_encoder(settings.dense_model)
        return build_embedded_index(
            source,
            settings.embedded_index_path(),
            progress=progress,
            max_errors=max_errors,
            force=force,
            encoder=encoder,
        )
    if settings.dense:
        raise ConfigError(
            f"--dense / QFARM_DENSE: the dense stage is for the embedded index only, not "
            f"{settings.retriever}; drop --dense or use --backend embedded"
        )
    return _build_cluster(settings, source, progress=progress, max_errors=max_errors,
                          force=force, prune=prune)


def _build_cluster(settings: Settings, source: CorpusSource, *, progress: bool, max_errors: int,
                   force: bool, prune: bool) -> IngestReport:
    """Elasticsearch/OpenSearch: a new versioned index, then the alias moves to it."""
    from qfarm.worker.retrieval import open_retriever
    from qfarm.worker.retrieval.cluster import ClusterRetriever
    from qfarm.worker.retrieval.ingest import build_cluster_index

    retriever = open_retriever(settings)
    if not isinstance(retriever, ClusterRetriever):  # pragma: no cover - guarded by settings
        raise RetrievalError(f"backend {settings.retriever} cannot be built by qfarm index")
    try:
        return build_cluster_index(
            retriever,
            source,
            progress=progress,
            max_errors=max_errors,
            force=force,
            shards=settings.es_shards,
            replicas=settings.es_replicas,
            prune=prune,
        )
    finally:
        retriever.close()


def index_info(settings: Settings, corpus: str | None = None) -> dict[str, Any]:
    """What the configured backend serves (counts, version, alias target...), with
    ``up_to_date`` when ``corpus`` names the corpus it was built from."""
    from qfarm.worker.retrieval import open_retriever
    from qfarm.worker.retrieval.ingest import CorpusSource

    retriever = open_retriever(settings)
    try:
        info = retriever.describe()
        # What rows of searches now record: the ranking is today's, whatever the build's.
        info["searched_as"] = retriever.index_version()
    finally:
        retriever.close()
    if corpus is not None and info.get("corpus") == CorpusSource.resolve(corpus).label:
        expected = CorpusSource.resolve(corpus).index_version
        info["up_to_date"] = info.get("index_version") == expected
    return info
