"""The embedded index searched in a process beside an eager sweep: the same hits as this
process's own search, and a child that is slow to start, killed, stuck or unable to open
the index costs a search in this process, never a search or a row."""

from __future__ import annotations

import logging
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from qfarm.common.models import Mode
from qfarm.common.policy import Policy
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.producer import SweepSpec, run_sweep
from qfarm.producer.api import QuestionSet
from qfarm.worker.retrieval import beside
from qfarm.worker.retrieval.beside import SearchProcess, search_beside
from qfarm.worker.retrieval.embedded import EmbeddedRetriever
from qfarm.worker.runner import cpu_threads_for

REPO = Path(__file__).resolve().parents[2]
POLICY = Policy()
# Questions that no code here was written against: the independent tuning set's.
QUESTIONS = [q.text for q in QuestionSet.from_file(REPO / "bench/questions/independent_tune.jsonl").questions][:80]


def search(retriever: object, queries: list[str]) -> list[list]:
    return retriever.search_many(queries, top_k=POLICY.top_k, title_boost=POLICY.title_boost)  # type: ignore[attr-defined]


@pytest.fixture
def beside_index(default_index: Path) -> Iterator[SearchProcess]:
    process = SearchProcess(EmbeddedRetriever(default_index))
    try:
        yield process
    finally:
        process.close()


def test_the_child_finds_what_this_process_finds(beside_index: SearchProcess, default_index: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    assert beside_index.started(timeout_s=60)
    here = EmbeddedRetriever(default_index)
    expected = search(here, QUESTIONS)
    here.close()

    def not_here(*_a: object, **_k: object) -> None:
        raise AssertionError("searched in the run's own process")

    monkeypatch.setattr(beside_index._local, "search_many", not_here)
    found = search(beside_index, QUESTIONS[:40]) + search(beside_index, QUESTIONS[40:])
    assert found == expected
    assert any(found)


def test_a_process_with_threads_starts_a_fresh_interpreter_that_finds_the_same(
    default_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(beside.threading, "active_count", lambda: 3)  # a fork would be unsafe
    local = EmbeddedRetriever(default_index)
    expected = search(local, QUESTIONS[:20])
    process = SearchProcess(local)
    try:
        assert process.start_method == "spawn"
        assert process.started(timeout_s=120)
        monkeypatch.setattr(local, "search_many", None)  # answered there, or this fails
        assert search(process, QUESTIONS[:20]) == expected
    finally:
        process.close()
    assert process._process.exitcode == 0


def test_a_killed_child_leaves_the_searches_to_this_process(
    beside_index: SearchProcess, default_index: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert beside_index.started(timeout_s=60)
    expected = search(beside_index, QUESTIONS[:10])
    pid = beside_index.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    with caplog.at_level(logging.WARNING, logger="qfarm.worker"):
        assert search(beside_index, QUESTIONS[:10]) == expected
        assert search(beside_index, QUESTIONS[:10]) == expected  # and from then on
    warned = [r.getMessage() for r in caplog.records if "search process" in r.getMessage()]
    assert len(warned) == 1 and "searches in its own process" in warned[0]
    assert not beside_index.started(timeout_s=0)


def test_a_stuck_child_is_killed_and_its_search_made_here(
    beside_index: SearchProcess, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert beside_index.started(timeout_s=60)
    expected = search(beside_index, QUESTIONS[:5])
    monkeypatch.setattr(beside, "CALL_TIMEOUT_S", 0.5)
    pid = beside_index.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    with caplog.at_level(logging.WARNING, logger="qfarm.worker"):
        assert search(beside_index, QUESTIONS[:5]) == expected
    assert any("no answer in 0.5 s" in r.getMessage() for r in caplog.records)
    assert not beside_index._process.is_alive()


def test_a_child_that_cannot_open_the_index_leaves_it_to_this_process(
    default_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "index.sqlite"
    shutil.copy(default_index, path)
    local = EmbeddedRetriever(path)
    expected = search(local, QUESTIONS[:5])  # its connection is open: the file may go
    path.rename(tmp_path / "moved.sqlite")
    process = SearchProcess(local)
    try:
        with caplog.at_level(logging.WARNING, logger="qfarm.worker"):
            assert not process.started(timeout_s=60)
            assert search(process, QUESTIONS[:5]) == expected
        assert any("could not open the index there" in r.getMessage() for r in caplog.records)
    finally:
        process.close()


def test_a_search_before_the_child_is_ready_is_made_here(default_index: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # A child that never says it is ready: every search is this process's own.
    monkeypatch.setattr(beside, "_serve", _never_ready)
    monkeypatch.setattr(beside.threading, "active_count", lambda: 1)  # forked: the patch holds
    local = EmbeddedRetriever(default_index)
    process = SearchProcess(local)
    try:
        assert process.start_method == "fork"
        assert search(process, QUESTIONS[:3]) == search(local, QUESTIONS[:3])
        assert not process.started(timeout_s=0.2)
    finally:
        process.close()
    assert not process._process.is_alive()


def _never_ready(conn: object, parents_end: object, path: str) -> None:
    import time

    time.sleep(60)


def test_close_stops_and_reaps_the_child_once(default_index: Path) -> None:
    process = SearchProcess(EmbeddedRetriever(default_index))
    assert process.started(timeout_s=60)
    process.close()
    assert not process._process.is_alive() and process._process.exitcode == 0
    process.close()  # a second close (the run's services, then the run) does nothing more


def test_only_an_embedded_sweep_of_enough_questions_on_two_cores_searches_beside(
    default_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = EmbeddedRetriever(default_index)
    enough, two = beside.MIN_QUESTIONS, beside.MIN_ENDPOINTS
    stand_in = object()
    monkeypatch.setattr(beside, "cores", lambda: 2)
    assert search_beside(local, questions=enough - 1, endpoints=two) is local
    assert search_beside(local, questions=enough, endpoints=two - 1) is local
    assert search_beside(local, questions=enough, endpoints=two, enabled=False) is local
    assert search_beside(stand_in, questions=enough, endpoints=two) is stand_in
    monkeypatch.setattr(beside, "cores", lambda: 1)
    assert search_beside(local, questions=enough, endpoints=two) is local
    monkeypatch.setattr(beside, "cores", lambda: 2)
    found = search_beside(local, questions=enough, endpoints=two)
    try:
        assert isinstance(found, SearchProcess)
        # The pool thread waits for the child outside the interpreter: two threads.
        assert cpu_threads_for(local) == 1 and cpu_threads_for(found) == 2
        assert found.describe() == local.describe()
        assert found.index_version() == local.index_version()
    finally:
        found.close()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(max_num_seqs=16, ttft_ms=20, tpot_ms=0) as handle:
        yield handle


def _sweep(sim: SimulatorHandle, index: Path, tmp_path: Path, **settings: object) -> list[dict]:
    from qfarm.common.settings import Settings

    spec = SweepSpec(questions=QuestionSet.from_texts(QUESTIONS, source="independent_tune"),
                     modes=[Mode.QUOTE, Mode.CLAIM_LATTICE], n=1, use_cache=False)  # fmt: skip
    opts: dict = {"llm_endpoints": sim.url, "index_path": index,
                  "results_dir": tmp_path / "results", **settings}  # fmt: skip
    result = run_sweep(spec, eager=True, settings=Settings(**opts))
    assert result.status == "complete"
    per_run = {"run_id", "started_at", "finished_at", "timings", "llm_request", "retrieval_ms"}
    rows = [r.model_dump(mode="json") for r in result.rows()]
    assert len(rows) == result.manifest.n_jobs
    return sorted(({k: v for k, v in r.items() if k not in per_run} for r in rows),
                  key=lambda r: (r["question_id"], r["mode"]))  # fmt: skip


@pytest.mark.slow
def test_an_eager_sweep_whose_search_process_is_killed_writes_the_same_rows(
    sim: SimulatorHandle, default_index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(beside, "cores", lambda: 2)
    monkeypatch.setattr(beside, "MIN_ENDPOINTS", 1)  # one simulator serves this sweep
    alone = _sweep(sim, default_index, tmp_path / "a", eager_search_process=False)
    started: list[SearchProcess] = []
    real = SearchProcess.search_many
    killed: list[int] = []

    def search_then_kill(self: SearchProcess, queries: list[str], **kw: object) -> list:
        if not started:
            started.append(self)
            assert self.started(timeout_s=60)
        found = real(self, queries, **kw)  # type: ignore[arg-type]
        if not killed and self.pid:  # its first bundle answered there, then it dies
            killed.append(self.pid)
            os.kill(self.pid, signal.SIGKILL)
        return found

    monkeypatch.setattr(SearchProcess, "search_many", search_then_kill)
    beside_rows = _sweep(sim, default_index, tmp_path / "b")
    assert started and killed
    assert beside_rows == alone
    assert any(r["error"] is None for r in alone)
