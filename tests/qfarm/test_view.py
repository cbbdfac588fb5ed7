"""`qfarm view` refuses what it cannot serve with one clear line and a non-zero exit."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from qfarm.cli import main


def test_missing_results_dir_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "no such results directory" in err and str(tmp_path / "nope") in err


def test_busy_port_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["view", str(tmp_path), "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("no_redis", [True, False])
def test_view_serves_without_redis_and_says_so(tmp_path: Path, unused_port: int, no_redis: bool) -> None:
    """No Redis at QFARM_REDIS_URL (or --no-redis): the runs page is served, with one note."""
    import os
    import re
    import subprocess
    import sys
    import urllib.request

    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env["QFARM_REDIS_URL"] = f"redis://127.0.0.1:{unused_port}/0"
    args = [sys.executable, "-m", "qfarm.cli", "view", str(tmp_path), "--port", "0"]
    proc = subprocess.Popen(args + (["--no-redis"] if no_redis else []),
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        url = re.search(r"http://[\d.]+:\d+/", line)
        assert url, f"qfarm view did not start: {line!r}"
        with urllib.request.urlopen(url.group(0), timeout=30) as resp:
            assert resp.status == 200
            html = resp.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    note = re.search(r'<p class="note" id="redis-note">(.*?)</p>', html)
    assert note, "the page names the missing Redis in one line"
    if no_redis:
        assert "No Redis configured" in note.group(1)
    else:
        assert f"127.0.0.1:{unused_port}" in note.group(1) and "not reachable" in note.group(1)
