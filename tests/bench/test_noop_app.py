"""The benchmark-only no-op task is registered by the benchmark, not by the product."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def registered(module: str) -> list[str]:
    """The task names of the app ``celery -A module`` finds, in a fresh process."""
    code = f"from celery.app.utils import find_app; print(' '.join(sorted(find_app({module!r}).tasks)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True, timeout=60)
    return out.stdout.split()


def test_the_product_has_no_noop_task_and_the_benchmark_app_adds_it():
    from qfarm.common import keys

    product = registered("qfarm.worker")
    assert {stage.task for stage in keys.STAGES} <= set(product)
    assert "qfarm.noop" not in product
    assert set(registered("bench.perf.noop_app")) == set(product) | {"qfarm.noop"}
