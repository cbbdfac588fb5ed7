"""Eager runs against a real simulator whose endpoint a test can kill and replace."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from qfarm.common.settings import Settings
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.producer.api import Endpoints, EndpointsFor


@pytest.fixture
def eager_endpoints(tmp_path, default_index) -> Iterator[
        tuple[Settings, EndpointsFor, list[str], SimulatorHandle]]:  # fmt: skip
    """(settings, endpoints, urls, the simulator) for eager runs: one attempt per request and
    no wait for an endpoint, so a dead one leaves error rows at once. ``endpoints`` yields
    ``urls`` as they are when a run starts: a test replaces the list's contents to send a
    later run elsewhere."""
    sim = start_simulator(ttft_ms=0, tpot_ms=0)
    settings = Settings(results_dir=tmp_path / "results", index_path=default_index,
                        llm_max_attempts=1, llm_wait_for_endpoint_s=0, llm_backoff_base_s=0,
                        llm_breaker_failures=1000)
    urls = [sim.url]

    @contextlib.contextmanager
    def endpoints(_: Settings) -> Iterator[Endpoints]:
        yield Endpoints(urls=list(urls), simulated=True)

    yield settings, endpoints, urls, sim
    sim.stop()
