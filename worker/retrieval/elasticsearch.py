"""The Elasticsearch backend, through the official client of the server's major (8.x/9.x).

The client must not be newer than the server: the 9.x client sends
``compatible-with=9`` headers that an 8.x server refuses on every request. The
package installs ``elasticsearch`` (9.x, for 9.x clusters); a user with an 8.x
cluster replaces it with the 8.x client, either as ``elasticsearch>=8.13,<9``
or as the separately published ``elasticsearch8`` package (both import here;
the two majors need different ``elastic-transport`` majors, so only one can be
installed). Opening the backend asks the server its version with a request
the client does not rewrite (``GET /``, ``Accept: */*``) and, on a mismatch,
fails at once with the package to install instead of on the first search.
Retries: connection errors, timeouts and HTTP 502/503/504 at once, by the client;
rejections (HTTP 429) with back-off, by ``ClusterRetriever``; nothing else
(``QFARM_ES_MAX_RETRIES``); every other error is raised at once as
``RetrievalError``.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from qfarm.common.errors import ConfigError, RetrievalError
from qfarm.common.settings import Settings
from qfarm.common.vocab import Backend
from qfarm.worker.retrieval.cluster import (
    RETRY_ON_STATUS,
    ClientErrors,
    ClusterRetriever,
    cluster_hosts,
)

# Import names of the official client, in order of preference: the package
# this project depends on, then the per-major packages.
CLIENT_MODULES = ("elasticsearch", "elasticsearch9", "elasticsearch8")


def import_client() -> ModuleType:
    for name in CLIENT_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ConfigError(
        "QFARM_RETRIEVER=elasticsearch needs the Elasticsearch client: `pip install elasticsearch` "
        "for a 9.x cluster, `pip install 'elasticsearch>=8.13,<9'` (or `elasticsearch8`) for 8.x"
    )


def major(version: str) -> int | None:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def server_version(client: Any) -> str | None:
    """The server's ``version.number``; ``None`` when it cannot be read now.

    ``Accept: */*`` is the one media type the client sends unchanged, so an
    older server answers even a newer client. An unreachable or refusing
    server is reported by the first real request, with the usual fixes, and so
    is a server that is not Elasticsearch.
    """
    try:
        info = client.perform_request("GET", "/", headers={"accept": "*/*"}).body
    except Exception:  # any failure here is reported by the next request
        return None
    version = info.get("version") if isinstance(info, dict) else None
    if not isinstance(version, dict) or version.get("distribution", "elasticsearch") != "elasticsearch":
        return None  # not Elasticsearch (OpenSearch numbers its releases its own way)
    return str(version["number"]) if version.get("number") else None


def check_client_fits_server(module: ModuleType, url: str, version: str | None) -> None:
    """``RetrievalError`` naming the client to install when the client is newer than the server."""
    client_version = str(getattr(module, "__versionstr__", ""))
    theirs, ours = major(version or ""), major(client_version)
    if theirs is None or ours is None or ours <= theirs:
        return  # a client works with its own major and (compatible-with) the next one
    raise RetrievalError(
        f"Elasticsearch at {url} is version {version}, but the installed client "
        f"`{module.__name__}` is {client_version}: a {ours}.x client cannot talk to a "
        f"{theirs}.x server. Install the {theirs}.x client in its place: "
        f"`pip uninstall -y {module.__name__} && pip install 'elasticsearch>={theirs},<{theirs + 1}'` "
        f"(or the `elasticsearch{theirs}` package)"
    )


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
    elasticsearch = import_client()
    helpers = importlib.import_module(f"{elasticsearch.__name__}.helpers")

    options = client_options(settings)
    client = elasticsearch.Elasticsearch(**options)
    try:
        check_client_fits_server(elasticsearch, settings.es_url, server_version(client))
    except RetrievalError:
        client.close()
        raise
    errors = ClientErrors(
        connection=(elasticsearch.ConnectionError,),
        timeout=(elasticsearch.ConnectionTimeout,),
        wrong_product=(elasticsearch.UnsupportedProductError,),
        not_found=(elasticsearch.NotFoundError,),
        api=(elasticsearch.ApiError, elasticsearch.TransportError),
    )
    return ClusterRetriever(
        client,
        backend=Backend.ELASTICSEARCH,
        url=settings.es_url,
        alias=settings.es_index,
        errors=errors,
        bulk=helpers.streaming_bulk,
        timeout_s=settings.es_timeout_s,
    )
