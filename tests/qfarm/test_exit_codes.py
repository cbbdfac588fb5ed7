"""Exit codes a CI job gates on (README, 'Exit codes'): `qfarm sweep` fails a run whose rows
errored (3) unless --max-error-rate tolerates them, `qfarm report` exits as the run's sweep
would, `qfarm compare --fail-on-worse` fails on a worse signal (4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.perf.viewer import write_synthetic_run

pytestmark = pytest.mark.slow  # each case starts the qfarm command

REPO = Path(__file__).resolve().parents[2]
QFARM = str(Path(sys.executable).parent / "qfarm")


def qfarm(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([QFARM, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def broken_sim():
    """A simulator whose every completion is a 200 with a body that is not JSON."""
    from qfarm.ops.sim.launch import start_simulator

    with start_simulator(ttft_ms=0, tpot_ms=0, fault_rates={"malformed": 1.0}) as sim:
        yield sim.url


def test_a_sweep_whose_rows_errored_exits_3_unless_tolerated(env, tmp_path, broken_sim):
    (tmp_path / "q.txt").write_text("What is jazz?\nWho wrote Hamlet?\n")
    env = dict(env, QFARM_LLM_ENDPOINTS=broken_sim, QFARM_LLM_MAX_ATTEMPTS="1",
               QFARM_LLM_WAIT_FOR_ENDPOINT_S="0")
    res = qfarm(env, "sweep", str(tmp_path / "q.txt"), "--modes", "quote", "--eager", "--quiet",
                "--json")
    assert res.returncode == 3, res.stderr
    record = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(res.stdout.strip().splitlines()) == 1  # with --json, stdout is the record alone
    assert (record["status"], record["exit_code"], record["outcome"]) == ("complete", 3, "row_errors")
    assert record["rows"] == record["n_jobs"] == record["errored_rows"] == 2
    run_id = record["run_id"]
    assert f"run {run_id} completed with errors: 2 of 2 rows errored (100.0%" in res.stderr
    assert "rows:    " in res.stderr and "summary: " in res.stderr

    report = qfarm(env, "report", run_id)  # a CI job re-checking the run gets the same code
    assert report.returncode == 3, report.stderr
    assert qfarm(env, "report", run_id, "--max-error-rate", "1").returncode == 0

    out = tmp_path / "outcome.json"
    tolerated = qfarm(env, "sweep", str(tmp_path / "q.txt"), "--modes", "quote", "--eager",
                      "--quiet", "--max-error-rate", "1", "--json-file", str(out))
    assert tolerated.returncode == 0, tolerated.stderr
    assert tolerated.stdout.startswith("rows:    ")  # without --json, stdout is as before
    assert json.loads(out.read_text())["errored_rows"] == 2

    bad = qfarm(env, "sweep", str(tmp_path / "q.txt"), "--eager", "--max-error-rate", "5")
    assert bad.returncode == 2 and "--max-error-rate 5.0: a fraction" in bad.stderr


def test_report_of_a_run_not_whole_exits_non_zero(env, tmp_path):
    results = Path(env["QFARM_RESULTS_DIR"])
    run_dir = write_synthetic_run(results, "run-i", 2, status="incomplete")  # 12 jobs
    rows = run_dir / "rows.jsonl"
    rows.write_text("".join(rows.read_text().splitlines(keepends=True)[:8]))
    res = qfarm(env, "report", "run-i")
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip() == "run run-i is incomplete: 8 of 12 jobs have a row"
    assert f"summary: {run_dir / 'summary.md'}" in res.stdout  # the report is still written
    as_json = qfarm(env, "report", "run-i", "--json")
    assert json.loads(as_json.stdout)["status"] == "incomplete" and as_json.returncode == 1


def _verdicts(run_dir: Path, verdict: str) -> None:
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    for row in rows:
        if row["verdict"] is not None:
            row["verdict"] = verdict
    (run_dir / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_compare_fails_on_worse_only_when_asked(env, tmp_path):
    results = Path(env["QFARM_RESULTS_DIR"])
    _verdicts(write_synthetic_run(results, "good", 10), "STRICT")
    _verdicts(write_synthetic_run(results, "bad", 10), "UNGROUNDED")
    assert qfarm(env, "compare", "good", "bad").returncode == 0
    worse = qfarm(env, "compare", "good", "bad", "--fail-on-worse")
    assert worse.returncode == 4, worse.stderr
    assert "worse: B (bad) is worse than A (good) beyond noise on `quote` strict-rate" in worse.stderr
    better = qfarm(env, "compare", "bad", "good", "--fail-on-worse")
    assert better.returncode == 0, better.stderr
    as_json = qfarm(env, "compare", "good", "bad", "--fail-on-worse", "--json")
    assert as_json.returncode == 4
    record = json.loads(as_json.stdout)
    assert record["exit_code"] == 4 and record["run_a"] == "good" and record["run_b"] == "bad"
    assert {(d["mode"], d["metric"]) for d in record["regressions"]} >= {("quote", "strict")}
    assert all(d["verdict"] == "signal" and d["effect"] == "worse" for d in record["regressions"])
    cycle = qfarm(env, "compare", "good", "bad", "good", "bad", "--fail-on-worse")
    assert cycle.returncode == 2 and "--fail-on-worse judges two runs" in cycle.stderr


def test_a_service_that_is_down_exits_1_everywhere(env, tmp_path):
    """Redis down is a service failing (1), as the search backend's failure is, never bad
    input (2); the hint names the port of the URL that was tried."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(env, QFARM_REDIS_URL=f"redis://127.0.0.1:{port}/0",
               QFARM_LLM_ENDPOINTS=f"http://127.0.0.1:{port}")
    (tmp_path / "q.txt").write_text("What is jazz?\n")
    for args in (("cancel", "20260101-000000-abcdef"), ("sweep", str(tmp_path / "q.txt"))):
        res = qfarm(env, *args)
        assert res.returncode == 1, (args, res.stderr)
        assert f"cannot reach Redis at redis://127.0.0.1:{port}/0" in res.stderr
        assert f"redis-server --port {port}" in res.stderr
    search = qfarm(dict(env, QFARM_RETRIEVER="elasticsearch",
                        QFARM_ES_URL=f"http://127.0.0.1:{port}"), "search", "jazz")
    assert search.returncode == 1, search.stderr
