"""The sweep's progress bar: per-stage rates over recent seconds, from its own samples."""

from __future__ import annotations

import io

import pytest

from qfarm.commands import sweep as sweep_cmd
from qfarm.producer.store import Progress


def _prog(done: int, retrieve: int, verify: int) -> Progress:
    return Progress(total=1000, done=done, failed=0,
                    stages={"retrieve": retrieve, "verify": verify}, cancelled=False)  # fmt: skip


def test_stage_rates_follow_the_jobs_not_the_time_before_the_first_report(monkeypatch) -> None:
    now = [0.0]  # the bar is made at 0 s; its reports come from 30 s on
    monkeypatch.setattr(sweep_cmd.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(sweep_cmd.sys, "stderr", io.StringIO())
    bar = sweep_cmd._ProgressBar(quiet=True)
    for t, (done, retrieve, verify) in [(30.0, (0, 100, 0)), (35.0, (50, 150, 50)),
                                        (40.0, (100, 200, 100))]:  # fmt: skip
        now[0] = t
        bar.show(_prog(done, retrieve, verify))
    postfix = bar.bar.postfix  # type: ignore[union-attr]
    assert "retrieve=10.0/s" in postfix and "verify=10.0/s" in postfix, postfix
    bar.close()


@pytest.fixture(autouse=True)
def _no_tqdm_monitor(monkeypatch) -> None:
    import tqdm

    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)
