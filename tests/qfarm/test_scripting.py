"""The command line for scripts: `qfarm status` reads run directories (eager runs, Redis
down) and gives advice that works, `--json` on status, sweep and policy, `--limit` and
`--sample` recorded in the manifest and kept by `--resume`, `--version`, help that shows
choices and defaults."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.perf.viewer import write_synthetic_run
from qfarm.cli import main
from qfarm.common.vocab import ExitCode

REPO = Path(__file__).resolve().parents[2]
QFARM = str(Path(sys.executable).parent / "qfarm")
REDIS_PORT = int(os.environ.get("QFARM_TEST_REDIS_PORT", "6379"))


def qfarm(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([QFARM, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


# ---------------------------------------------------------------- status of a run on disk


@pytest.mark.slow
def test_status_reads_an_eager_run_from_its_directory_with_redis_up_or_down(env, unused_port):
    results = Path(env["QFARM_RESULTS_DIR"])
    write_synthetic_run(results, "run-e", 2)  # an eager run: never in Redis; row 5 errored
    up = dict(env, QFARM_REDIS_URL=f"redis://127.0.0.1:{REDIS_PORT}/0")
    down = dict(env, QFARM_REDIS_URL=f"redis://127.0.0.1:{unused_port}/0")

    res = qfarm(up, "status", "run-e")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("run-e  completed with errors (1, 8.3 %) 12/12 rows  failed=1  "
                                 "modes=quote,"), res.stdout
    assert "from disk (eager)" in res.stdout and "queued messages:" in res.stdout

    res = qfarm(down, "status", "run-e")
    assert res.returncode == 0, res.stderr
    first, second = res.stdout.splitlines()[:2]
    assert first.startswith(f"Redis at redis://127.0.0.1:{unused_port}/0 is unreachable (")
    assert "showing the run directories" in first
    assert second.startswith("run-e  completed with errors (1, 8.3 %) 12/12 rows  failed=1")
    assert "--eager" not in res.stdout + res.stderr  # `status` takes no --eager

    res = qfarm(down, "status", "no-such-run")
    assert res.returncode == 2
    assert "run no-such-run: no run directory" in res.stderr and "--results-dir" in res.stderr
    assert "--eager" not in res.stderr

    res = qfarm(down, "status", "--json")
    assert res.returncode == 0, res.stderr
    status = json.loads(res.stdout)
    assert status["redis_error"].startswith("Redis at ") and status["workers"] is None
    assert [(r["run_id"], r["state"], r["source"], r["done"]) for r in status["runs"]] == [
        ("run-e", "complete", "disk", 12)]

    elsewhere = dict(down, QFARM_RESULTS_DIR=str(results.parent / "elsewhere"))
    res = qfarm(elsewhere, "status", "run-e", "--results-dir", str(results))
    assert res.returncode == 0 and "run-e  complete" in res.stdout, res.stderr


# ---------------------------------------------------------------- --limit and --sample


@pytest.mark.slow
def test_a_limited_sweep_says_so_and_resume_keeps_its_questions(env, tmp_path):
    res = qfarm(env, "sweep", "smoke", "--modes", "quote", "--eager", "--quiet", "--sample", "3",
                "--seed", "7", "--json")
    assert res.returncode == 0, res.stderr
    record = json.loads(res.stdout)
    assert record["selection"] == {"limit": None, "sample": 3, "seed": 7, "of": 15}
    run_dir = Path(record["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["n_questions"] == 3 and manifest["n_jobs"] == 3
    assert manifest["selection"] == record["selection"]
    assert "(LIMITED: a sample (`--sample 3 --seed 7`) of the file's 15 questions)" in (
        run_dir / "summary.md").read_text()
    rows = (run_dir / "rows.jsonl").read_text().splitlines()
    drawn = {json.loads(line)["job_id"] for line in rows}

    (run_dir / "rows.jsonl").write_text(rows[0] + "\n")  # as if killed after one row
    status = json.loads((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(json.dumps({**status, "status": "interrupted"}))
    resumed = qfarm(env, "sweep", "--resume", run_dir.name, "--eager", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    again = {json.loads(line)["job_id"] for line in (run_dir / "rows.jsonl").read_text().splitlines()}
    assert again == drawn  # the same three questions, not the file's first ones

    limited = qfarm(env, "eval-retrieval", "independent_heldout", "--limit", "4", "--out",
                    str(tmp_path / "r.json"))
    assert limited.returncode == 0, limited.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["n_questions"] == 4 and report["selection"]["limit"] == 4


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "needle"), [
    (["--limit", "0"], "--limit 0: the number of questions"),
    (["--limit", "2", "--sample", "2"], "give one of them"),
    (["--seed", "3"], "--seed 3 chooses which questions --sample takes"),
])
def test_a_bad_selection_stops_the_sweep_before_anything_runs(env, flags, needle):
    res = qfarm(env, "sweep", "smoke", "--eager", *flags)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("qfarm: error: ") and needle in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not Path(env["QFARM_RESULTS_DIR"]).exists()


# ---------------------------------------------------------------- --version, help, --json


def test_version_names_the_release_and_the_rule_versions(capsys: pytest.CaptureFixture[str]):
    from qfarm.common import versions

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert re.match(r"qfarm \S+ \(verifier-v\d+, ", out), out
    assert versions.VERIFIER_VERSION in out and versions.PROMPT_VERSION in out
    assert out.count("\n") == 1  # one line, whatever the terminal's width


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())  # unwrapped


def test_help_shows_the_modes_and_defaults_and_no_doubled_percent(capsys):
    sweep = _help(capsys, "sweep")
    assert "from: quote, claim_lattice_pointer, claim_lattice (default: all three)" in sweep
    assert "--max-error-rate R" in sweep and "--limit N" in sweep and "--sample N" in sweep
    ask = _help(capsys, "ask")
    assert "{quote,claim_lattice_pointer,claim_lattice}" in ask
    assert "default claim_lattice_pointer" in ask
    compare = _help(capsys, "compare")
    assert "95% interval" in compare and "%%" not in compare and "--fail-on-worse" in compare
    assert "Exit codes: 0" in _help(capsys)


def test_policy_json_is_the_resolved_policy(capsys):
    assert main(["policy", "--json", "--policy", "top_k=3"]) == 0
    assert json.loads(capsys.readouterr().out)["top_k"] == 3


def test_help_names_the_exit_codes_from_their_enum(capsys):
    top = _help(capsys)
    for code in (ExitCode.OK, ExitCode.FAILED, ExitCode.USAGE, ExitCode.ROW_ERRORS,
                 ExitCode.WORSE, ExitCode.INTERRUPTED):
        assert f" {code:d} " in top
    # No literal exit code in the command line's strings: each is written from ExitCode.
    literal = re.compile(r"\b(exits?|exit code is|Exit codes:)\s+\d")
    found = [
        f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}"
        for path in sorted((REPO / "qfarm").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and literal.search(node.value)
    ]
    assert found == []
