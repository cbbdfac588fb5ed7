"""The search node killed in the middle of a distributed sweep: the jobs it could not serve
become error rows of the retrieval kind, the run completes with errors, and once the
node is back (its Lucene index recovered from disk) ``--retry-errors`` completes the run
with one row per job."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from qfarm.common.vocab import ExitCode

pytestmark = pytest.mark.slow


def test_the_search_node_killed_mid_sweep_then_retry_errors_completes_the_run(
    redis_server, farm_on, tmp_path: Path, kit, search_node_build
) -> None:
    from qfarm.common.settings import Settings
    from qfarm.ops.search.launch import start_search_node
    from qfarm.ops.sim.launch import start_simulator
    from qfarm.worker.retrieval import open_retriever
    from qfarm.worker.retrieval.ingest import CorpusSource, build_cluster_index

    build = search_node_build
    data = tmp_path / "search-data"
    node = start_search_node(data_dir=data, build=build)
    restarted = None
    # Answers take 30 ms + 2 ms a token: at zero latency the run ended before the kill.
    simulator = start_simulator(ttft_ms=30, tpot_ms=2, max_num_seqs=256)
    try:
        indexer = open_retriever(Settings(retriever="opensearch", es_url=node.url, es_timeout_s=60))
        build_cluster_index(indexer, CorpusSource.resolve("default"), progress=False)
        indexer.close()
        farm = farm_on(redis_server, endpoints=simulator.url, QFARM_RETRIEVER="opensearch",
                       QFARM_ES_URL=node.url, QFARM_ES_TIMEOUT_S="3")  # fmt: skip
        n = 4
        planned = kit.planned_ids(n)
        farm.start_worker("w1", concurrency=4)
        sweep, run_id, rows_key = kit.followed_sweep(farm, tmp_path, n)
        assert farm.wait_for(lambda: farm.redis.hlen(rows_key) >= 12, timeout_s=120)
        node.proc.kill()  # kill -9: no shutdown hook, no flush
        node.proc.wait(timeout=30)
        t_fault = time.time()
        assert farm.redis.hlen(rows_key) < len(planned), "the run ended before the kill"
        _, err = sweep.communicate(timeout=300)
        assert sweep.returncode == ExitCode.ROW_ERRORS, err  # completed, with error rows
        rows = farm.rows(run_id)
        assert set(rows) == planned
        errors = {j for j, r in rows.items() if r["error"]}
        assert errors, "no job met the dead node"
        assert all(rows[j]["error"].startswith("retrieval: opensearch at ") for j in errors)
        assert all(rows[j]["verdict"] is None for j in errors), "an error row carries no verdict"
        kit.fault_cost(farm, run_id, "search node kill -9", t_fault, planned=len(planned), stderr=err)

        # The same node comes back on its port and its data: Lucene recovers the index.
        restarted = start_search_node(node.port, data_dir=data, build=build)
        res = farm.qfarm("sweep", "--retry-errors", run_id, "--quiet", timeout_s=300)
        assert res.returncode == 0, res.stderr
        # One row per job in rows.jsonl and in Redis (the run's log also holds the retried
        # jobs' first rows: it is append-only).
        ids = kit.file_ids(farm, run_id)
        assert len(ids) == len(set(ids)) == len(planned) and set(ids) == planned
        status = json.loads((Path(farm.env["QFARM_RESULTS_DIR"]) / run_id / "status.json").read_text())
        assert status["status"] == "complete" and status["rows"] == len(planned), status
        after = farm.rows(run_id)
        assert not any(r["error"] for r in after.values())
        assert {j for j, r in after.items() if r.get("retried_errors")} == errors
    finally:
        simulator.stop()
        node.stop()
        if restarted is not None:
            restarted.stop()
