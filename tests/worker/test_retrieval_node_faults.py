"""The cluster backend against a real OpenSearch node that misbehaves: a search queue that
rejects, a node that stops answering, an index the farm did not build, none at all.

Each test starts a node of its own (a free port, a temporary directory): the session's
node is never paused or reconfigured.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from qfarm.common.backoff import RetryPolicy
from qfarm.common.errors import RetrievalError
from qfarm.common.settings import Settings
from qfarm.worker.retrieval import open_retriever
from qfarm.worker.retrieval.cluster import ClusterRetriever
from qfarm.worker.retrieval.default_corpus import default_corpus_path
from qfarm.worker.retrieval.ingest import CorpusSource, build_cluster_index

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TITLES = ["The Beatles", "John Lennon", "Liverpool", "Speed of light", "Light", "Mount Everest",
          "DNA", "Hamlet", "Mona Lisa", "Albert Einstein", "Photosynthesis", "French Revolution"]
QUESTIONS = ["Who were the Beatles?", "What is DNA?", "How high is Mount Everest?",
             "Who painted the Mona Lisa?", "What did Albert Einstein discover?",
             "What is photosynthesis?", "Who wrote Hamlet?", "How fast is light?"]


def _sample(tmp_path: Path) -> CorpusSource:
    corpus = json.loads(default_corpus_path().read_text(encoding="utf-8"))
    path = tmp_path / "sample.jsonl"
    path.write_text("".join(
        json.dumps({"id": t, "title": corpus[t]["title"], "text": corpus[t]["extract"]}) + "\n"
        for t in TITLES
    ), encoding="utf-8")  # fmt: skip
    return CorpusSource.resolve(path)


@pytest.fixture
def own_node(search_node_build: Any) -> Iterator[Any]:
    """``own_node(**settings)``: a node of this test's own (``-E`` settings)."""
    from qfarm.ops.search.launch import start_search_node

    nodes: list[Any] = []

    def start(**settings: Any) -> Any:
        nodes.append(start_search_node(settings=settings, build=search_node_build))
        return nodes[-1]

    yield start
    for node in nodes:
        if node.is_running():
            os.kill(node.pid, signal.SIGCONT)  # a test may leave it paused
        node.stop()


def _retriever(url: str, tmp_path: Path, **update: Any) -> ClusterRetriever:
    settings = Settings(retriever="opensearch", es_url=url, es_max_retries=0, data_dir=tmp_path)
    r = open_retriever(settings.model_copy(update=update))
    assert isinstance(r, ClusterRetriever)
    return r


def test_a_full_search_queue_is_retried_with_back_off_never_an_empty_answer(own_node, tmp_path):
    """One search thread and a queue of two: concurrent ``_msearch`` requests are rejected
    per search (429 inside a 200) and whole (429). Every answer equals the serial one."""
    node = own_node(**{"thread_pool.search.size": 1, "thread_pool.search.queue_size": 2})
    builder = _retriever(node.url, tmp_path, es_timeout_s=60.0)
    build_cluster_index(builder, _sample(tmp_path), progress=False)
    expected = builder.search_many(QUESTIONS, top_k=3, title_boost=2.0)
    assert all(expected), "every question has evidence when nothing is rejected"
    builder.close()

    readers = [_retriever(node.url, tmp_path) for _ in range(6)]
    for r in readers:
        # More patient than the default: on a loaded test host the one search thread can
        # stay busy past ten waits, and what is tested is that waiting gives the serial
        # answer, not how long the default waits.
        r.rejection_retry = RetryPolicy(max_attempts=40, base_s=0.1, max_s=4.0)
    try:
        with ThreadPoolExecutor(len(readers)) as pool:
            answers = list(pool.map(
                lambda r: [r.search_many(QUESTIONS, top_k=3, title_boost=2.0) for _ in range(4)],
                readers,
            ))  # fmt: skip
        assert all(a == expected for rounds in answers for a in rounds)
        rejected = sum(r.rejections for r in readers)
        assert rejected > 0, "the node rejected nothing: the queue was not small enough to test"
    finally:
        for r in readers:
            r.close()

    # Without the back-off the same load fails loudly, as an error, not as missing evidence.
    impatient = [_retriever(node.url, tmp_path) for _ in range(12)]
    for r in impatient:
        r.rejection_retry = RetryPolicy(max_attempts=1)

    def hammer(r: ClusterRetriever) -> str:
        try:
            for _ in range(4):
                assert r.search_many(QUESTIONS, top_k=3, title_boost=2.0) == expected
        except RetrievalError as exc:
            return str(exc)
        return ""

    try:
        with ThreadPoolExecutor(len(impatient)) as pool:
            failures = [f for f in pool.map(hammer, impatient) if f]
    finally:
        for r in impatient:
            r.close()
    assert failures and all("rejected" in f and "HTTP 429" in f for f in failures)


def test_a_node_that_stops_answering_is_a_timeout_error_and_recovers(own_node, tmp_path):
    node = own_node()
    builder = _retriever(node.url, tmp_path, es_timeout_s=60.0)  # a loaded host builds slowly
    build_cluster_index(builder, _sample(tmp_path), progress=False)
    builder.close()
    r = _retriever(node.url, tmp_path, es_timeout_s=1.0)
    try:
        assert r.search("Mount Everest", top_k=1, title_boost=2.0)[0].title == "Mount Everest"
        os.kill(node.pid, signal.SIGSTOP)  # the JVM hangs: the socket accepts, nothing answers
        try:
            started = time.monotonic()
            with pytest.raises(RetrievalError, match=r"did not answer search within 1 s"):
                r.search("Mount Everest", top_k=1, title_boost=2.0)
            assert time.monotonic() - started < 10
        finally:
            os.kill(node.pid, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while True:  # the node catches up with what queued while it was stopped
            try:
                assert r.search("DNA", top_k=1, title_boost=2.0)[0].title == "DNA"
                break
            except RetrievalError:
                assert time.monotonic() < deadline
                time.sleep(0.5)
    finally:
        r.close()


def _sweep(url: str, tmp_path: Path, redis_db: str, llm: str) -> subprocess.CompletedProcess[str]:
    questions = tmp_path / "q.txt"
    questions.write_text("\n".join(QUESTIONS[:3]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env.update(QFARM_RETRIEVER="opensearch", QFARM_ES_URL=url, QFARM_ES_MAX_RETRIES="0",
               QFARM_REDIS_URL=redis_db, QFARM_RESULTS_DIR=str(tmp_path / "results"),
               QFARM_DATA_DIR=str(tmp_path / "data"), QFARM_LLM_ENDPOINTS=llm)
    return subprocess.run([sys.executable, "-m", "qfarm", "sweep", str(questions), "--modes", "quote",
                           "-n", "2", "--detach"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip


def _foreign_index(url: str) -> None:
    """An index someone made by hand under the farm's name: the standard analyzer, no _meta."""
    httpx.put(f"{url}/qfarm-passages", json={"mappings": {"properties": {
        "title": {"type": "text"}, "text": {"type": "text"}}}}, timeout=30).raise_for_status()


def test_a_missing_or_foreign_index_is_refused_before_anything_is_enqueued(
    search_url: str, tmp_path: Path
) -> None:
    from qfarm.ops.sim.launch import start_simulator

    db = int(os.environ.get("QFARM_TEST_REDIS_DB", "0"))
    url = f"redis://127.0.0.1:6379/{db}"
    client = redis.Redis.from_url(url)
    client.flushdb()

    simulator = start_simulator(ttft_ms=0, tpot_ms=0)
    try:
        missing = _sweep(search_url, tmp_path, url, simulator.url)
        _foreign_index(search_url)
        foreign = _sweep(search_url, tmp_path, url, simulator.url)
    finally:
        simulator.stop()
    assert missing.returncode != 0
    assert "no index or alias 'qfarm-passages'" in missing.stderr
    assert "qfarm index --backend opensearch" in missing.stderr
    assert "Traceback" not in missing.stderr

    assert foreign.returncode != 0, foreign.stdout
    assert "is not a passages index qfarm built" in foreign.stderr
    assert "field 'title' is analyzed by 'standard', not 'english'" in foreign.stderr
    assert "no field 'doc_id'" in foreign.stderr and "no _meta" in foreign.stderr
    assert "Traceback" not in foreign.stderr
    # Nothing was planned: no queue holds a message, no run was registered.
    assert [k for k in client.scan_iter() if not k.startswith(b"_kombu")] == []
    for queue in (b"retrieve", b"generate", b"verify"):
        assert client.llen(queue) == 0
