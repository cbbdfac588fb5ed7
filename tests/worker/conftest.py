"""Retrieval fixtures shared by the worker tests.

* ``default_index_path``: the embedded index of the real default corpus (the
  suite-wide ``default_index`` fixture, built once per session); ``default_index_settings``
  points a ``Settings`` at it.
* ``eager_run``: a factory of what an in-process run needs (services on an in-memory
  Redis with the given gateway, the run's manifest, its jobs), closed after the test.
* ``search_url``: the session's real OpenSearch node (``search_node``, tests/conftest.py),
  emptied before each test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from qfarm.common.jobs import expand_jobs
from qfarm.common.models import Job, Mode, Question
from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.producer.runs.sweep import make_manifest
from qfarm.producer.store import ProducerStore
from qfarm.worker.services import Services
from qfarm.worker.store import WorkerStore

EagerRun = tuple[Services, ProducerStore, list[Job]]


@pytest.fixture(scope="session")
def default_index_path(default_index: Path) -> Path:
    """The suite-wide index (tests/conftest.py), under the name these tests use."""
    return default_index


@pytest.fixture
def default_index_settings(default_index_path: Path, tmp_path: Path) -> Settings:
    return Settings(retriever="embedded", index_path=default_index_path, data_dir=tmp_path)


@pytest.fixture
def eager_run(default_index: Path) -> Iterator[Callable[[Any, Sequence[str], int], EagerRun]]:
    """``make(gateway, questions, n)``: services answering through ``gateway``, run "r"
    registered (QUOTE, n samples a question) and its jobs."""
    from qfarm.worker.retrieval import open_retriever

    opened: list[Services] = []

    def make(gateway: Any, questions: Sequence[str], n: int) -> EagerRun:
        client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        settings = Settings(index_path=default_index)
        svc = Services(settings=settings, store=WorkerStore(client), worker_name="t",
                       retriever_factory=lambda: open_retriever(settings),
                       gateway_factory=lambda: gateway)  # fmt: skip
        opened.append(svc)
        store = ProducerStore(client)
        store.put_manifest(make_manifest(
            run_id="r", question_file="-", question_file_digest="-", n_questions=len(questions),
            modes=[Mode.QUOTE], n=n, policy=Policy(), model="m", endpoints=[], simulated=True,
            retriever="embedded", index_version=None, corpus=None, eager=True,
        ))  # fmt: skip
        asked = [Question(id=f"q{i}", text=t) for i, t in enumerate(questions)]
        return svc, store, list(expand_jobs("r", asked, [Mode.QUOTE], n, Policy(), model="m"))

    yield make
    for svc in opened:
        svc.close()


@pytest.fixture
def search_url(search_node: Any) -> Iterator[str]:
    """The session's OpenSearch node, emptied of every index and alias before the test."""
    wipe_search_node(search_node.url)
    yield search_node.url


def wipe_search_node(url: str) -> None:
    import httpx

    httpx.delete(f"{url}/_all", timeout=60).raise_for_status()
