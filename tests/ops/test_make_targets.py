"""The README's two commands: `make run` installs only what the product needs, `make test`
everything its tests need (read from `make -n`, which prints the recipes without running them)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def recipe(target: str) -> str:
    if shutil.which("make") is None:
        pytest.fail("make is needed: the README's commands are make targets")
    # -B: every prerequisite's recipe, as on a fresh clone, whatever is installed here
    done = subprocess.run(["make", "-n", "-B", target], cwd=REPO, capture_output=True,
                          text=True, check=True)
    return done.stdout


def test_make_run_installs_no_test_only_client() -> None:
    steps = recipe("run")
    assert "qfarm sweep" in steps
    assert "elasticsearch8" not in steps and "es8-client" not in steps
    assert "ensure-chromium" not in steps


def test_make_test_installs_what_its_tests_need() -> None:
    steps = recipe("test")
    assert "ensure-chromium.sh" in steps and "ensure-redis.sh" in steps
    (es8,) = [line for line in steps.splitlines() if "elasticsearch8" in line]
    # the venv has the client's other dependencies; resolving them again into the
    # directory made pip print dependency-conflict ERROR lines
    assert "--no-deps" in es8
    assert steps.index("ensure-chromium.sh") < steps.index("run-tests.sh")
