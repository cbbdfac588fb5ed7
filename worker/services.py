"""Per-process resources of a worker: settings, Redis store, retriever, LLM gateway.

Built lazily on first use inside the process that uses them (so prefork
children each open their own connections after the fork), or installed
explicitly by the eager path and tests with ``install_services``.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qfarm.common.settings import Settings, load_settings

if TYPE_CHECKING:  # imported where used at run time: a prefork parent opens no connections
    from qfarm.worker.llm import ResponseStore
    from qfarm.worker.pipeline import Gateway
    from qfarm.worker.retrieval.base import Retriever
    from qfarm.worker.store import WorkerStore


@dataclass
class Services:
    settings: Settings
    store: WorkerStore
    worker_name: str
    retriever_factory: Callable[[], Retriever] | None = None
    gateway_factory: Callable[[], Gateway] | None = None
    # Where the gateway keeps model replies of runs with --cache: Redis on the farm, this
    # process's memory for eager runs (worker/llm/response_cache.py). None: nowhere.
    response_store: ResponseStore | None = None
    _retriever: Retriever | None = None
    _gateway: Gateway | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def retriever(self) -> Retriever:
        with self._lock:
            if self._retriever is None:
                if self.retriever_factory is not None:
                    self._retriever = self.retriever_factory()
                else:
                    from qfarm.worker.retrieval import open_retriever

                    self._retriever = open_retriever(self.settings)
            return self._retriever

    @property
    def gateway(self) -> Gateway:
        with self._lock:
            if self._gateway is None:
                if self.gateway_factory is not None:
                    self._gateway = self.gateway_factory()
                else:
                    from qfarm.worker.llm import open_gateway

                    self._gateway = open_gateway(self.settings, self.response_store)
            return self._gateway

    def close(self) -> None:
        for res in (self._retriever, self._gateway):
            close = getattr(res, "close", None)
            if close:
                close()
        self._retriever = self._gateway = None


_services: Services | None = None
_pid: int | None = None
_guard = threading.Lock()


def build_services(settings: Settings | None = None) -> Services:
    import redis

    from qfarm.worker.llm import RedisResponseCache
    from qfarm.worker.store import WorkerStore

    settings = settings or load_settings()
    client = redis.Redis.from_url(
        settings.redis_url,
        socket_timeout=settings.broker_socket_timeout_s,
        socket_connect_timeout=settings.broker_socket_timeout_s,
        health_check_interval=30,
    )
    name = f"{socket.gethostname()}:{os.getpid()}"
    return Services(
        settings=settings,
        store=WorkerStore(client),
        worker_name=name,
        response_store=RedisResponseCache(client),
    )


def get_services() -> Services:
    """This process's services, built on first use (and again after a fork)."""
    global _services, _pid
    with _guard:
        if _services is None or _pid != os.getpid():
            _services = build_services()
            _pid = os.getpid()
        return _services


def install_services(services: Services | None) -> None:
    """Use these services in this process (eager runs, tests); None resets."""
    global _services, _pid
    with _guard:
        _services = services
        _pid = os.getpid() if services is not None else None
