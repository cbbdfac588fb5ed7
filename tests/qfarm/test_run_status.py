"""Status tells the truth: a run's summary, the viewer and the API derive it from the rows
and the producer's process; an eager run stopped by a signal says so, can be resumed, and
an incomplete run exits non-zero."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.perf.viewer import write_synthetic_run
from qfarm.producer.reports.summary import write_summary
from qfarm.producer.viewer.router import Viewer

REPO = Path(__file__).resolve().parents[2]
QFARM = str(Path(sys.executable).parent / "qfarm")


def _summary_status(run_dir: Path) -> tuple[str, str]:
    text = write_summary(run_dir).read_text()
    status = next(line for line in text.splitlines() if line.startswith("| status |"))
    rows = next(line for line in text.splitlines() if line.startswith("| rows |"))
    return status, rows


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage", "truncated"])
def test_a_damaged_rows_file_is_not_complete(tmp_path: Path, damage: str):
    run_dir = write_synthetic_run(tmp_path, "run-d", 2)  # status.json says complete
    rows_path = run_dir / "rows.jsonl"
    lines = rows_path.read_bytes().splitlines(keepends=True)
    if damage == "missing":
        rows_path.unlink()
    elif damage == "empty":
        rows_path.write_bytes(b"")
    elif damage == "garbage":
        rows_path.write_bytes(b"\x00\xffnot json\n{oops\n")
    else:
        rows_path.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    status, rows = _summary_status(run_dir)
    kept = len(lines) - 1 if damage == "truncated" else 0
    # Row 5 of the synthetic run is an error row: the kept rows of a truncated file hold it.
    errors = "; 1 of 11 rows are errors (9.1 %)" if damage == "truncated" else ""
    assert rows == f"| rows | {kept} of {len(lines)} expected{errors} |"
    assert status == "| status | incomplete" + (" (1 error row)" if errors else "") + " |"
    assert json.loads(Viewer(tmp_path).handle("/api/progress", {"run": "run-d"}).body)["status"] == "incomplete"


def test_a_killed_eager_run_is_interrupted_not_running(tmp_path: Path):
    run_dir = write_synthetic_run(tmp_path, "run-k", 2, status="running")
    rows_path = run_dir / "rows.jsonl"
    rows_path.write_bytes(b"".join(rows_path.read_bytes().splitlines(keepends=True)[:5]))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    status = json.loads((run_dir / "status.json").read_text())
    status.update(pid=dead.pid, host=os.uname().nodename)
    (run_dir / "status.json").write_text(json.dumps(status))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["eager"] is True
    assert _summary_status(run_dir)[0] == "| status | interrupted |"
    assert json.loads(Viewer(tmp_path).handle("/api/progress", {"run": "run-k"}).body)["status"] == "interrupted"
    status.update(pid=os.getpid())  # the process that runs it is alive: still running
    (run_dir / "status.json").write_text(json.dumps(status))
    assert _summary_status(run_dir)[0] == "| status | running |"


def test_an_incomplete_run_exits_non_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from qfarm.commands.sweep import _report
    from qfarm.producer.api import RunResult
    from qfarm.producer.rundir import read_manifest

    run_dir = write_synthetic_run(tmp_path, "run-i", 2, status="incomplete")
    result = RunResult(read_manifest(run_dir), run_dir, "incomplete", rows_written=10,
                       summary=run_dir / "summary.md")
    assert _report(result, detached=False) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["run run-i is incomplete: 2 of 12 jobs have no row; run them with: "
                   "qfarm sweep --resume run-i --eager"]


# ---------------------------------------------------------------- a real eager run, stopped


@pytest.fixture(scope="module")
def slow_sim():
    from qfarm.ops.sim.launch import start_simulator

    with start_simulator(ttft_ms=400, tpot_ms=0, profile="clean") as sim:
        yield sim.url


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_an_eager_run_stopped_by_a_signal_says_so_and_resumes(tmp_path, env, slow_sim, sig):
    questions = tmp_path / "q.txt"
    questions.write_text("".join(f"What is the river number {i} of Europe?\n" for i in range(12)))
    run_env = {**env, "QFARM_LLM_ENDPOINTS": slow_sim, "QFARM_LLM_MAX_INFLIGHT_PER_ENDPOINT": "2",
               "QFARM_RESULTS_DIR": str(tmp_path / "results")}
    proc = subprocess.Popen([QFARM, "sweep", str(questions), "--modes", "quote", "--eager",
                             "--quiet"], cwd=REPO, env=run_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    results = tmp_path / "results"
    deadline = time.monotonic() + 120
    run_dir = None
    while time.monotonic() < deadline:  # wait for a few rows, then stop it mid-run
        dirs = list(results.glob("*/rows.jsonl")) if results.exists() else []
        if dirs and len(dirs[0].read_bytes().splitlines()) >= 2:
            run_dir = dirs[0].parent
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    assert run_dir is not None, "no rows came"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    rows_before = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()
                   if line.endswith("}")]
    assert 0 < len(rows_before) < 12, err
    # Jobs in flight when the signal came end without a row (--resume runs them), not as
    # error rows that --resume would keep and the run's error policy would fail.
    assert [r["error"] for r in rows_before if r["error"]] == [], err
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        assert json.loads((run_dir / "status.json").read_text())["status"] == "running"
    else:
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        assert f"qfarm sweep --resume {run_dir.name} --eager" in err
        assert json.loads((run_dir / "status.json").read_text())["status"] == "interrupted"
    report = subprocess.run([QFARM, "report", str(run_dir)], cwd=REPO, env=run_env,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 1, report.stderr  # the report is written; the run is not whole
    assert f"run {run_dir.name} is interrupted: " in report.stderr
    assert "| status | interrupted |" in (run_dir / "summary.md").read_text()

    resumed = subprocess.run([QFARM, "sweep", "--resume", run_dir.name, "--eager", "--quiet"],
                             cwd=REPO, env=run_env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == len({r["job_id"] for r in rows}) == 12
    kept = {r["job_id"]: r["finished_at"] for r in rows}
    assert all(kept[r["job_id"]] == r["finished_at"] for r in rows_before)  # not run again
    assert json.loads((run_dir / "status.json").read_text())["status"] == "complete"
    assert "| status | complete |" in (run_dir / "summary.md").read_text()


def test_one_function_words_a_run_for_the_cli_the_api_and_the_viewer():
    """The HTTP API (``qfarm.producer.runs.control.describe_run`` and the rows cursor) and the viewer
    (``qfarm.producer.viewer.source``) all call ``qfarm.common.runstatus.run_state``: none keeps a copy;
    ``qfarm status`` (``qfarm.producer.farm.status``) describes runs through the API's ``describe_run``."""
    import inspect

    from qfarm.common import runstatus
    from qfarm.producer.farm import status as _status
    from qfarm.producer.http import runs
    from qfarm.producer.runs import control
    from qfarm.producer.viewer import source

    for caller in (control, runs, source):
        assert caller.run_state is runstatus.run_state, caller.__name__
    assert "describe_run" in inspect.getsource(_status) and "run_state" not in inspect.getsource(_status)


@pytest.mark.parametrize(("done", "cancelled", "error", "expected"), [
    (3, False, None, "running"),
    (20, False, None, "complete"),
    (3, True, None, "cancelled"),
    (20, True, None, "cancelled"),  # a run cancelled once every job had its row
    (3, False, "worker: manifest unreadable", "failed"),
    (3, True, "worker: manifest unreadable", "failed"),
])
def test_a_redis_run_has_the_same_word_in_the_cli_the_api_and_the_viewer(
    tmp_path, monkeypatch, capsys, done, cancelled, error, expected
):
    import fakeredis

    import qfarm.producer.farm.status
    import qfarm.producer.store
    import qfarm.worker.llm.pool
    from qfarm.cli import main
    from qfarm.common import keys
    from qfarm.common.models import Mode
    from qfarm.common.policy import Policy
    from qfarm.common.settings import Settings
    from qfarm.producer.runs.control import describe_run
    from qfarm.producer.runs.sweep import make_manifest
    from qfarm.producer.store import ProducerStore
    from qfarm.producer.viewer.source import redis_status

    client = fakeredis.FakeRedis()
    store = ProducerStore(client)
    m = make_manifest(
        run_id="run-r", question_file="<test>", question_file_digest="d", n_questions=5,
        modes=[Mode.QUOTE, Mode.CLAIM_LATTICE], n=2, policy=Policy(), model="m", endpoints=[],
        simulated=True, retriever="embedded", index_version=None, corpus=None, eager=False,
    )  # 20 jobs
    store.put_manifest(m)
    for i in range(done):
        client.hset(keys.rows_key("run-r"), f"j{i}", "{}")
    if cancelled:
        store.set_cancelled("run-r", time.time())
    if error:
        client.set(keys.error_key("run-r"), error)

    api = describe_run("run-r", Settings(results_dir=tmp_path), store)["state"]
    viewer = redis_status(store.progress("run-r", m.n_jobs))

    class NoWorkers:  # `qfarm status` asks Celery which workers answer: none here
        class control:  # noqa: N801
            @staticmethod
            def inspect(timeout):
                return type("I", (), {"active_queues": staticmethod(lambda: {})})()

    monkeypatch.setattr(qfarm.producer.store, "connect", lambda url: client)
    monkeypatch.setattr(qfarm.producer.farm.status, "celery_app", lambda settings: NoWorkers)
    monkeypatch.setattr(qfarm.worker.llm.pool, "endpoint_report", lambda settings: [])
    assert main(["status", "run-r"]) == 0
    cli = capsys.readouterr().out.split()[1]
    assert (cli, api, viewer) == (expected, expected, expected)


@pytest.mark.slow
def test_ctrl_c_says_stopping_at_once(tmp_path, env, slow_sim):
    """The run's threads take seconds to end; the command says at once that it heard."""
    import threading

    questions = tmp_path / "q.txt"
    questions.write_text("".join(f"What is the river number {i} of Europe?\n" for i in range(12)))
    run_env = {**env, "QFARM_LLM_ENDPOINTS": slow_sim, "QFARM_LLM_MAX_INFLIGHT_PER_ENDPOINT": "2",
               "QFARM_RESULTS_DIR": str(tmp_path / "results")}
    proc = subprocess.Popen([QFARM, "sweep", str(questions), "--modes", "quote", "--eager",
                             "--quiet"], cwd=REPO, env=run_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    heard: list[tuple[float, str]] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            heard.append((time.monotonic(), line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    results = tmp_path / "results"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the run has begun: a row has landed
        rows = list(results.glob("*/rows.jsonl")) if results.exists() else []
        if rows and rows[0].read_bytes().count(b"\n") >= 1:
            break
        assert proc.poll() is None
        time.sleep(0.05)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    reader.join(timeout=10)
    stopping = [t for t, line in heard if "qfarm: stopping…" in line]
    assert len(stopping) == 1, heard
    assert stopping[0] - sent < 1.0, f"said after {stopping[0] - sent:.1f} s"
