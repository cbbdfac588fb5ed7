"""The Elasticsearch backend, through the official ``elasticsearch`` client (8.x/9.x).

The client must match the server's major version: the 9.x client sends
``compatible-with=9`` headers that an 8.x server refuses; install
``elasticsearch>=8,<9`` for an 8.x cluster. Retries: connection errors,
timeouts and HTTP 429/502/503/504 only (``QFARM_ES_MAX_RETRIES``); every other
error is raised at once as ``RetrievalError``.
"""

from __future__ import annotations

from typing import Any

from common.settings import Settings
from worker.retrieval.cluster import RETRY_ON_STATUS, ClientErrors, ClusterRetriever, cluster_hosts


def client_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of ``Elasticsearch(...)`` from the QFARM_ES_* settings."""
    hosts = cluster_hosts(settings.es_url)
    options: dict[str, Any] = {
        "hosts": hosts,
        "request_timeout": settings.es_timeout_s,
        "max_retries": settings.es_max_retries,
        "retry_on_timeout": True,
        "retry_on_status": RETRY_ON_STATUS,
    }
    if settings.es_api_key is not None:
        options["api_key"] = settings.es_api_key.get_secret_value()
    elif settings.es_username:
        password = settings.es_password.get_secret_value() if settings.es_password else ""
        options["basic_auth"] = (settings.es_username, password)
    if any(h.startswith("https://") for h in hosts):
        options["verify_certs"] = settings.es_verify_certs
        if settings.es_ca_certs is not None:
            options["ca_certs"] = str(settings.es_ca_certs)
    return options


def open_elasticsearch(settings: Settings) -> ClusterRetriever:
    """A retriever on the ``QFARM_ES_INDEX`` alias, with its own client."""
    import elasticsearch
    from elasticsearch import helpers

    options = client_options(settings)
    client = elasticsearch.Elasticsearch(**options)
    errors = ClientErrors(
        connection=(elasticsearch.ConnectionError, elasticsearch.ConnectionTimeout),
        wrong_product=(elasticsearch.UnsupportedProductError,),
        not_found=(elasticsearch.NotFoundError,),
        api=(elasticsearch.ApiError, elasticsearch.TransportError),
    )
    return ClusterRetriever(
        client,
        backend="elasticsearch",
        url=settings.es_url,
        alias=settings.es_index,
        errors=errors,
        bulk=helpers.streaming_bulk,
    )
