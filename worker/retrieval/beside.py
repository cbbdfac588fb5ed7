"""The embedded index searched in a process beside an eager sweep's own.

An eager sweep runs in one interpreter, and its search of each new question (Python
and NumPy, about 0.7 ms on the default index alone, 0.9 within a sweep) holds the interpreter lock that the
gateway's loop and the verifications wait for. On a machine with a second core, a
child process opens the same index file read-only and answers the sweep's
``search_many`` calls over a pipe; the sweep's pool threads wait for it without the
lock. On two simulated endpoints, 1,976 distinct questions, six rounds alternated with
the search in the sweep's process: requests flowed at 0.71-0.82 of ideal there and
0.79-0.86 with the search beside it (about +0.05 paired), for about 0.2 ms more CPU a
request over both processes (bench/README, 'CPU per job').

Same file, same code: the child finds the hits this process would (the evidence
crosses the pipe pickled). This process searches itself until the child says it is
ready, after it has gone (killed, crashed) and when a search there failed, so a
child that starts slowly or dies costs time, never a search or a row.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from multiprocessing.context import ForkContext, SpawnContext
from pathlib import Path
from typing import Any

from qfarm.common.models import Evidence
from qfarm.common.vocab import Backend
from qfarm.worker.retrieval.embedded import EmbeddedRetriever

log = logging.getLogger("qfarm.worker")

# A sweep with fewer distinct questions searches in its own process: the child's start
# (a fork, or a fresh interpreter importing the search code: 0.3-0.6 s of CPU) would
# cost more than its few searches take off the sweep's interpreter.
MIN_QUESTIONS = 64
# One endpoint's requests are within what the run's process serves alone (0.94 of ideal
# while they flow, with or without the child, on one simulated endpoint): there the child
# would only add CPU. From two on, that process is the limit.
MIN_ENDPOINTS = 2
# How long one call may take in the child before it is taken for stuck (a bundle's
# searches take tens of milliseconds): it is killed and this process searches itself.
CALL_TIMEOUT_S = 30.0
# How long closing waits for the child to leave before killing it.
CLOSE_WAIT_S = 5.0


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def search_beside(retriever: Any, *, questions: int, endpoints: int, enabled: bool = True) -> Any:
    """``retriever``, or a ``SearchProcess`` over it when an eager sweep of ``questions``
    distinct questions on ``endpoints`` endpoints gains from one: an embedded index without
    passage vectors (the dense stage's encoder would load in both processes), a second
    core, enough questions, more than one endpoint."""
    if (not enabled or not isinstance(retriever, EmbeddedRetriever) or cores() < 2
            or questions < MIN_QUESTIONS or endpoints < MIN_ENDPOINTS
            or retriever.describe().get("dense_model")):  # fmt: skip
        return retriever
    return SearchProcess(retriever)


class SearchProcess:
    """An embedded retriever whose ``search_many`` runs in a child process; everything
    else (titles, version, the manifest's description) is the local retriever's."""

    backend: Backend = Backend.EMBEDDED
    # The runner's threads wait outside the interpreter while the child searches.
    searches_elsewhere = True

    def __init__(self, local: EmbeddedRetriever):
        self._local = local
        # A fork starts in milliseconds with every module already imported, but only a
        # process with one thread can be forked safely; otherwise a fresh interpreter.
        fork = threading.active_count() == 1 and os.name == "posix"
        ctx: ForkContext | SpawnContext = (
            multiprocessing.get_context("fork") if fork else multiprocessing.get_context("spawn"))
        method = "fork" if fork else "spawn"
        mine, theirs = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(theirs, mine, str(local.path)),
                                    name="qfarm-search", daemon=True)  # fmt: skip
        self._process.start()
        theirs.close()
        self._conn: Connection | None = mine
        self._lock = threading.Lock()
        self._ready = False
        self.start_method = method
        log.debug("searching %s in process %s beside this one (%s)", local.path,
                  self._process.pid, method)  # fmt: skip

    def started(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the child to open the index: True once it searches
        the run's bundles, False while this process still does (starting, or gone)."""
        with self._lock:
            return self._searches_there(timeout_s)

    def _searches_there(self, timeout_s: float) -> bool:
        """Under ``_lock``: whether the child takes searches now, after waiting up to
        ``timeout_s`` for the word that it opened the index."""
        conn = self._conn
        if conn is not None and not self._ready:
            try:
                if conn.poll(timeout_s):
                    self._take_ready(conn.recv())
            except (EOFError, OSError) as exc:
                self._lost(type(exc).__name__)
        return self._ready and self._conn is not None

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def search(self, query: str, *, top_k: int, title_boost: float,
               doc_ids: Sequence[str] | None = None) -> list[Evidence]:  # fmt: skip
        if doc_ids is not None:
            return self._local.search(query, top_k=top_k, title_boost=title_boost, doc_ids=doc_ids)
        return self.search_many([query], top_k=top_k, title_boost=title_boost)[0]

    def search_many(
        self, queries: Sequence[str], *, top_k: int, title_boost: float
    ) -> list[list[Evidence]]:
        if queries:
            with self._lock:  # one call in the child at a time; a second thread waits here
                found = self._in_child(list(queries), top_k, title_boost)
            if found is not None:
                return found
        return self._local.search_many(queries, top_k=top_k, title_boost=title_boost)

    def _in_child(self, queries: list[str], top_k: int, title_boost: float) -> list[list[Evidence]] | None:
        """The child's hits; None when this process must search (not ready, gone, failed)."""
        if not self._searches_there(0):
            return None  # still starting (this bundle is searched here), or gone
        conn = self._conn
        assert conn is not None
        try:
            conn.send(("search", queries, top_k, title_boost))
            if not conn.poll(CALL_TIMEOUT_S):
                self._lost(f"no answer in {CALL_TIMEOUT_S:g} s")
                return None
            kind, payload = conn.recv()
        except (EOFError, OSError) as exc:
            self._lost(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            return None
        if kind != "hits":  # the search failed there: here it raises with its own kind
            log.debug("search process: %s; searching in this process", payload)
            return None
        hits: list[list[Evidence]] = payload
        return hits

    def _take_ready(self, message: tuple[str, str | None]) -> None:
        kind, detail = message
        if kind == "ready":
            self._ready = True
        else:
            self._lost(f"could not open the index there ({detail})")

    def _lost(self, why: str) -> None:
        """The child is gone or stuck: stop it, and search here from now on."""
        log.warning("the search process beside this run stopped (%s); this run searches "
                    "in its own process from now on", why)  # fmt: skip
        self._stop(wait_s=0.0)

    def _stop(self, *, wait_s: float) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()  # the child reads its end of the pipe closing and leaves
        self._process.join(wait_s)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    def title_set(self) -> Any:
        return self._local.title_set()

    def index_version(self) -> str:
        return self._local.index_version()

    def describe(self) -> dict[str, Any]:
        return self._local.describe()

    def close(self) -> None:
        """Stop the child (joined, so its CPU is counted as a waited-for child's), then close
        the local retriever; a second call does nothing more."""
        with self._lock:
            self._stop(wait_s=CLOSE_WAIT_S)
        self._local.close()


def _serve(conn: Connection, parents_end: Connection, path: str) -> None:
    """The child: open the index, say so, answer searches until the pipe closes."""
    # A forked child holds a copy of the parent's end too: closed, so that the parent
    # closing its own is the end of the pipe the child reads.
    parents_end.close()
    # The run's process decides what a Ctrl-C stops (its rows so far are kept); the child
    # leaves when that process closes the pipe, or dies.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        retriever = EmbeddedRetriever(Path(path))
    except Exception as exc:
        with contextlib.suppress(OSError):
            conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    try:
        while True:
            try:
                _, queries, top_k, title_boost = conn.recv()
            except (EOFError, OSError):
                return
            try:
                reply: tuple[str, Any] = ("hits", retriever.search_many(
                    queries, top_k=top_k, title_boost=title_boost))
            except Exception as exc:
                reply = ("error", f"{type(exc).__name__}: {exc}")
            try:
                conn.send(reply)
            except (OSError, ValueError):
                return
    finally:
        retriever.close()
