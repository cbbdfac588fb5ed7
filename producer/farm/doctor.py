"""``qfarm doctor``: is every part of the farm this host's settings name up, on one screen.

Each check asks one part with a short timeout and says what it found in a line, what
to do when it is not fine, and its health: ``ok``, ``warn`` (the farm runs, but not as
it could: no worker for a queue yet, one endpoint of several down, no endpoint
configured so eager runs start the simulator), ``fail`` (something a run needs is down
or wrong: Redis, every endpoint, the model not served, the index or the search
cluster) or ``skip`` (not used with these settings). The exit code is 1 when any check
failed, else 0, as every command exits when a service is down (README, 'Exit codes').
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from qfarm.common import keys
from qfarm.common.errors import QfarmError
from qfarm.common.jobs import profile_id_for_model
from qfarm.common.metrics import role_of
from qfarm.common.settings import Settings
from qfarm.common.urls import redact_url
from qfarm.common.vocab import SIMULATOR_HEADER, Backend, ExitCode

DEFAULT_TIMEOUT_S = 3.0
# The libraries a farm's processes stand on, as `pip` names them.
PACKAGES = ("qfarm", "celery", "kombu", "redis", "httpx", "pydantic", "pydantic-settings",
            "elasticsearch", "opensearch-py")


class Health(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    """One part of the farm: what was found (``line``, and a line per worker or endpoint
    in ``details``), what to do when it is not fine (``fix``, one or more lines) and the
    figures (``data``)."""

    name: str
    health: Health
    line: str
    details: tuple[str, ...] = ()
    fix: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "health": str(self.health), "line": self.line,
                "details": list(self.details), "fix": self.fix or None, "data": self.data}


@dataclass(frozen=True)
class Diagnosis:
    checks: list[Check]

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.FAILED if any(c.health == Health.FAIL for c in self.checks) else ExitCode.OK

    def as_json(self) -> dict[str, Any]:
        return {"exit_code": int(self.exit_code),
                "failed": [c.name for c in self.checks if c.health == Health.FAIL],
                "warnings": [c.name for c in self.checks if c.health == Health.WARN],
                "checks": [c.as_json() for c in self.checks]}


def diagnose(settings: Settings, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Diagnosis:
    """Check Redis, the workers, the LLM endpoints, the local index, the search cluster
    and the installed packages, each within about ``timeout_s``."""
    redis_check, client = check_redis(settings, timeout_s)
    checks = [
        redis_check,
        check_workers(settings, client, min(timeout_s, 1.0)),
        check_endpoints(settings, timeout_s),
        check_local_index(settings),
        check_search_cluster(settings, timeout_s),
        check_packages(),
    ]
    return Diagnosis(checks)


def check_redis(settings: Settings, timeout_s: float) -> tuple[Check, Any]:
    """Reachable, its version, the URL (password shown as ***) and the queues' lengths;
    the client too, for the workers' check (None when Redis is down)."""
    from qfarm.producer.store import ProducerStore, connect

    url = redact_url(settings.redis_url)
    try:
        client = connect(settings.redis_url, timeout_s=timeout_s)
        server: dict[str, Any] = client.info("server")  # type: ignore[assignment]
        memory: dict[str, Any] = client.info("memory")  # type: ignore[assignment]
        queued = ProducerStore(client).queue_lengths()
    except QfarmError as exc:
        return Check("redis", Health.FAIL, f"{url} unreachable", fix=str(exc),
                     data={"url": url}), None
    except Exception as exc:  # answered PING, then failed: a server that refuses INFO, say
        return Check("redis", Health.FAIL, f"{url}: {type(exc).__name__}: {exc}",
                     fix="check QFARM_REDIS_URL and the server's log", data={"url": url}), None
    version_ = str(server.get("redis_version", "?"))
    used = memory.get("used_memory_human", "?")
    limit = int(memory.get("maxmemory", 0) or 0)
    line = (f"{url}  Redis {version_}, {used} used"
            + (f" of maxmemory {memory.get('maxmemory_human')}" if limit else "")
            + "  queued messages: " + " ".join(f"{q}={n}" for q, n in queued.items()))
    return Check("redis", Health.OK, line, data={
        "url": url, "version": version_, "used_memory": memory.get("used_memory"),
        "maxmemory": limit or None, "queued_messages": queued}), client


def check_workers(settings: Settings, client: Any, timeout_s: float) -> Check:
    """The workers that answer Celery's inspect (and, failing that, their heartbeats in
    Redis), each with its role and queues, and the queues no worker consumes."""
    from qfarm.producer.runs.consumers import worker_commands
    from qfarm.producer.store import ProducerStore

    if client is None:
        return Check("workers", Health.SKIP, "not asked: Redis is unreachable")
    workers: dict[str, list[str]] = {}
    try:
        from qfarm.producer.runs.services import celery_app

        replies = celery_app(settings).control.inspect(timeout=timeout_s).active_queues() or {}
        workers = {name: sorted(q["name"] for q in queues) for name, queues in replies.items()}
    except Exception as exc:  # the broker refused the broadcast: the heartbeats still say
        inspect_error = f"{type(exc).__name__}: {exc}"
    else:
        inspect_error = ""
    if not workers:  # workers with remote control off still beat in Redis
        for w in ProducerStore(client).live_workers():
            workers[w.name] = sorted(w.queues)
    by_queue = {q: sorted(n for n, qs in workers.items() if q in qs) for q in keys.QUEUES}
    details = tuple(f"{name} ({role_of(qs)}): {', '.join(qs)}" for name, qs in sorted(workers.items()))
    missing = [q for q, names in by_queue.items() if not names]
    counts = "  ".join(f"{q}={len(n)}" for q, n in by_queue.items())
    data = {"workers": workers, "by_queue": by_queue, "missing": missing,
            "inspect_error": inspect_error or None}
    if not missing:
        return Check("workers", Health.OK, f"{len(workers)} answered; per queue: {counts}",
                     details, data=data)
    fix = "\n".join(["start workers with:", *worker_commands(missing)])
    what = f"{len(workers)} answered" if workers else "none answered"
    return Check("workers", Health.WARN,
                 f"{what}; no worker consumes {', '.join(missing)} (per queue: {counts})",
                 details, fix=fix, data=data)


@dataclass(frozen=True)
class _Endpoint:
    url: str
    ok: bool
    usable: bool  # False: answering but unusable (another model, not OpenAI, a refused key)
    line: str
    data: dict[str, Any]


def check_endpoints(settings: Settings, timeout_s: float) -> Check:
    """Each endpoint's ``GET /v1/models``: the models it serves, whether QFARM_MODEL is one,
    its context window and whether it is the qfarm simulator."""
    model = settings.model
    profile = profile_id_for_model(model)
    head = f"model {model} (profile {profile})"
    if not settings.endpoints:
        return Check("llm", Health.WARN, f"no endpoint configured; {head}",
                     fix="eager runs start the simulator; distributed runs need "
                         "QFARM_LLM_ENDPOINTS (vLLM base URLs, or `qfarm sim --port 8000`)",
                     data={"model": model, "profile": profile, "endpoints": []})
    import httpx

    found: list[_Endpoint] = []
    with httpx.Client(timeout=timeout_s) as http:
        for url in settings.endpoints:
            found.append(_probe(http, url, settings.api_key_for(url), model))
    details = tuple(e.line for e in found)
    data = {"model": model, "profile": profile, "endpoints": [e.data for e in found]}
    wrong = [e for e in found if not e.usable]
    alive = [e for e in found if e.ok]
    fix_model = f"set QFARM_MODEL to an id the endpoints serve, or serve {model} there"
    if wrong:
        return Check("llm", Health.FAIL, f"{len(wrong)} of {len(found)} endpoints unusable; {head}",
                     details, fix=fix_model, data=data)
    if not alive:
        return Check("llm", Health.FAIL, f"no endpoint answers; {head}", details,
                     fix="start the servers or fix QFARM_LLM_ENDPOINTS", data=data)
    if len(alive) < len(found):
        return Check("llm", Health.WARN, f"{len(alive)} of {len(found)} endpoints answer; {head}",
                     details, fix="the runs use the endpoints that answer; start the others",
                     data=data)
    return Check("llm", Health.OK, f"{len(found)} endpoint{'s serve' if len(found) > 1 else ' serves'} "
                 f"{head}", details, data=data)


def _probe(http: Any, url: str, api_key: str | None, model: str) -> _Endpoint:
    import httpx

    from qfarm.producer.runs.endpoints import NotOpenAI, served_model_ids

    shown = redact_url(url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    base: dict[str, Any] = {"url": shown}
    try:
        resp = http.get(f"{url}/v1/models", headers=headers)
    except httpx.HTTPError as exc:
        return _Endpoint(url, False, True, f"{shown}: unreachable ({type(exc).__name__})",
                         {**base, "health": "unreachable"})
    if resp.status_code in (401, 403):
        return _Endpoint(url, False, False, f"{shown}: refused the API key ({resp.status_code}); "
                         "set QFARM_LLM_API_KEY or QFARM_LLM_API_KEYS", {**base, "health": "refused"})
    if resp.status_code >= 500:
        return _Endpoint(url, False, True, f"{shown}: answered {resp.status_code}",
                         {**base, "health": f"status {resp.status_code}"})
    try:
        if resp.status_code != 200:
            raise NotOpenAI(f"status {resp.status_code}")
        ids = served_model_ids(resp.content)
    except NotOpenAI as exc:
        return _Endpoint(url, False, False, f"{shown}: not an OpenAI-compatible server (GET "
                         f"/v1/models answered {exc})", {**base, "health": "not openai"})
    simulated = SIMULATOR_HEADER in resp.headers
    entry = next((e for e in resp.json()["data"] if e.get("id") == model), None)
    window = entry.get("max_model_len") if isinstance(entry, dict) else None
    data = {**base, "health": "ok", "models": ids, "serves_model": entry is not None,
            "max_model_len": window, "simulator": simulated}
    kind = "SIMULATED (the qfarm vLLM simulator)" if simulated else "server"
    if entry is None:
        return _Endpoint(url, True, False, f"{shown}: {kind} serves {ids[:5]}, not {model!r}",
                         {**data, "health": "wrong model"})
    return _Endpoint(url, True, True, f"{shown}: {kind}, serves {model}"
                     + (f", max_model_len {window}" if window else ""), data)


def check_local_index(settings: Settings) -> Check:
    """The embedded index file: its version, corpus and size, and whether it is intact.

    With a cluster backend runs do not search it, so a missing file is no failure; nor
    is a missing default index, which the first run builds (``qfarm index`` builds it now).
    """
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever, check_index_pages

    path = settings.embedded_index_path()
    needed = settings.retriever == Backend.EMBEDDED
    builds_itself = needed and settings.index_path is None
    try:
        retriever = EmbeddedRetriever(path)
        try:
            info = retriever.describe()
        finally:
            retriever.close()
        check_index_pages(path, info.get("corpus"))
    except QfarmError as exc:
        data = {"path": str(path), "error": str(exc)}
        if not needed:
            return Check("index", Health.SKIP, f"{path}: not usable, and not searched "
                         f"(QFARM_RETRIEVER={settings.retriever})", data=data)
        if builds_itself and not path.exists():
            return Check("index", Health.WARN, f"{path}: not built yet",
                         fix="the first run builds it; `qfarm index` builds it now", data=data)
        return Check("index", Health.FAIL, f"{path}: not usable", fix=str(exc), data=data)
    line = (f"{path}  version {info.get('index_version')}, corpus {info.get('corpus')}, "
            f"{info.get('documents')} documents, {info.get('passages')} passages")
    if not needed:
        line += f" (not searched: QFARM_RETRIEVER={settings.retriever})"
    stale = _stale_default(settings, info) if settings.index_path is None else None
    if stale:
        return Check("index", Health.WARN, line, fix=stale, data=info)
    return Check("index", Health.OK, line, data=info)


def _stale_default(settings: Settings, info: dict[str, Any]) -> str | None:
    """Why the default index is not the one this qfarm builds, or None."""
    try:
        from qfarm.worker.retrieval.ingest import CorpusSource

        source = CorpusSource.resolve("default")
    except Exception:  # the default corpus's package is missing: nothing to compare with
        return None
    if info.get("corpus") == source.label and info.get("index_version") != source.index_version:
        return (f"built as {info.get('index_version')}, this qfarm builds "
                f"{source.index_version}: `qfarm index` rebuilds it (runs rebuild it first)")
    return None


def check_search_cluster(settings: Settings, timeout_s: float) -> Check:
    """With QFARM_RETRIEVER=elasticsearch or opensearch: the cluster answers, its version,
    and the alias QFARM_ES_INDEX points at a passages index ``qfarm index`` built."""
    if settings.retriever == Backend.EMBEDDED:
        return Check("search", Health.SKIP, "no cluster: QFARM_RETRIEVER=embedded")
    from qfarm.producer.farm.index import index_info
    from qfarm.worker.retrieval import open_retriever

    quick = settings.model_copy(update={"es_timeout_s": min(timeout_s, settings.es_timeout_s),
                                        "es_max_retries": 0})
    url = ",".join(redact_url(u) for u in settings.es_url.split(","))
    data: dict[str, Any] = {"backend": str(settings.retriever), "url": url,
                            "alias": settings.es_index}
    try:
        retriever: Any = open_retriever(quick)
        try:
            with retriever.translate_errors("info"):
                server = retriever.client.info()
        finally:
            retriever.close()
        info = index_info(quick)
    except ImportError as exc:
        return Check("search", Health.FAIL, f"{settings.retriever}: its client is not installed "
                     f"({exc.name})", fix="install the client of the cluster's major version "
                     "(docs/retrieval.md)",
                     data=data)
    except QfarmError as exc:
        return Check("search", Health.FAIL, f"{settings.retriever} at {url}: not usable",
                     fix=str(exc), data=data)
    ver = server.get("version") or {}
    product = ver.get("distribution") or "elasticsearch"
    data.update({"server": f"{product} {ver.get('number')}", **info})
    line = (f"{product} {ver.get('number')} at {url}  alias {settings.es_index} -> "
            f"{info.get('index')}: version {info.get('index_version')}, "
            f"{info.get('passages')} passages, corpus {info.get('corpus')}")
    return Check("search", Health.OK, line, data=data)


def check_packages(installed: Callable[[str], str] = version) -> Check:
    """The versions of qfarm and the libraries its processes stand on (``-``: not installed)."""
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = installed(name)
        except PackageNotFoundError:
            found[name] = None
    line = f"Python {sys.version.split()[0]}  " + "  ".join(
        f"{name} {v or '-'}" for name, v in found.items())
    return Check("packages", Health.OK, line, data={"python": sys.version.split()[0], **found})
