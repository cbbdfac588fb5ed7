"""The worker's start: a worker Redis refuses exits at once instead of retrying in vain."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).parent / "celery")


@pytest.mark.slow
def test_a_worker_with_a_wrong_redis_password_exits_at_once(own_redis, tmp_path: Path) -> None:
    url = own_redis("--requirepass", "right-secret", password="right-secret")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env.update(QFARM_REDIS_URL=url.replace("right-secret", "wrong-secret"),
               QFARM_LLM_ENDPOINTS="http://127.0.0.1:9", QFARM_DATA_DIR=str(tmp_path))
    started = time.monotonic()
    proc = subprocess.run([CELERY, "-A", "qfarm.worker", "worker", "-Q", "verify", "-P", "solo",
                           "--without-gossip", "--without-mingle"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert time.monotonic() - started < 60  # not a hundred connection retries
    assert "refused this worker's credentials" in proc.stderr
    assert "wrong-secret" not in proc.stderr and "right-secret" not in proc.stderr


def test_a_worker_process_keeps_the_runners_interpreter_settings_for_its_life() -> None:
    import gc

    from qfarm.worker import celery as celery_app
    from qfarm.worker.runner import GC_THRESHOLD0, SWITCH_INTERVAL_S

    before = (sys.getswitchinterval(), gc.get_threshold())
    try:
        celery_app._tune_interpreter()
        celery_app._tune_interpreter()  # the signal again: still the one setting
        assert len(celery_app._tuned) == 1
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
        assert gc.get_threshold()[0] == GC_THRESHOLD0
    finally:
        while celery_app._tuned:
            celery_app._tuned.pop().__exit__(None, None, None)
    assert (sys.getswitchinterval(), gc.get_threshold()) == before
