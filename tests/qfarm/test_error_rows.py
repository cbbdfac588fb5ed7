"""A run whose endpoint failed a third of its requests reads as errored everywhere.

The case: the simulator answering 30% of completions with a body that is not JSON
(``--fault-rate malformed=0.3``), one attempt per request, ``general --sample 30 -n 2``
eagerly. Its sweep exits 3; summary.md, status.json, ``qfarm status`` and ``qfarm report``
say "completed with errors (N, x %)", its headline strict-rate is over the jobs; and
``qfarm compare CLEAN ERRORED --fail-on-worse`` fails on the error rate (README, 'Exit
codes'; docs/reports.md, 'Which rows count').
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .test_exit_codes import qfarm

pytestmark = pytest.mark.slow  # two eager sweeps of 180 jobs against the simulator


@pytest.fixture(scope="module")
def sims():
    from qfarm.ops.sim.launch import start_simulator

    with start_simulator(ttft_ms=0, tpot_ms=0) as clean, \
            start_simulator(ttft_ms=0, tpot_ms=0, fault_rates={"malformed": 0.3}) as broken:
        yield clean.url, broken.url


@pytest.fixture
def env(env):
    """The test Redis database (``qfarm status`` asks Redis and its workers too)."""
    from tests.producer.conftest import redis_url

    return dict(env, QFARM_REDIS_URL=redis_url())


def _sweep(env: dict[str, str], endpoint: str, *extra: str) -> dict:
    env = dict(env, QFARM_LLM_ENDPOINTS=endpoint, QFARM_LLM_MAX_ATTEMPTS="1",
               QFARM_LLM_WAIT_FOR_ENDPOINT_S="0")
    res = qfarm(env, "sweep", "general", "--sample", "30", "-n", "2", "--eager", "--quiet",
                "--json", *extra)
    record = json.loads(res.stdout.strip().splitlines()[-1])
    assert record["exit_code"] == res.returncode, res.stderr
    return record


def test_an_errored_run_reads_as_errored_and_fails_compare(env, sims, tmp_path):
    clean_url, broken_url = sims
    clean = _sweep(env, clean_url)
    assert (clean["exit_code"], clean["errored_rows"]) == (0, 0)
    errored = _sweep(env, broken_url)
    run_id, n_err = errored["run_id"], errored["errored_rows"]
    assert errored["exit_code"] == 3 and errored["rows"] == errored["n_jobs"] == 180
    assert 30 <= n_err <= 80  # about 30% of 180
    words = f"completed with errors ({n_err}, {100 * n_err / 180:.1f} %)"

    run_dir = Path(errored["run_dir"])
    summary = (run_dir / "summary.md").read_text()
    assert f"| status | {words} |" in summary
    assert f"180 of 180 expected; {n_err} of 180 rows are errors" in summary
    assert "| strict-rate (of jobs; errors fail) | error rate (of jobs) | " \
           "strict-rate (of answered) |" in summary
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["status"], status["status_text"]) == ("complete", words)
    assert status["errored_rows"] == n_err and status["max_error_rate"] == 0.0

    shown = qfarm(env, "status", run_id)
    assert shown.returncode == 0 and words in shown.stdout, shown.stdout
    as_json = json.loads(qfarm(env, "status", run_id, "--json").stdout)
    assert as_json["runs"][0]["state_text"] == words
    listed = qfarm(env, "status")
    assert words in listed.stdout

    report = qfarm(env, "report", run_id)
    assert report.returncode == 3 and f"{n_err} of 180 rows errored" in report.stderr

    cmp = qfarm(env, "compare", clean["run_id"], run_id, "--fail-on-worse", "--json")
    assert cmp.returncode == 4, cmp.stderr
    record = json.loads(cmp.stdout)
    worse = {(d["mode"], d["metric"]) for d in record["regressions"]}
    assert {(m, "errors") for m in ("quote", "claim_lattice_pointer", "claim_lattice")} <= worse
    rate = next(d for d in record["deltas"] if (d["mode"], d["metric"]) == ("quote", "errors"))
    assert rate["a"] == 0.0 and rate["low"] > 0 and rate["label"] == "error rate (of jobs)"
    text = qfarm(env, "compare", clean["run_id"], run_id, "--fail-on-worse")
    assert text.returncode == 4 and re.search(r"`quote` error rate \(of jobs\)", text.stderr)
    compare_md = (run_dir / "compare.md").read_text()
    assert f"| error rows | 0 of 180 (0.0 %) | {n_err} of 180 (" in compare_md


def test_report_exits_as_the_sweep_did(env, sims):
    """A sweep that tolerated its error rows (``--max-error-rate``) re-checked by ``qfarm
    report`` without the flag exits 0 as the sweep did; the flag still overrides."""
    record = _sweep(env, sims[1], "--max-error-rate", "0.9")
    assert record["exit_code"] == 0 and record["errored_rows"] > 0
    assert qfarm(env, "report", record["run_id"]).returncode == 0
    assert qfarm(env, "report", record["run_id"], "--max-error-rate", "0").returncode == 3
