"""A run judged against the failure policy: the exit code a CI job gates on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.perf.viewer import write_synthetic_run
from qfarm.common.errors import InputError
from qfarm.common.vocab import ExitCode, RunStatus
from qfarm.producer.api import RunResult, check_error_rate, judge_run, judge_run_dir
from qfarm.producer.rundir import read_manifest


def _result(run_dir: Path, status: str, rows: int) -> RunResult:
    return RunResult(read_manifest(run_dir), run_dir, status, rows_written=rows)


def test_a_complete_run_with_an_errored_row_is_row_errors_unless_tolerated(tmp_path: Path):
    run_dir = write_synthetic_run(tmp_path, "run-e", 2)  # 12 rows, row 5 errored
    result = _result(run_dir, RunStatus.COMPLETE, 12)
    judged = judge_run(result)
    assert judged.exit_code == ExitCode.ROW_ERRORS == 3
    assert (judged.rows, judged.errored_rows) == (12, 1)
    assert judged.reason.startswith("run run-e completed with errors: 1 of 12 rows errored (8.3%")
    assert judge_run(result, 1 / 12).exit_code == ExitCode.OK  # exactly at the limit: tolerated
    assert judge_run(result, 0.05).exit_code == ExitCode.ROW_ERRORS
    assert judge_run_dir(run_dir).exit_code == ExitCode.ROW_ERRORS
    assert judge_run_dir(run_dir, 0.1).exit_code == ExitCode.OK
    record = judge_run(result).as_json()
    assert json.loads(json.dumps(record)) == record
    assert (record["exit_code"], record["outcome"], record["errored_rows"]) == (3, "row_errors", 1)


@pytest.mark.parametrize(("status", "code"), [
    (RunStatus.INCOMPLETE, ExitCode.FAILED),
    (RunStatus.CANCELLED, ExitCode.FAILED),
    (RunStatus.FAILED, ExitCode.FAILED),
    (RunStatus.DETACHED, ExitCode.FAILED),
    (RunStatus.INTERRUPTED, ExitCode.INTERRUPTED),
    (RunStatus.ENQUEUE_INTERRUPTED, ExitCode.INTERRUPTED),
])
def test_a_run_that_did_not_complete_is_never_ok(tmp_path: Path, status: str, code: ExitCode):
    run_dir = write_synthetic_run(tmp_path, "run-i", 2)
    judged = judge_run(_result(run_dir, status, 7), 1.0)  # any error rate tolerated: still not ok
    assert judged.exit_code == code
    assert f"run run-i is {status}" in judged.reason


def test_a_detached_sweep_is_ok_while_its_run_goes_on(tmp_path: Path):
    run_dir = write_synthetic_run(tmp_path, "run-d", 2)
    result = _result(run_dir, RunStatus.RUNNING, 0)
    assert judge_run(result, detached=True).exit_code == ExitCode.OK
    assert judge_run(result).exit_code == ExitCode.FAILED  # following, it stopped short


def test_a_run_read_from_its_directory_is_not_ok_until_whole(tmp_path: Path):
    run_dir = write_synthetic_run(tmp_path, "run-r", 2, status="running")
    rows = run_dir / "rows.jsonl"
    rows.write_text("".join(rows.read_text().splitlines(keepends=True)[6:]))  # no errored row left
    judged = judge_run_dir(run_dir, 1.0)
    assert (judged.exit_code, judged.status) == (ExitCode.FAILED, RunStatus.RUNNING)
    assert judged.reason == "run run-r is running: 6 of 12 jobs have a row"


@pytest.mark.parametrize("rate", [-0.1, 1.5, float("nan"), float("inf")])
def test_max_error_rate_is_a_fraction(rate: float):
    with pytest.raises(InputError, match="--max-error-rate"):
        check_error_rate(rate)


def test_report_reads_a_detached_cancelled_run_from_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After ``--detach`` and ``qfarm cancel`` the directory still says running with no row;
    ``qfarm report`` says what Redis holds: cancelled, with the rows that landed there."""
    import redis

    from qfarm.cli import main
    from qfarm.common import keys
    from qfarm.common.runstatus import StatusRecord
    from qfarm.producer.rundir import create_run_dir, write_status
    from qfarm.producer.runs.control import cancel_run
    from qfarm.producer.store import ProducerStore
    from tests.producer.conftest import redis_url
    from tests.producer.runs.test_control import manifest

    run_id = "20260103-000000-detach"
    client = redis.Redis.from_url(redis_url())

    def clean() -> None:
        for key in client.scan_iter(match=f"qfarm:run:{run_id}:*"):
            client.delete(key)
        client.zrem(keys.RUNS_KEY, run_id)

    clean()
    try:
        store, m = ProducerStore(client), manifest(run_id)  # 20 jobs, distributed
        store.put_manifest(m)
        run_dir = create_run_dir(tmp_path, m)
        write_status(run_dir, StatusRecord(status="running", started_at=1.0))
        for i in range(4):
            client.hset(keys.rows_key(run_id), f"j{i}", "{}")
        cancel_run(store, run_id, tmp_path)
        monkeypatch.setenv("QFARM_REDIS_URL", redis_url())
        assert main(["report", run_id, "--results-dir", str(tmp_path)]) == 1
        err = capsys.readouterr().err
        assert f"run {run_id} is cancelled: 4 of 20 jobs have a row" in err
        summary = (run_dir / "summary.md").read_text()
        assert "| status | cancelled |" in summary
        assert "Redis holds rows for 4 of 20 jobs of this run" in summary
        assert main(["report", run_id, "--results-dir", str(tmp_path), "--json"]) == 1
        record = json.loads(capsys.readouterr().out)
        assert (record["status"], record["rows"]) == ("cancelled", 4)
    finally:
        clean()
