"""A job whose row cannot be serialised, on a real farm: it fails alone and the run ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

POISON = ("poisoned", "Who was \ud800 Napoleon?")  # a lone surrogate: no UTF-8 for it


def test_a_question_that_cannot_be_serialised_fails_only_its_own_jobs(redis_server, farm_on, tmp_path, kit):
    """A lone surrogate in one question (enqueued past the loader): its bundle-mates became
    error rows, its own jobs never got one and the follower re-sent them every 10 s until
    detached. Now its jobs are error rows, the others are answered, and the run completes."""
    from qfarm.common.jobs import make_job_id
    from qfarm.common.models import ALL_MODES
    from qfarm.common.questions import question_id_for

    farm = farm_on(redis_server)
    n = 2
    texts = list(kit.questions)
    pairs = [[question_id_for(t), t] for t in texts[:5]] + [list(POISON)] + [
        [question_id_for(t), t] for t in texts[5:]
    ]  # the poison in the middle: its bundles (of 8) hold valid jobs too
    path = tmp_path / "poisoned.json"
    path.write_text(json.dumps(pairs))
    poisoned = {make_job_id(POISON[0], m, i) for m in ALL_MODES for i in range(n)}
    planned = kit.planned_ids(n) | poisoned
    farm.start_worker("cpu", queues="retrieve,verify", pool="prefork", concurrency=2)
    farm.start_worker("gpu", queues="generate", pool="threads", concurrency=4)
    env = {**farm.env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), farm.env.get("PYTHONPATH")]))}
    try:  # the run takes seconds; without a row for each job it never ends
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("poisoned_sweep.py")), str(path), str(n)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        pytest.fail(f"the run did not end in {exc.timeout:.0f} s; its stderr:\n{(err or '')[-3000:]}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    run_id = json.loads(proc.stdout.splitlines()[-1])["run_id"]
    kit.assert_exactly_once(farm, run_id, planned)
    assert "jobs had no row" not in proc.stderr, proc.stderr  # nothing re-sent
    for job_id, row in farm.rows(run_id).items():
        if job_id in poisoned:
            assert row["question"] == "Who was \ufffd Napoleon?"
            assert "cannot be serialised" in row["error"] and "surrogate" in row["error"], row
        else:
            assert row["error"] is None and row["verdict"], row
