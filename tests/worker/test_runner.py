"""The in-process runner (eager sweeps): the Celery tasks' rows, many jobs in flight or one
at a time (``--serial``)."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from qfarm.common.models import ALL_MODES
from qfarm.common.settings import Settings
from qfarm.common.vocab import Backend
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.producer import SweepSpec, run_sweep
from qfarm.producer.api import QuestionSet
from qfarm.worker.llm.client import LLMClient
from qfarm.worker.runner import GC_THRESHOLD0, SWITCH_INTERVAL_S, cpu_threads_for, throughput_mode

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
# What differs between two runs of the same jobs: identity of the run, and timings.
PER_RUN = {"run_id", "started_at", "finished_at", "timings", "llm_request"}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(max_num_seqs=16, ttft_ms=40, tpot_ms=0) as handle:
        yield handle


def settings_for(sim: SimulatorHandle, index: Path, tmp_path: Path, **overrides: object) -> Settings:
    opts: dict[str, object] = {
        "llm_endpoints": sim.url,
        "index_path": index,
        "results_dir": tmp_path / "results",
        "llm_max_inflight_per_endpoint": 8,
        **overrides,
    }
    return Settings(**opts)  # type: ignore[arg-type]


def comparable(rows: list) -> dict[tuple, dict]:
    out = {}
    for row in rows:
        data = row if isinstance(row, dict) else row.model_dump(mode="json")
        out[(data["question_id"], data["mode"], data["sample_index"])] = {
            k: v for k, v in data.items() if k not in PER_RUN
        }
    return out


def spec() -> SweepSpec:
    questions = QuestionSet.from_file(REPO / "bench/questions/smoke.txt")
    return SweepSpec(questions=questions, modes=ALL_MODES, n=2)


def test_concurrent_and_serial_eager_runs_write_the_same_rows(sim, default_index, tmp_path) -> None:
    settings = settings_for(sim, default_index, tmp_path)
    serial = run_sweep(spec(), eager=True, serial=True, settings=settings)
    concurrent = run_sweep(spec(), eager=True, settings=settings)
    assert serial.status == concurrent.status == "complete"
    a, b = comparable(serial.rows()), comparable(concurrent.rows())
    assert len(a) == serial.manifest.n_jobs == len(concurrent.rows())
    assert a == b
    assert any(r["error"] is None and r["verdict"] for r in b.values())
    assert (concurrent.run_dir / "summary.md").exists()


def celery_task_rows(result, settings: Settings) -> list[dict]:
    """The rows of ``result``'s jobs run again through the Celery tasks, in Celery's eager mode
    (each message's tasks inline, the links calling the next), on a fresh in-memory Redis."""
    import json

    from qfarm.producer.runs.services import eager_services, open_local_retriever
    from qfarm.producer.runs.sweep import SweepPlan, enqueue_jobs, run_questions
    from qfarm.worker.celery import configure_app

    plan = SweepPlan(manifest=result.manifest, questions=run_questions(result.manifest))
    svc, store = eager_services(settings, open_local_retriever(settings, progress=False))
    try:
        store.put_manifest(result.manifest)
        enqueue_jobs(configure_app(settings, eager=True), plan.jobs())
        return [json.loads(raw) for raw in store.read_rows(result.manifest.run_id, 0)]
    finally:
        svc.close()


def test_a_serial_run_writes_the_rows_the_celery_tasks_write(
    sim, default_index, tmp_path
) -> None:
    settings = settings_for(sim, default_index, tmp_path)
    serial = run_sweep(spec(), eager=True, serial=True, settings=settings)
    assert serial.status == "complete"
    a, b = comparable(serial.rows()), comparable(celery_task_rows(serial, settings))
    assert len(a) == serial.manifest.n_jobs == len(b)
    assert a == b


def count_in_flight(monkeypatch) -> Callable[[], int]:  # type: ignore[no-untyped-def]
    """Count the LLM client's requests in flight; returns the peak so far."""
    now = peak = 0
    complete = LLMClient.acomplete

    async def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal now, peak  # on the gateway's one loop: no lock needed
        now += 1
        peak = max(peak, now)
        try:
            return await complete(self, *args, **kwargs)
        finally:
            now -= 1

    monkeypatch.setattr(LLMClient, "acomplete", counting)
    return lambda: peak


def test_a_serial_run_takes_each_job_to_its_row_before_the_next_starts(
    sim, default_index, tmp_path, monkeypatch
) -> None:
    from qfarm.worker import flow, pipeline

    retrieved: list[str] = []
    written: set[str] = set()
    retrieval_stage, write_rows = pipeline.retrieval_stage, flow.write_rows

    def retrieving(records, retriever):  # type: ignore[no-untyped-def]
        assert len(records) == 1 and set(retrieved) <= written  # the one before has its row
        retrieved.extend(r.job.job_id for r in records)
        return retrieval_stage(records, retriever)

    def writing(rows, svc, *rest):  # type: ignore[no-untyped-def]
        written.update(r.job_id for r in rows)
        return write_rows(rows, svc, *rest)

    monkeypatch.setattr(pipeline, "retrieval_stage", retrieving)
    monkeypatch.setattr(flow, "write_rows", writing)
    peak = count_in_flight(monkeypatch)
    result = run_sweep(spec(), eager=True, serial=True,
                       settings=settings_for(sim, default_index, tmp_path))  # fmt: skip
    assert result.status == "complete" and len(written) == result.manifest.n_jobs
    assert [r.error for r in result.rows() if r.error] == []
    assert len(retrieved) > 1 and peak() == 1


def test_an_eager_run_keeps_many_requests_in_flight_within_the_cap(
    sim, default_index, tmp_path, monkeypatch
) -> None:
    peak = count_in_flight(monkeypatch)
    seen: list[int] = []
    tuning: set[tuple[float, int]] = set()

    def progress(p) -> None:
        seen.append(p.done)
        tuning.add((sys.getswitchinterval(), gc.get_threshold()[0]))

    before = (sys.getswitchinterval(), gc.get_threshold())
    result = run_sweep(spec(), eager=True, settings=settings_for(sim, default_index, tmp_path),
                       on_progress=progress)  # fmt: skip
    assert result.status == "complete"
    assert 1 < peak() <= 8  # llm_max_inflight_per_endpoint x 1 endpoint
    assert seen and seen[-1] == result.manifest.n_jobs and seen == sorted(seen)
    # The runner's threads switched coarsely and the collector ran rarely while it ran,
    # and the process's own settings are back after it.
    assert (SWITCH_INTERVAL_S, GC_THRESHOLD0) in tuning
    assert (sys.getswitchinterval(), gc.get_threshold()) == before


def test_an_eager_run_takes_every_slot_the_interactive_reserve_would_keep(
    sim, default_index, tmp_path, monkeypatch
) -> None:
    # No single question can reach an eager run's own gateway: a slot kept for one idles.
    peak = count_in_flight(monkeypatch)
    settings = settings_for(sim, default_index, tmp_path, llm_max_inflight_per_endpoint=2,
                            llm_interactive_reserve=1)  # fmt: skip
    result = run_sweep(spec(), eager=True, settings=settings)
    assert result.status == "complete"
    assert peak() == 2


def test_throughput_mode_restores_the_interpreter_once_the_last_runner_leaves() -> None:
    before = (sys.getswitchinterval(), gc.get_threshold())
    outer = throughput_mode(0.03, 5000)
    outer.__enter__()
    assert sys.getswitchinterval() == pytest.approx(0.03) and gc.get_threshold()[0] == 5000
    assert gc.get_threshold()[1:] == before[1][1:]
    with throughput_mode(0.01, 800):  # a second runner in the process: never lowered
        assert sys.getswitchinterval() == pytest.approx(0.03) and gc.get_threshold()[0] == 5000
    assert sys.getswitchinterval() == pytest.approx(0.03)  # the first still runs
    outer.__exit__(None, None, None)
    assert (sys.getswitchinterval(), gc.get_threshold()) == before
    with pytest.raises(KeyboardInterrupt), throughput_mode(0.04, 9000):
        raise KeyboardInterrupt
    assert (sys.getswitchinterval(), gc.get_threshold()) == before


def test_throughput_mode_leaves_an_automatic_collector_that_is_off_off() -> None:
    saved = gc.get_threshold()
    gc.set_threshold(0)
    try:
        with throughput_mode():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*saved)


def test_llm_failures_are_error_rows_and_the_run_completes(default_index, tmp_path) -> None:
    with start_simulator(latency="zero", fault_rates={"malformed": 1.0}) as failing:
        settings = settings_for(failing, default_index, tmp_path, llm_max_attempts=1,
                                llm_breaker_failures=100_000,
                                llm_health_interval_s=0.0)  # fmt: skip
        result = run_sweep(spec(), eager=True, settings=settings)
    rows = result.rows()
    assert result.status == "complete" and len(rows) == result.manifest.n_jobs
    generated = [r for r in rows if r.error]
    assert generated and all(r.error.startswith("llm: ") for r in generated)


def test_one_cpu_thread_over_the_embedded_index_two_where_a_search_waits_on_a_node() -> None:
    def retriever(backend: Backend, **more: object) -> SimpleNamespace:
        return SimpleNamespace(backend=backend, **more)

    assert cpu_threads_for(retriever(Backend.EMBEDDED)) == 1
    assert cpu_threads_for(retriever(Backend.OPENSEARCH)) == 2
    assert cpu_threads_for(retriever(Backend.ELASTICSEARCH)) == 2
    # The embedded index searched in a process beside the run's (worker/retrieval/beside.py).
    assert cpu_threads_for(retriever(Backend.EMBEDDED, searches_elsewhere=True)) == 2
    assert cpu_threads_for(object()) == 2  # a stand-in retriever that names no backend
