"""A resumed eager run's wall time and throughput leave out the time between its interrupt
and its resume: the run below stopped an hour before it was resumed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

QFARM = str(Path(sys.executable).parent / "qfarm")
HOUR = 3600.0


@pytest.mark.slow
def test_a_run_resumed_an_hour_after_its_interrupt_does_not_count_the_hour(tmp_path, env):
    from qfarm.ops.sim.launch import start_simulator

    questions = tmp_path / "q.txt"
    questions.write_text("What is jazz?\nWho wrote Hamlet?\nWhere is Mount Etna?\n")
    with start_simulator(latency="zero", profile="clean") as sim:
        run_env = {**env, "QFARM_LLM_ENDPOINTS": sim.url}
        first = subprocess.run([QFARM, "sweep", str(questions), "--modes", "quote", "--eager",
                                "--quiet"], env=run_env, capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr
        (run_dir,) = (Path(env["QFARM_RESULTS_DIR"])).iterdir()
        # As if it had been interrupted an hour ago after its first row: every time it
        # recorded an hour earlier, its last rows gone.
        manifest = json.loads((run_dir / "manifest.json").read_text())
        manifest["created_at"] -= HOUR
        (run_dir / "manifest.json").write_text(json.dumps(manifest))
        row = json.loads((run_dir / "rows.jsonl").read_text().splitlines()[0])
        row["started_at"] -= HOUR
        row["finished_at"] -= HOUR
        (run_dir / "rows.jsonl").write_text(json.dumps(row) + "\n")
        status = json.loads((run_dir / "status.json").read_text())
        status.update(status="interrupted", started_at=status["started_at"] - HOUR,
                      finished_at=row["finished_at"])
        (run_dir / "status.json").write_text(json.dumps(status))
        resumed = subprocess.run([QFARM, "sweep", "--resume", run_dir.name, "--eager", "--quiet"],
                                 env=run_env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "complete" and status["paused_s"] >= HOUR
    summary = (run_dir / "summary.md").read_text()
    wall = next(line for line in summary.splitlines() if line.startswith("| wall time |"))
    assert "between an interrupt and its resume left out" in wall
    assert float(wall.split("|")[2].split()[0]) < HOUR  # the run's own seconds, not the hour
