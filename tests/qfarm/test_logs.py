"""Logs of real processes: a JSON-log sweep's stderr parses line by line, secrets never
appear at DEBUG, a job's error is one line with its kind, --quiet hides failed attempts."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from qfarm.common.vocab import ExitCode
from qfarm.ops.sim.launch import start_simulator

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
QFARM = str(Path(sys.executable).parent / "qfarm")
API_KEY = "sk-llm-key-5f1e2d3c4b"
TOKEN = "api-token-0123456789abcdef"
REDIS_PASSWORD = "redis-pw-9a8b7c6d"
SECRETS = (API_KEY, TOKEN, REDIS_PASSWORD)


def qfarm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([QFARM, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def flaky_sim():
    """A simulator that wants the API key and fails a third of its requests with a 503."""
    with start_simulator(latency="zero", api_key=API_KEY, fault_rates={"503": 0.35},
                         seed=7) as sim:
        yield sim


def secret_env(env: dict[str, str], sim_url: str) -> dict[str, str]:
    return {
        **env,
        "QFARM_LLM_ENDPOINTS": sim_url, "QFARM_LLM_API_KEY": API_KEY,
        "QFARM_API_TOKENS": f"admin:{TOKEN}",
        "QFARM_REDIS_URL": f"redis://:{REDIS_PASSWORD}@127.0.0.1:6399/0",
        "QFARM_LLM_MAX_ATTEMPTS": "2", "QFARM_LLM_BACKOFF_BASE_S": "0.01",
        "QFARM_LLM_BACKOFF_MAX_S": "0.02", "QFARM_LLM_BREAKER_FAILURES": "1000",
        "QFARM_LLM_HEALTH_INTERVAL_S": "0",
    }


def test_a_json_log_sweep_at_debug_parses_line_by_line_and_holds_no_secret(env, flaky_sim):
    run_env = {**secret_env(env, flaky_sim.url), "QFARM_LOG_FORMAT": "json"}
    done = qfarm(run_env, "sweep", "smoke", "--modes", "quote", "--eager", "--log-level", "debug")
    # Completed with errors (exit 3): the 503s are meant to end some jobs (asserted below).
    assert done.returncode == ExitCode.ROW_ERRORS, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines
    records = [json.loads(line) for line in lines]  # every line one JSON object
    assert all({"time", "level", "role", "logger", "message"} <= set(r) for r in records)
    assert {r["role"] for r in records} == {"cli"}
    for secret in SECRETS:
        assert secret not in done.stderr and secret not in done.stdout
    # Each job that ended in an error: one warning, with its kind and endpoint.
    rows_path = Path(done.stdout.split("rows:", 1)[1].split()[0])
    rows = [json.loads(x) for x in rows_path.read_text().splitlines()]
    errors = {r["job_id"] for r in rows if r["error"]}
    ended = [r for r in records if "ended with an error row" in r["message"]]
    assert errors, "the 503s were meant to end some jobs (raise the fault rate)"
    assert Counter(r["job_id"] for r in ended) == Counter(errors)
    assert all(r["error_kind"] == "llm" and r["level"] == "warning" and r["endpoint"]
               for r in ended)
    assert any("attempt 1 failed" in r["message"] and r["level"] == "info" for r in records)


def test_quiet_prints_no_failed_attempt(env, flaky_sim):
    done = qfarm(secret_env(env, flaky_sim.url), "sweep", "smoke", "--modes", "quote",
                 "--eager", "--quiet", "--max-error-rate", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "attempt" not in done.stderr and "ended with an error row" not in done.stderr


def test_text_logs_are_prefixed_and_redacted(env, flaky_sim):
    done = qfarm(secret_env(env, flaky_sim.url), "--log-level", "info", "sweep", "smoke",
                 "--modes", "quote", "--eager")
    lines = [x for x in done.stderr.splitlines() if "attempt 1 failed" in x]
    assert lines and all(" INFO cli qfarm.llm [run=" in x and " job=" in x for x in lines)
    for secret in SECRETS:
        assert secret not in done.stderr


def test_the_log_handler_writes_to_the_stderr_of_the_moment(monkeypatch) -> None:
    """``main`` run twice in one process (tests, notebooks): the first run's stderr may be
    closed by then, and a handler bound to it lost every later line."""
    import io
    import logging

    from qfarm.cli import main

    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    assert main(["policy"]) == 0
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("qfarm.test").warning("a line after the first stream closed")
    lines = second.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith("a line after the first stream closed"), lines


def test_a_sweep_logs_its_start_and_end_and_its_last_lines_carry_its_run_id(env, flaky_sim):
    run_env = {**secret_env(env, flaky_sim.url), "QFARM_LOG_FORMAT": "json"}
    done = qfarm(run_env, "sweep", "smoke", "--modes", "quote", "--eager", "--log-level", "info")
    records = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    started = [r for r in records if r["message"].startswith("run ") and " started: " in r["message"]]
    assert len(started) == 1 and started[0]["level"] == "info", done.stderr[-3000:]
    run_id = started[0]["run_id"]
    assert started[0]["message"].startswith(f"run {run_id} started: ")
    assert " questions × 1 modes × n=1 = " in started[0]["message"]
    ended = [r for r in records if r["message"].startswith(f"run {run_id} ended ")]
    assert len(ended) == 1 and ended[0]["run_id"] == run_id and ended[0]["level"] == "info"
    # Every line from the start on names the run: the job lines, the gateway's failed
    # attempts, the end, and the command's own closing lines ("completed with errors", paths).
    after = records[records.index(started[0]):]
    missing = [r["message"] for r in after if r.get("run_id") != run_id]
    assert not missing, missing
    closing = [r for r in after if r["logger"] == "qfarm.cli"]
    assert closing and all(r["run_id"] == run_id for r in closing)
    assert any("attempt 1 failed" in r["message"] for r in after)  # the gateway's, named too


def test_an_eager_ask_prints_no_third_party_warning(env):
    # kombu warned "No hostname was supplied" on the eager broker's URL at every eager run.
    with start_simulator(latency="zero", profile="clean") as sim:
        done = qfarm({**env, "QFARM_LLM_ENDPOINTS": sim.url}, "ask", "Who painted the Mona Lisa?",
                     "--mode", "quote", "--eager")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
