"""The micro-batcher's grouping and flushing, with a recording dispatch (no I/O)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from qfarm.common.errors import TransientServiceError
from qfarm.common.models import Generation, Sampling
from qfarm.worker.llm.batcher import BatchItem, MicroBatcher, batch_key


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.groups: list[list[str]] = []
        self.lock = threading.Lock()
        self.fail = fail

    def __call__(self, items: list[BatchItem]) -> None:
        with self.lock:
            self.groups.append([i.job_id for i in items])
        if self.fail:
            raise RuntimeError("dispatch blew up")
        for i in items:
            i.future.set_result(Generation(text=f"answer for {i.prompt}"))


@pytest.fixture
def executor():
    with ThreadPoolExecutor(4) as ex:
        yield ex


def test_full_groups_flush_at_once(executor) -> None:
    rec = Recorder()
    b = MicroBatcher(rec, max_batch=3, max_wait_s=10.0, executor=executor)
    t0 = time.perf_counter()
    futures = [b.submit(f"p{i}", Sampling(seed=1), f"j{i}") for i in range(6)]
    assert [f.result(timeout=2).text for f in futures] == [f"answer for p{i}" for i in range(6)]
    assert time.perf_counter() - t0 < 2.0  # did not wait for max_wait_s
    assert sorted(map(len, rec.groups)) == [3, 3]
    b.close()
    assert b.mean_batch_size() == 3.0


def test_partial_group_flushes_after_the_wait(executor) -> None:
    rec = Recorder()
    b = MicroBatcher(rec, max_batch=8, max_wait_s=0.05, executor=executor)
    t0 = time.perf_counter()
    f = b.submit("p", Sampling(), "j")
    f.result(timeout=2)
    assert time.perf_counter() - t0 >= 0.045
    b.close()


def test_different_sampling_never_shares_a_request(executor) -> None:
    rec = Recorder()
    b = MicroBatcher(rec, max_batch=4, max_wait_s=0.05, executor=executor)
    futures = [b.submit("p", Sampling(seed=s % 2, temperature=0.7), f"j{s}") for s in range(4)]
    for f in futures:
        f.result(timeout=2)
    b.close()
    assert sorted(sorted(g) for g in rec.groups) == [["j0", "j2"], ["j1", "j3"]]


def test_greedy_batches_ignore_the_seed() -> None:
    assert batch_key(Sampling(temperature=0, seed=1)) == batch_key(Sampling(temperature=0, seed=2))
    assert batch_key(Sampling(temperature=0.5, seed=1)) != batch_key(
        Sampling(temperature=0.5, seed=2)
    )
    assert batch_key(Sampling(max_tokens=5)) != batch_key(Sampling(max_tokens=6))


def test_only_prompts_of_one_grammar_share_a_request() -> None:
    def greedy(grammar: str | None) -> str:
        return batch_key(Sampling(temperature=0, grammar=grammar))

    assert greedy('root ::= "a"') == greedy('root ::= "a"')
    assert greedy('root ::= "a"') != greedy('root ::= "b"') != greedy(None)


def test_a_failing_dispatch_releases_every_caller(executor) -> None:
    b = MicroBatcher(Recorder(fail=True), max_batch=2, max_wait_s=0.01, executor=executor)
    futures = [b.submit("p", Sampling(), f"j{i}") for i in range(3)]
    for f in futures:
        with pytest.raises(RuntimeError, match="blew up"):
            f.result(timeout=2)
    b.close()


def test_submit_after_close_fails_cleanly(executor) -> None:
    b = MicroBatcher(Recorder(), max_batch=2, max_wait_s=0.01, executor=executor)
    b.close()
    with pytest.raises(TransientServiceError, match="closed"):
        b.submit("p", Sampling(), "j").result(timeout=1)
