"""A run whose disk fills up: one line, the run stopped as interrupted, its rows kept.

The disk is a real one: a 300 KiB tmpfs this test mounts (root only, as in CI; skipped
with one line elsewhere)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
QFARM = str(Path(sys.executable).parent / "qfarm")


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_stops_the_run_with_one_line_and_keeps_its_rows(tiny_disk: Path, default_index):
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env.update(QFARM_INDEX_PATH=str(default_index))
    res = subprocess.run([QFARM, "sweep", "general", "--eager", "--keep-answers", "--quiet", "-n", "2",
                          "--out", str(tiny_disk)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("qfarm: error:")]
    assert len(errors) == 1 and "no space left on the device" in errors[0], res.stderr
    assert "--resume" in errors[0]
    (run_dir,) = tiny_disk.iterdir()
    rows = (run_dir / "rows.jsonl").read_bytes().splitlines()
    assert rows and all(json.loads(r)["job_id"] for r in rows[:-1])  # all but a cut last line
    assert not list(run_dir.glob("*.tmp")), "a half-written file was left behind"
    report = subprocess.run([QFARM, "report", str(run_dir)], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert report.returncode == 1 and "Traceback" not in report.stderr, report.stderr
    assert "no space left on device" in report.stderr
