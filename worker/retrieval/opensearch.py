"""The OpenSearch backend, through the official ``opensearch-py`` client.

Authentication: basic auth (``QFARM_ES_USERNAME``/``QFARM_ES_PASSWORD``), or
``QFARM_ES_API_KEY`` sent as ``Authorization: ApiKey …`` for gateways that
accept it (the OpenSearch security plugin itself has no API keys). Retries:
connection errors, timeouts and HTTP 502/503/504 at once, by the client; rejections (HTTP
429) with back-off, by ``ClusterRetriever``.
"""

from __future__ import annotations

from typing import Any

from qfarm.common.settings import Settings
from qfarm.common.vocab import Backend
from qfarm.worker.retrieval.cluster import (
    RETRY_ON_STATUS,
    ClientErrors,
    ClusterRetriever,
    cluster_hosts,
)


def client_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of ``OpenSearch(...)`` from the QFARM_ES_* settings."""
    hosts = cluster_hosts(settings.es_url)
    options: dict[str, Any] = {
        "hosts": hosts,
        "timeout": settings.es_timeout_s,
        "max_retries": settings.es_max_retries,
        "retry_on_timeout": True,
        "retry_on_status": RETRY_ON_STATUS,
    }
    if settings.es_api_key is not None:
        options["headers"] = {"Authorization": f"ApiKey {settings.es_api_key.get_secret_value()}"}
    elif settings.es_username:
        password = settings.es_password.get_secret_value() if settings.es_password else ""
        options["http_auth"] = (settings.es_username, password)
    if any(h.startswith("https://") for h in hosts):
        options["verify_certs"] = settings.es_verify_certs
        options["ssl_show_warn"] = settings.es_verify_certs
        if settings.es_ca_certs is not None:
            options["ca_certs"] = str(settings.es_ca_certs)
    return options


def open_opensearch(settings: Settings) -> ClusterRetriever:
    """A retriever on the ``QFARM_ES_INDEX`` alias, with its own client."""
    import opensearchpy
    from opensearchpy import helpers

    options = client_options(settings)
    client = opensearchpy.OpenSearch(**options)
    errors = ClientErrors(
        connection=(opensearchpy.ConnectionError,),
        timeout=(opensearchpy.ConnectionTimeout,),
        not_found=(opensearchpy.NotFoundError,),
        api=(opensearchpy.TransportError,),
    )
    return ClusterRetriever(
        client,
        backend=Backend.OPENSEARCH,
        url=settings.es_url,
        alias=settings.es_index,
        errors=errors,
        bulk=helpers.streaming_bulk,
        timeout_s=settings.es_timeout_s,
        # OpenSearch has no combined_fields (2.19 answers "unknown query
        # [combined_fields]"): start with the shape it parses instead of paying a
        # refused request, and its warning line, in every process.
        query_type="cross_fields",
    )
